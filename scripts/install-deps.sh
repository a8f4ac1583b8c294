#!/usr/bin/env bash
# Installs ShardScope's build, test, packaging and runtime dependencies from Debian 12 packages —
# only those missing. Every package the project needs is named here explicitly: the install uses
# --no-install-recommends, so nothing may come in only as a Recommends of something else (that is
# how libqt6opengl6-dev went missing on a minimal system). scripts/fresh-machine-check.sh proves the
# list on a minimal Debian 12 root (mmdebstrap --variant=minbase bookworm).
# Idempotent: when everything is present it checks and returns in well under a second.
#
#   scripts/install-deps.sh            what the release and asan presets need (build, test, package)
#   scripts/install-deps.sh --clang    also clang 14 with its sanitizer and libFuzzer runtimes, for the
#                                      clang and fuzz presets (scripts/fuzz.sh calls it so)
#   scripts/install-deps.sh --slurm    also Slurm (slurmctld, slurmd, the client commands) and munge, for
#                                      scripts/test-slurm-sweep.sh's one-node cluster (docs/search.md)
set -euo pipefail

with_clang=0 with_slurm=0
for arg in "$@"; do
  case "$arg" in
    --clang) with_clang=1 ;;
    --slurm) with_slurm=1 ;;
    *) echo "install-deps: unknown option $arg (known: --clang, --slurm)" >&2; exit 2 ;;
  esac
done

packages=(
  # compiler, build tools, version control
  build-essential g++ make cmake ninja-build pkg-config ccache
  git ca-certificates            # ca-certificates: only a Recommends of git, needed to clone over https
  # libraries the code builds against
  qt6-base-dev qt6-base-dev-tools qt6-charts-dev qt6-svg-dev
  libqt6opengl6-dev              # Qt6Charts needs Qt6OpenGL; only a Recommends of qt6-base-dev
  libgl-dev
  libgraphviz-dev graphviz libeigen3-dev libsqlite3-dev
  coinor-libcbc-dev              # the MILP solver of the auto-sharding integer program (app/search)
  libjemalloc-dev                # the executables' allocator (CMakeLists.txt, SHARDSCOPE_JEMALLOC)
  # fonts for the GUI, the Graphviz layout (pango) and the offscreen screenshots
  fontconfig fonts-dejavu-core
  # a display for the GUI on a machine without one, and a look at the screenshots
  xvfb xauth imagemagick
  # the .deb (scripts/package.sh): CPack's DEB generator needs dpkg-shlibdeps (dpkg-dev) and file
  # to compute Depends; the .desktop file and AppStream metadata are validated before packaging
  dpkg-dev file desktop-file-utils appstream
)
if [ $with_clang -eq 1 ]; then
  # clang-14's runtimes (ASan, UBSan, libFuzzer) are in libclang-rt-14-dev, named so it is not left to a Recommends.
  packages+=(clang libclang-rt-14-dev)   # clang: the clang++ the presets name
fi
if [ $with_slurm -eq 1 ]; then
  # Debian 12's Slurm 22.05: slurm-wlm pulls slurmctld, slurmd and slurm-client; munge authenticates;
  # the test counts the merged runs with the sqlite3 shell.
  packages+=(slurm-wlm slurmctld slurmd slurm-client munge sqlite3)
fi

# One dpkg-query for all packages: those not installed are listed as missing.
missing=()
declare -A installed=()
while read -r name status; do
  [ "$status" = "installed" ] && installed[$name]=1
done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${packages[@]}" 2>/dev/null || true)
for p in "${packages[@]}"; do
  [ -n "${installed[$p]:-}" ] || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
