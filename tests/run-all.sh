#!/bin/sh
# Sets up a fresh Debian 12 machine (packages, build) and runs every test.
#   tests/run-all.sh [BUILD_DIR] [extra meson setup options...]
# Run as root: most tests attach to real processes with ptrace/userfaultfd.
set -eu
cd "$(dirname "$0")/.."

sh tests/setup-deps.sh
builddir=${1:-build}
[ $# -gt 0 ] && shift
if [ -d "$builddir/meson-private" ]; then
        meson setup --reconfigure "$builddir" "$@" >/dev/null
else
        meson setup "$builddir" "$@"
fi
# ZSWAPD_JOBS=N: build with N jobs (default: ninja's, from the CPU count).
meson compile -C "$builddir" ${ZSWAPD_JOBS:+-j "$ZSWAPD_JOBS"}
meson test -C "$builddir" --print-errorlogs --num-processes 2
