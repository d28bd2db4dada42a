#!/bin/sh
# Installs the Debian 12 packages zswapd needs to build, test and benchmark,
# when they are missing. Run as root (it calls apt-get).
#   tests/setup-deps.sh [--ci]
# --ci adds what only .ci/run uses: the static analyzer, clang-format, the
# Debian packaging tools, and mmdebstrap and systemd-nspawn for the tests
# under systemd (tests/check-systemd.sh).
set -eu

PKGS="build-essential meson ninja-build pkg-config liburing-dev libzstd-dev liblz4-dev
libcgroup-dev libsystemd-dev stress-ng clang libclang-rt-14-dev util-linux systemd
e2fsprogs jq"
[ "${1:-}" = --ci ] && PKGS="$PKGS clang-tools clang-format dpkg-dev debhelper lintian
mmdebstrap systemd-container"

missing=""
for p in $PKGS; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
                missing="$missing $p"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
        echo "missing packages:$missing; run this script as root to install them" >&2
        exit 1
fi
echo "installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
