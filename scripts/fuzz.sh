#!/usr/bin/env bash
# Runs every fuzz target (docs/fuzzing.md) for SECONDS seconds each, FUZZ_JOBS at a time, under the
# `fuzz` preset (clang, libFuzzer, ASan + UBSan):
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]       default: 60 seconds, every target
#
# Builds the preset when needed, makes the seeds (fuzz_seeds: the model zoo, the tests' modules and
# ../shared when present), and keeps each target's growing corpus in build/fuzz/corpus/<target>
# between runs. A finding (crash, sanitizer report, leak, timeout, out of memory) leaves its input
# in build/fuzz/findings/ and makes the script exit 1 with the command that reproduces it. Installs
# clang and its runtimes first when missing (scripts/install-deps.sh --clang). Environment:
# SHARDSCOPE_SHARED_DIR (default ../shared beside the checkout), FUZZ_NICE (default 10), FUZZ_JOBS
# (targets run at once; default: the number of cores), FUZZ_SEED (libFuzzer's -seed: a fixed seed
# makes a run repeatable on one commit — CI's fresh-machine check uses 1, so a pre-push run of it
# explores the same inputs; unset, every run draws its own and explores further).
# A finding's input is also printed base64-encoded (up to 16 KiB), so a log from a machine that is
# gone (CI's fresh root) still reproduces it.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
shift || true
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=(hlo_roundtrip sharding_roundtrip pipeline_text pipeline_generated project_file chip_json run_store)
fi
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [[ "$seconds" -lt 1 ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2
  exit 2
fi
./scripts/install-deps.sh --clang

build=build/fuzz
shared="${SHARDSCOPE_SHARED_DIR:-$(cd .. && pwd)/shared}"
nice_level="${FUZZ_NICE:-10}"

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake --preset fuzz -DSHARDSCOPE_SHARED_DIR="$shared" >/dev/null
fi
# The build's output goes to a log; when the build fails, its end is shown (a compile error that
# only clang reports must not read as a bare "exit 1").
mkdir -p "$build/logs"
if ! nice -n "$nice_level" cmake --build --preset fuzz -j2 >"$build/logs/build.log" 2>&1; then
  echo "fuzz: the build failed; the end of $build/logs/build.log:" >&2
  grep -E -B2 -A8 'error|FAILED' "$build/logs/build.log" | tail -60 >&2 || tail -60 "$build/logs/build.log" >&2
  exit 1
fi

seeds="$build/fuzz/seeds"
rm -rf "$seeds"
"$build/fuzz/fuzz_seeds" "$seeds" "$PWD" "$shared"
mkdir -p "$build/findings" "$build/logs"

# One target: its libFuzzer run, then its row of the summary (in $build/logs/<target>.row) and its
# exit status (<target>.status). Targets run FUZZ_JOBS at a time (default: the number of cores).
run_target() {
  local t=$1 binary="$build/fuzz/fuzz_$1" corpus="$build/corpus/$1" log="$build/logs/$1.log" status=0
  local dict=()
  mkdir -p "$corpus"
  case "$t" in hlo_roundtrip | pipeline_text | sharding_roundtrip) dict=(-dict="$seeds/hlo.dict") ;; esac
  local seed=()
  [[ -n "${FUZZ_SEED:-}" ]] && seed=(-seed="$FUZZ_SEED")
  SHARDSCOPE_FUZZ_STATS=1 nice -n "$nice_level" "$binary" "${seed[@]}" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/findings/$t-" "${dict[@]}" \
    "$corpus" "$seeds/$t" "fuzz/corpus/$t" >"$log" 2>&1 || status=$?
  local execs rate cov size reach
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  size=$(find "$corpus" -type f | wc -l)
  reach=$(sed -nE 's/^  (partitioned|verified equal|round trip equal|written and read back equal|chip read|run loaded|sharding round trip equal) +[0-9]+ +\(([0-9.]+%) of inputs\)$/\1 \2/p' "$log" | paste -sd, - | sed 's/,/, /g')
  printf '%-20s %12s %8s %8s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "$size" "$reach" >"$build/logs/$t.row"
  echo "$status" >"$build/logs/$t.status"
}

for t in "${targets[@]}"; do
  if [[ ! -x "$build/fuzz/fuzz_$t" ]]; then
    echo "fuzz: unknown target '$t'" >&2
    exit 2
  fi
  rm -f "$build/logs/$t.row" "$build/logs/$t.status"
done
jobs_max="${FUZZ_JOBS:-$(nproc)}"
for t in "${targets[@]}"; do
  while [[ $(jobs -rp | wc -l) -ge $jobs_max ]]; do wait -n || true; done
  run_target "$t" &
done
wait

failed=()
printf '\n%-20s %12s %8s %8s %8s  %s\n' target executions exec/s cov corpus "reach (of all executions)"
for t in "${targets[@]}"; do
  cat "$build/logs/$t.row" 2>/dev/null || printf '%-20s (no result)\n' "$t"
  status=$(cat "$build/logs/$t.status" 2>/dev/null || echo 1)
  if [[ $status -ne 0 ]]; then
    failed+=("$t")
    log="$build/logs/$t.log" binary="$build/fuzz/fuzz_$t"
    grep -m3 -E 'FINDING|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' "$log" | sed 's/^/    /' || true
    artifact=$(grep -o "Test unit written to .*" "$log" | tail -1 | sed 's/Test unit written to //')
    echo "    input: ${artifact:-see $log}"
    echo "    reproduce: $binary ${artifact:-INPUT}    minimise: $binary -minimize_crash=1 -runs=20000 ${artifact:-INPUT}"
    if [[ -n "$artifact" && -f "$artifact" && $(stat -c %s "$artifact") -le 16384 ]]; then
      echo "    the input, base64 (decode: base64 -d > INPUT):"
      base64 -w 100 "$artifact" | sed 's/^/      /'
    fi
  fi
done
echo "logs: $build/logs/"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: FINDINGS in ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: no findings (${#targets[@]} targets, ${seconds}s each)"
