#!/usr/bin/env bash
# Writes the Slurm batch script that runs a strategy-search plan as a job array: one array task per
# plan line, each an independent `shardscope-cli search task` writing its own SQLite store
# (OUTDIR/task-K.sqlite), so a task that fails or is killed is simply submitted again.
#
#   scripts/sweep-slurm.sh PLAN.jsonl OUTDIR [options] > sweep.sbatch
#   sbatch sweep.sbatch                      (or: sbatch --wait sweep.sbatch)
#   shardscope-cli runs merge all.sqlite OUTDIR/task-*.sqlite
#   shardscope-cli search report all.sqlite --plan PLAN.jsonl     (lists the tasks with no run)
#
# Options:
#   --cli PATH          the shardscope-cli every task runs (default: the one next to this script's
#                       build, build/release/app/shardscope-cli, made absolute)
#   --array LIST        the array indices to run (default 1-N, N = the plan's lines); for a
#                       re-run of missing tasks: --array 5,17,230-233
#   --max-running K     at most K tasks at once (Slurm's "%K")
#   --partition NAME    --time HH:MM:SS    --mem SIZE    --job-name NAME
#
# The script only writes text: it runs without Slurm (tests check what it writes, and running the
# written script with SLURM_ARRAY_TASK_ID set runs that one task, as Slurm would). Slurm 22.05
# (Debian 12's slurm-wlm) and later read it.
set -euo pipefail

usage() {
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[[ $# -ge 2 ]] || usage
plan=$1
outdir=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
cli="$here/build/release/app/shardscope-cli"
array=""
max_running=""
partition=""
time_limit=""
mem=""
job_name="shardscope-sweep"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cli) cli=$2; shift 2 ;;
    --array) array=$2; shift 2 ;;
    --max-running) max_running=$2; shift 2 ;;
    --partition) partition=$2; shift 2 ;;
    --time) time_limit=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --job-name) job_name=$2; shift 2 ;;
    *) echo "sweep-slurm.sh: unknown option '$1'" >&2; usage ;;
  esac
done

[[ -f "$plan" ]] || { echo "sweep-slurm.sh: no plan file '$plan' (write one with: shardscope-cli search plan MODEL ... -o PLAN.jsonl)" >&2; exit 1; }
tasks=$(grep -c . "$plan" || true)
[[ "$tasks" -ge 1 ]] || { echo "sweep-slurm.sh: '$plan' has no candidates" >&2; exit 1; }
if [[ -z "$array" ]]; then array="1-$tasks"; fi
[[ "$array" =~ ^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$ ]] || { echo "sweep-slurm.sh: --array '$array' is not a list such as 1-100 or 5,17,230-233" >&2; exit 1; }
if [[ -n "$max_running" ]]; then
  [[ "$max_running" =~ ^[1-9][0-9]*$ ]] || { echo "sweep-slurm.sh: --max-running takes a positive integer" >&2; exit 1; }
  array="$array%$max_running"
fi
case "$cli" in /*) ;; *) cli="$(pwd)/$cli" ;; esac
case "$plan" in /*) ;; *) plan="$(pwd)/$plan" ;; esac
case "$outdir" in /*) ;; *) outdir="$(pwd)/$outdir" ;; esac
mkdir -p "$outdir/logs"

q() { printf '%q' "$1"; }

cat <<EOF
#!/usr/bin/env bash
# A strategy-search sweep: $tasks candidates of $(basename "$plan"), one array task each.
#SBATCH --job-name=$job_name
#SBATCH --array=$array
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --output=$outdir/logs/task-%a.out
#SBATCH --error=$outdir/logs/task-%a.out
EOF
[[ -n "$partition" ]] && echo "#SBATCH --partition=$partition"
[[ -n "$time_limit" ]] && echo "#SBATCH --time=$time_limit"
[[ -n "$mem" ]] && echo "#SBATCH --mem=$mem"
cat <<EOF
set -euo pipefail
: "\${SLURM_ARRAY_TASK_ID:?run this through sbatch, or set SLURM_ARRAY_TASK_ID to a plan line}"
db=$(q "$outdir")/task-\$SLURM_ARRAY_TASK_ID.sqlite
# A re-run starts from an empty store: what a killed run left is discarded (the merge replaces a
# run with the same key anyway, so nothing is duplicated either way).
rm -f "\$db" "\$db-journal" "\$db-wal" "\$db-shm"
exec $(q "$cli") search task $(q "$plan") --index "\$SLURM_ARRAY_TASK_ID" --db "\$db"
EOF
