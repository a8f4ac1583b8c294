#!/usr/bin/env bash
# One command: install what is missing, build, and run the whole test suite (headless).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh release
export QT_QPA_PLATFORM=offscreen
ctest --preset release -j"$(nproc)" "$@"
