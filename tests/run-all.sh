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
meson compile -C "$builddir"
meson test -C "$builddir" --print-errorlogs --num-processes 2
