#!/usr/bin/env bash
# Builds the asan preset (AddressSanitizer + UndefinedBehaviorSanitizer, LeakSanitizer with
# tests/lsan.supp for third-party leaks only) and runs the whole test suite under it. Fails when a
# test fails or when any sanitizer report was written — also one from a child process (the CLI or
# the GUI started by a test) whose exit code the test did not look at. Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh asan
reports=build/asan/sanitizer-reports
rm -rf "$reports"
mkdir -p "$reports"
export QT_QPA_PLATFORM=offscreen
status=0
ctest --preset asan -j"$(nproc)" "$@" || status=$?
shopt -s nullglob
found=("$reports"/report.*)
if [ ${#found[@]} -gt 0 ]; then
  for f in "${found[@]}"; do echo "===== $f"; cat "$f"; done
  echo "test-asan: ${#found[@]} sanitizer report(s), printed above (files in $reports)" >&2
  status=1
fi
[ "$status" -eq 0 ] && echo "test-asan: suite passed, no sanitizer report"
exit "$status"
