#!/usr/bin/env bash
# The Slurm sweep end to end on a one-node cluster started here (munged + slurmctld + slurmd on
# localhost, private sockets, ports, state and spool directories in a temporary directory; nothing
# system-wide is touched): a small search plan runs as a job array written by sweep-slurm.sh, the
# task stores are merged, and every plan line must have exactly one run. Then one task is killed
# half way, re-submitted alone (--array K), and the merge must still hold every run exactly once.
#
#   scripts/test-slurm-sweep.sh [path/to/shardscope-cli]
#
# Exit status: 0 passed, 1 failed, 77 skipped (Slurm or munge not installed, or not root: slurmd
# needs root to run jobs as the submitting user).
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cli=${1:-$here/build/release/app/shardscope-cli}
for tool in munged slurmctld slurmd sbatch squeue scontrol; do
  command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool is not installed (Debian: slurm-wlm, munge)"; exit 77; }
done
[[ $(id -u) -eq 0 ]] || { echo "SKIP: a one-node cluster needs root for slurmd"; exit 77; }
[[ -x "$cli" ]] || { echo "FAIL: no shardscope-cli at $cli"; exit 1; }

work=$(mktemp -d /tmp/slurm-sweep.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  [[ -n "${KEEP:-}" ]] || rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "--- $f"; tail -n 20 "$f"; done; exit 1; }

# Free ports for this cluster: a random one nothing answers on (bash's /dev/tcp; no python needed).
port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    [[ "$p" != "${ctld_port:-}" ]] || continue
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}
ctld_port=$(port)
slurmd_port=$(port)
mkdir -p "$work/state" "$work/spool" "$work/munge" "$work/sweep"
chmod 711 "$work/munge"

# munge: a key of our own and a private socket.
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge/munge.key"
munged -F --force --key-file="$work/munge/munge.key" --socket="$work/munge/socket" \
  --pid-file="$work/munge/munged.pid" --log-file="$work/munged.log" --seed-file="$work/munge/seed" >"$work/munged.out.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [[ -S "$work/munge/socket" ]] && break; sleep 0.1; done
[[ -S "$work/munge/socket" ]] || fail "munged did not start"

cpus=$(nproc)
cat >"$work/slurm.conf" <<EOF
ClusterName=shardscope-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/socket
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
NodeName=localhost NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$work/slurm.conf

slurmctld -D -i -f "$SLURM_CONF" >"$work/slurmctld.out.log" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N localhost >"$work/slurmd.out.log" 2>&1 &
slurmd_pid=$!
pids+=($slurmd_pid)
for _ in $(seq 100); do
  # slurmd gone (e.g. no cgroup filesystem under /sys in a chroot): say why at once.
  kill -0 "$slurmd_pid" 2>/dev/null || fail "slurmd exited: $(tail -n 3 "$work/slurmd.out.log" | tr '\n' ' ')"
  # slurmd alive but unable to reach the controller: it retries for ever; say why at once.
  grep -q "Unable to register" "$work/slurmd.out.log" 2>/dev/null &&
    fail "slurmd cannot register: $(tail -n 3 "$work/slurmd.out.log" | tr '\n' ' ')"
  state=$(timeout 5 sinfo -h -n localhost -o %T 2>/dev/null || true)
  [[ "$state" == idle* ]] && break
  sleep 0.2
done
[[ "${state:-}" == idle* ]] || fail "the node did not become idle (state: ${state:-none})"
echo "cluster up: slurmctld :$ctld_port, slurmd :$slurmd_port, $cpus CPUs"

# A small search: the Transformer's in-layer and data-parallel candidates on 8 TPU v4 chips.
plan=$work/plan.jsonl
"$cli" search plan transformer --chip tpu-v4 --devices 8 --family in-layer,data-parallel \
  --set layers=2 --set batch=16 --set seq=128 --set model=512 --set heads=8 --set head_dim=64 --set hidden=2048 \
  -o "$plan" >"$work/plan.log" 2>&1 || fail "search plan"
tasks=$(grep -c . "$plan")
echo "plan: $tasks tasks"

"$here/scripts/sweep-slurm.sh" "$plan" "$work/sweep" --cli "$cli" --time 00:10:00 >"$work/sweep.sbatch" || fail "sweep-slurm.sh"
sbatch --wait "$work/sweep.sbatch" >"$work/sbatch.log" 2>&1 || fail "the job array failed: $(cat "$work/sbatch.log")"

merge() { "$cli" runs merge "$work/all.sqlite" "$work"/sweep/task-*.sqlite; }
check() {
  local report
  report=$("$cli" search report "$work/all.sqlite" --plan "$plan") || fail "report: $report"
  grep -q "$tasks of $tasks tasks have a run" <<<"$report" || fail "not every task arrived: $report"
  local runs
  runs=$(sqlite3 "$work/all.sqlite" "select count(*), count(distinct run_key) from runs")
  [[ "$runs" == "$tasks|$tasks" ]] || fail "runs in the merged store (count|distinct keys): $runs, expected $tasks|$tasks"
}
merge >"$work/merge.log" || fail "merge: $(cat "$work/merge.log")"
check
echo "array: $tasks tasks ran, merged, one run each"

# Task 2 killed half way: cancel it while it runs, re-submit it alone, merge again (twice).
rm -f "$work/sweep/task-2.sqlite"
job=$(sbatch --parsable --array=2 "$work/sweep.sbatch") || fail "sbatch"
for _ in $(seq 100); do
  [[ "$(squeue -h -j "$job" -o %T 2>/dev/null)" == RUNNING ]] && break
  sleep 0.05
done
scancel --signal=KILL "$job" 2>/dev/null
for _ in $(seq 100); do [[ -z "$(squeue -h -j "$job" 2>/dev/null)" ]] && break; sleep 0.1; done
"$here/scripts/sweep-slurm.sh" "$plan" "$work/sweep" --cli "$cli" --array 2 >"$work/rerun.sbatch" || fail "sweep-slurm.sh --array"
sbatch --wait "$work/rerun.sbatch" >>"$work/sbatch.log" 2>&1 || fail "the re-run failed"
merge >>"$work/merge.log" || fail "merge after the re-run"
merge >>"$work/merge.log" || fail "second merge"
check
echo "PASS: $tasks tasks through a Slurm job array; task 2 killed, re-run and merged; no run duplicated or lost"
