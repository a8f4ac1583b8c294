#!/usr/bin/env bash
# One command for a new user: install what is missing, build, and start the GUI on the default
# example (a Transformer layer on a 4x4 mesh with GSPMD Table 1 annotations). Extra arguments are
# passed to shardscope (e.g. a .hlo file to open).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh release
exec ./build/release/app/shardscope "$@"
