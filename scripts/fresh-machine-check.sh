#!/usr/bin/env bash
# Proves the README's set-up on a fresh machine. Makes a minimal Debian 12 root
# (mmdebstrap --variant=minbase bookworm), clones the committed HEAD of this checkout into it with
# the shared folder beside the clone (as ../shared, mounted read-only), and inside it (chroot):
#   1. runs the README's test command, ./scripts/test.sh
#   2. runs the README's run command, QT_QPA_PLATFORM=offscreen ./scripts/run.sh --screenshot OUT.png,
#      and checks that the PNG is not blank (more than one colour)
#   3. checks that the source tree is still clean (no report or other file written into it)
#   4. validates the .desktop file and the AppStream metadata, and builds the .deb (scripts/package.sh)
#   5. with --asan: builds the asan preset and runs the whole suite under ASan + UBSan + LSan
#      (scripts/test-asan.sh)
#   6. with --fuzz SECONDS: runs every libFuzzer target for SECONDS seconds under the fuzz preset
#      (scripts/fuzz.sh with FUZZ_SEED=1, so a run repeats on one commit; it installs clang into
#      the root first)
# Then it makes a second minimal root without any development package, installs the .deb there with
# `apt-get install ./shardscope_*.deb` and runs shardscope-cli --version, zoo build + verify, and an
# offscreen GUI screenshot (non-blank).
#
# Usage: scripts/fresh-machine-check.sh [options]        (as root, or through sudo)
#   --asan              also build the asan preset and run the suite under it in the root (CI does)
#   --fuzz SECONDS      also run each fuzz target for SECONDS seconds in the root (CI does)
#   --slurm             also install Slurm and munge in the root (install-deps.sh --slurm) and run the
#                       Slurm sweep test on a one-node cluster there (scripts/test-slurm-sweep.sh; not
#                       in CI: it does not fit CI's 30 minutes)
#   --ccache-dir DIR    host ccache folder bind-mounted into the root, so repeat runs compile from
#                       cache. Default: $SHARDSCOPE_CCACHE_DIR, else the cache_dir of
#                       /etc/ccache.conf, else (called by root, not through sudo) root's own
#                       ccache folder (ccache --get-config cache_dir: ~/.cache/ccache on a fresh
#                       machine), else /var/cache/shardscope-ccache. The project's
#                       CMakeLists makes cache keys independent of the checkout's path and of the
#                       compiler's file date, so a build of the same sources on the host (in any
#                       folder) fills the cache the root compiles from.
#   --apt-cache DIR     host folder keeping the downloaded .debs between runs (default:
#                       $SHARDSCOPE_APT_CACHE, else /var/cache/shardscope-fresh-debs)
#   --shared DIR        the folder put beside the clone as ../shared (default: ../shared beside
#                       this checkout, else beside the repository's main worktree; none: tests that
#                       need it skip)
#   --workdir DIR       where the two roots are made (default: $TMPDIR, else /var/tmp)
#   --artifacts DIR     copy the screenshots and the .deb there before cleaning up
#   --mirror URL        Debian mirror (default: mmdebstrap's, deb.debian.org)
#   --keep              keep the roots after the run (they are still unmounted)
# It always unmounts and removes what it made, also on failure or Ctrl+C, and on failure prints
# one line naming the step that failed.
set -euo pipefail
# The whole script is one block that bash reads before it runs any of it, so that editing or
# checking out another version of this file during a run cannot change what the run does.
{

die() { echo "fresh-machine-check: $*" >&2; exit 2; }
all_args=("$@")

asan=0 fuzz_seconds=0 slurm=0 keep=0 artifacts="" mirror="" shared="" shared_given=0
ccache_dir=${SHARDSCOPE_CCACHE_DIR:-}
apt_cache=${SHARDSCOPE_APT_CACHE:-/var/cache/shardscope-fresh-debs}
workdir=${TMPDIR:-/var/tmp}
while [ $# -gt 0 ]; do
  case "$1" in
    --asan) asan=1 ;;
    --slurm) slurm=1 ;;
    --fuzz) fuzz_seconds=${2:?--fuzz needs seconds per target}; shift
            [[ "$fuzz_seconds" =~ ^[0-9]+$ ]] || die "--fuzz needs a whole number of seconds" ;;
    --keep) keep=1 ;;
    --ccache-dir) ccache_dir=${2:?--ccache-dir needs a folder}; shift ;;
    --apt-cache) apt_cache=${2:?--apt-cache needs a folder}; shift ;;
    --shared) shared=${2:?--shared needs a folder}; shared_given=1; shift ;;
    --workdir) workdir=${2:?--workdir needs a folder}; shift ;;
    --artifacts) artifacts=${2:?--artifacts needs a folder}; shift ;;
    --mirror) mirror=${2:?--mirror needs a URL}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift
done

if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || die "needs root (chroot, mounts, mmdebstrap); run it as root"
  exec sudo --preserve-env=SHARDSCOPE_CCACHE_DIR,SHARDSCOPE_APT_CACHE,TMPDIR "$0" "${all_args[@]}"
fi
# git as root on a checkout that belongs to the user who called sudo.
git() { command git -c safe.directory='*' "$@"; }

checkout=$(cd "$(dirname "$0")/.." && git rev-parse --show-toplevel)
head=$(git -C "$checkout" rev-parse HEAD)
if [ -n "$(git -C "$checkout" status --porcelain --untracked-files=no)" ]; then
  echo "fresh-machine-check: note: uncommitted changes in $checkout are not part of the check (it clones HEAD ${head:0:12})"
fi
if [ $shared_given -eq 0 ]; then
  main_worktree=$(dirname "$(cd "$checkout" && realpath "$(git rev-parse --git-common-dir)")")
  for d in "$checkout/../shared" "$main_worktree/../shared"; do
    if [ -d "$d" ]; then shared=$(realpath "$d"); break; fi
  done
fi
[ -z "$shared" ] || [ -d "$shared" ] || die "--shared $shared is not a folder"
if [ -z "$ccache_dir" ]; then
  # A machine without /etc/ccache.conf (a fresh one) has no cache_dir there: not an error.
  ccache_dir=$( { sed -n 's/^[[:space:]]*cache_dir[[:space:]]*=[[:space:]]*//p' /etc/ccache.conf 2>/dev/null || true; } | tail -n1)
  # Called by root itself (CI, a fresh machine's first session): root's own builds (./scripts/test.sh
  # before this check) filled ccache's default folder for root, so the root's builds use that one.
  # Called through sudo by another user, that user's folder is not used: the root's compilers run as
  # root and would leave files there the user cannot replace.
  if [ -z "$ccache_dir" ] && { [ -z "${SUDO_USER:-}" ] || [ "$SUDO_USER" = root ]; } && command -v ccache >/dev/null; then
    ccache_dir=$(ccache --get-config cache_dir 2>/dev/null || true)
  fi
  ccache_dir=${ccache_dir:-/var/cache/shardscope-ccache}
fi
# ccache inside the root reads no /etc/ccache.conf of the host: keep the host's size limit, so a
# run in the root does not trim a larger host cache down to ccache's default of 5 GB.
ccache_max=$( (command -v ccache >/dev/null && CCACHE_DIR="$ccache_dir" ccache --get-config max_size) 2>/dev/null || echo 10G)
mkdir -p "$ccache_dir" "$apt_cache/partial" "$workdir"

work=$(mktemp -d "$workdir/shardscope-fresh.XXXXXX")
image="$work.img"                   # the file system the roots live in (see "prepare the work area")
build_root="$work/build-root"       # the developer's machine: minimal Debian 12 + install-deps.sh
runtime_root="$work/runtime-root"   # a user's machine: minimal Debian 12 + the .deb, nothing else
clone=/work/fresh/main              # inside the roots; ../shared is /work/fresh/shared
step="start"
start_time=$(date +%s)
declare -a step_times=()

log() { echo "fresh-machine-check: $*"; }
begin() {
  step="$1"
  step_start=$(date +%s)
  echo
  log "=== $step"
}
done_step() { step_times+=("$(( $(date +%s) - step_start ))s  $step"); }

# Everything mounted below $work, deepest first.
mounts_below_work() {
  findmnt -rn -o TARGET | awk -v w="$work/" 'index($0, w) == 1' | sort -r
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if [ $rc -ne 0 ]; then
    echo "fresh-machine-check: FAILED at step: $step (exit $rc)" >&2
  fi
  # Processes still running inside the roots (ours: started by this script) are ended.
  local p r
  for p in /proc/[0-9]*; do
    r=$(readlink "$p/root" 2>/dev/null) || continue
    case "$r" in "$work"/*) kill -KILL "${p#/proc/}" 2>/dev/null ;; esac
  done
  local m
  for m in $(mounts_below_work); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || echo "fresh-machine-check: could not unmount $m" >&2
  done
  if [ -n "$(mounts_below_work)" ]; then
    echo "fresh-machine-check: something is still mounted below $work; not removing it" >&2
    exit $rc
  fi
  if mountpoint -q "$work"; then
    umount "$work" || { echo "fresh-machine-check: could not unmount $work; not removing it" >&2; exit $rc; }
  fi
  if [ $keep -eq 1 ]; then
    if [ -f "$image" ]; then log "kept the roots in $image (mount -o loop $image DIR to look)"; rmdir "$work"
    else log "kept the roots in $work"; fi
  else
    rm -f "$image"
    rm -rf --one-file-system "$work"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Runs a command inside a root with a clean environment (what a fresh login shell would have, plus
# the ccache settings). LANG=C.UTF-8 as on a Debian host: ccache puts the locale variables into its
# keys (they change the compiler's messages), so the root's builds hit the entries a host build with
# that locale made, and a root without LANG would miss every one. In the background with a wait, so
# that a TERM or INT reaches the trap at once (the trap ends whatever still runs inside the roots).
in_root() {
  local root=$1; shift
  chroot "$root" /usr/bin/env -i \
    HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    TERM="${TERM:-dumb}" DEBIAN_FRONTEND=noninteractive \
    CCACHE_DIR=/var/cache/shardscope-ccache CCACHE_MAXSIZE="$ccache_max" \
    /bin/bash -c "$*" </dev/null &
  wait $!
}

make_root() {
  local root=$1
  # dpkg in the roots: no fsync per file (the roots are thrown away) and no manuals or docs other
  # than the copyright files, so unpacking the build dependencies takes less time.
  local -a args=(--variant=minbase --mode=root
    --dpkgopt=force-unsafe-io
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --skip=download/empty --skip=essential/unlink
    --setup-hook='mkdir -p "$1"/var/cache/apt/archives/'
    --setup-hook="sync-in $apt_cache /var/cache/apt/archives/"
    --customize-hook="sync-out /var/cache/apt/archives $apt_cache"
    bookworm "$root")
  [ -z "$mirror" ] || args+=("$mirror")
  mmdebstrap --quiet "${args[@]}"
  # The root's own apt downloads go straight to the host's .deb folder from now on.
  mkdir -p "$root/var/cache/apt/archives"
  mount --bind "$apt_cache" "$root/var/cache/apt/archives"
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount --make-rslave "$root/dev"
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
}

# Non-blank: more than one colour. Checked with ImageMagick in the build root.
check_png() {
  local png_in_build_root=$1
  local info
  info=$(in_root "$build_root" "identify -format '%wx%h %k' '$png_in_build_root'")
  log "$png_in_build_root: ${info% *} pixels, ${info##* } colours"
  [ "${info##* }" -gt 1 ] || { echo "fresh-machine-check: $png_in_build_root is blank" >&2; return 1; }
}

begin "install mmdebstrap on the host"
if ! command -v mmdebstrap >/dev/null 2>&1 || ! command -v mkfs.ext4 >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap e2fsprogs >/dev/null
fi
log "$(mmdebstrap --version)"
done_step

begin "prepare the work area in $workdir"
# The roots (about 7 GB with both builds) live in a file system of their own, a sparse image
# mounted through a loop device: removing it at the end is one unmount and one file, where deleting
# the roots' tens of thousands of files takes minutes on a disk mounted with discard.
avail_kb=$(df --output=avail -k "$workdir" | tail -n1)
[ "$avail_kb" -ge $((10 * 1024 * 1024)) ] || { echo "fresh-machine-check: $workdir has $((avail_kb / 1024 / 1024)) GB free; the roots need about 10 GB" >&2; false; }
truncate -s 40G "$image"
mkfs.ext4 -q -F -O ^has_journal -E nodiscard "$image"
if mount -o loop,noatime "$image" "$work" 2>/dev/null; then
  log "roots in $image (loop-mounted on $work)"
else
  rm -f "$image"
  log "no loop device: the roots are plain folders in $work"
fi
done_step

begin "make the build root (mmdebstrap --variant=minbase bookworm)"
make_root "$build_root"
done_step

begin "clone the committed HEAD (${head:0:12}) with ../shared beside it"
git clone --quiet "$checkout" "$build_root$clone"
git -C "$build_root$clone" checkout --quiet --detach "$head"
mkdir -p "$build_root/work/fresh/shared" "$build_root/var/cache/shardscope-ccache"
if [ -n "$shared" ]; then
  mount --bind "$shared" "$build_root/work/fresh/shared"
  mount -o remount,bind,ro "$build_root/work/fresh/shared"
  log "../shared: $shared (read-only)"
else
  rmdir "$build_root/work/fresh/shared"
  log "no shared folder found: tests that need ../shared will skip"
fi
mount --bind "$ccache_dir" "$build_root/var/cache/shardscope-ccache"
log "ccache: $ccache_dir; .debs: $apt_cache"
done_step

begin "README test command: ./scripts/test.sh"
in_root "$build_root" "cd $clone && ./scripts/test.sh"
done_step

begin "README run command: QT_QPA_PLATFORM=offscreen ./scripts/run.sh --screenshot OUT.png"
in_root "$build_root" "cd $clone && QT_QPA_PLATFORM=offscreen ./scripts/run.sh --screenshot /tmp/run-screenshot.png"
check_png /tmp/run-screenshot.png
done_step

begin "validate the .desktop file and the AppStream metadata"
in_root "$build_root" "cd $clone && desktop-file-validate packaging/shardscope.desktop && appstreamcli validate --no-net packaging/io.shardscope.ShardScope.metainfo.xml"
done_step

begin "build the package: ./scripts/package.sh"
in_root "$build_root" "cd $clone && ./scripts/package.sh"
deb=$(cd "$build_root$clone/build/package" && ls shardscope_*_*.deb)
[ "$(echo "$deb" | wc -l)" -eq 1 ] || { echo "fresh-machine-check: expected one shardscope_<version>_<arch>.deb, found: $deb" >&2; false; }
log "package: $deb"
done_step

if [ $asan -eq 1 ]; then
  begin "asan suite (ASan + UBSan + LSan): ./scripts/test-asan.sh"
  in_root "$build_root" "cd $clone && ./scripts/test-asan.sh"
  done_step
fi

if [ "$fuzz_seconds" -gt 0 ]; then
  begin "fuzz targets, ${fuzz_seconds}s each (clang, libFuzzer, ASan + UBSan): FUZZ_SEED=1 ./scripts/fuzz.sh $fuzz_seconds"
  in_root "$build_root" "cd $clone && FUZZ_SEED=1 ./scripts/fuzz.sh $fuzz_seconds"
  done_step
fi

if [ "$slurm" -eq 1 ]; then
  begin "Slurm sweep on a one-node cluster: ./scripts/install-deps.sh --slurm && ./scripts/test-slurm-sweep.sh"
  # slurmd needs the cgroup filesystem (and hwloc the CPU topology) under /sys, which the root
  # does not mount otherwise; mounted for this step only and unmounted after it.
  mount --rbind /sys "$build_root/sys"
  mount --make-rslave "$build_root/sys"
  slurm_status=0
  in_root "$build_root" "cd $clone && ./scripts/install-deps.sh --slurm && ./scripts/test-slurm-sweep.sh build/release/app/shardscope-cli" ||
    slurm_status=$?
  umount -R "$build_root/sys"
  [ "$slurm_status" -eq 0 ] || exit "$slurm_status"
  done_step
fi

begin "the source tree holds no generated file (git status clean)"
dirty=$(in_root "$build_root" "cd $clone && git status --porcelain --untracked-files=all")
[ -z "$dirty" ] || { echo "fresh-machine-check: files written into the source tree:" >&2; echo "$dirty" >&2; false; }
done_step

begin "make the runtime root (minimal, no development packages)"
make_root "$runtime_root"
done_step

begin "install the package: apt-get install ./$deb"
cp "$build_root$clone/build/package/$deb" "$runtime_root/tmp/"
in_root "$runtime_root" "apt-get update -qq && cd /tmp && apt-get install -y -qq --no-install-recommends ./$deb >/dev/null"
in_root "$runtime_root" "dpkg-query -W -f='\${Package} \${Version}\nDepends: \${Depends}\n' shardscope"
dev=$(in_root "$runtime_root" "dpkg-query -W -f='\${Package}\n' | grep -E -- '-dev\$|^(gcc|g\+\+|cmake|make|dpkg-dev)(-[0-9]+)?\$' || true")
[ -z "$dev" ] || { echo "fresh-machine-check: the runtime root has development packages: $dev" >&2; false; }
for f in /usr/bin/shardscope /usr/bin/shardscope-cli /usr/share/applications/shardscope.desktop \
         /usr/share/metainfo/io.shardscope.ShardScope.metainfo.xml /usr/share/icons/hicolor/scalable/apps/shardscope.svg; do
  [ -f "$runtime_root$f" ] || { echo "fresh-machine-check: the package did not install $f" >&2; false; }
done
done_step

begin "installed package: shardscope-cli --version"
in_root "$runtime_root" "shardscope-cli --version"
done_step

begin "installed package: shardscope-cli zoo build + verify"
in_root "$runtime_root" "cd /tmp && shardscope-cli zoo build transformer-layer --set annotations=finalized --set mesh_x=2 --set mesh_y=2 -o layer.hlo && shardscope-cli verify layer.hlo | tail -n 3"
done_step

begin "installed package: QT_QPA_PLATFORM=offscreen shardscope --screenshot x.png"
in_root "$runtime_root" "cd /tmp && QT_QPA_PLATFORM=offscreen shardscope --screenshot /tmp/x.png"
cp "$runtime_root/tmp/x.png" "$build_root/tmp/installed-screenshot.png"
check_png /tmp/installed-screenshot.png
done_step

if [ -n "$artifacts" ]; then
  mkdir -p "$artifacts"
  cp "$build_root/tmp/run-screenshot.png" "$build_root/tmp/installed-screenshot.png" \
     "$build_root$clone/build/package/$deb" "$artifacts/"
  log "screenshots and package copied to $artifacts"
fi

step="done"
echo
log "step times:"
printf '  %s\n' "${step_times[@]}"
log "passed: ${#step_times[@]} steps in $(( $(date +%s) - start_time ))s (HEAD ${head:0:12})"
exit 0
}
