#!/usr/bin/env bash
# Builds the Debian package: install what is missing, build the release preset, validate the
# .desktop file and the AppStream metadata, and run cpack. The package lands in build/package/
# as shardscope_<version>_<arch>.deb; install it with
#   sudo apt-get install ./build/package/shardscope_*.deb
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh release

echo "package: validating packaging/shardscope.desktop and the AppStream metadata"
desktop-file-validate packaging/shardscope.desktop
appstreamcli validate --no-net packaging/io.shardscope.ShardScope.metainfo.xml

rm -f build/package/shardscope_*.deb
cpack --config build/release/CPackConfig.cmake -B build/package
deb=$(ls build/package/shardscope_*.deb)
echo "package: $deb"
dpkg-deb --field "$deb" Package Version Architecture Depends
