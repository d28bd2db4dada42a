#!/bin/bash
# Builds the Debian package from the tree (dpkg-buildpackage -us -uc -b, in
# a scratch copy, so that nothing lands beside the tree), runs lintian on
# it, and checks what it installs: the unit in /lib/systemd/system started
# from /usr/sbin/zswapd and enabled by the maintainer scripts, zswapd.conf
# a conffile, the package's version the one `zswapd --version` prints, and
# the daemon of the package starting on its own default config with
# zswapctl answering. Run as root (the daemon is started once).
#   tests/check-deb.sh          (CHECK_DEB_OUT=DIR keeps a copy of the .deb)
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "check-deb: $*" >&2; exit 1; }
for p in dpkg-buildpackage:dpkg-dev dh:debhelper lintian:lintian; do
        command -v "${p%%:*}" >/dev/null || fail "${p%%:*} missing: apt-get install ${p#*:}"
done

tmp=$(mktemp -d)
daemon=
cleanup() {
        [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
        rm -rf "$tmp"
        return 0
}
trap cleanup EXIT

mkdir "$tmp/src"
git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$tmp/src"
(cd "$tmp/src" && DEB_BUILD_OPTIONS="nocheck ${DEB_BUILD_OPTIONS:-}" \
        dpkg-buildpackage -us -uc -b > "$tmp/build.log" 2>&1) ||
        { tail -n 40 "$tmp/build.log"; fail "dpkg-buildpackage failed"; }
deb=$(ls "$tmp"/zswapd_*.deb)
[ "$(echo "$deb" | wc -l)" = 1 ] || fail "expected one zswapd_*.deb, got: $deb"
echo "check-deb: built $(basename "$deb")"
[ -z "${CHECK_DEB_OUT:-}" ] || cp "$deb" "$CHECK_DEB_OUT/"

# Errors fail; warnings are printed.
lintian --fail-on error "$deb" | tee "$tmp/lintian.log" || fail "lintian found errors"

root=$tmp/root
dpkg-deb -x "$deb" "$root"
dpkg-deb -e "$deb" "$tmp/control"
for f in /usr/sbin/zswapd /usr/bin/zswapctl /etc/zswapd/zswapd.conf /lib/systemd/system/zswapd.service \
         /usr/share/man/man8/zswapd.8.gz /usr/share/man/man8/zswapctl.8.gz \
         /usr/share/man/man5/zswapd.conf.5.gz /usr/share/doc/zswapd/examples/browser.conf \
         /usr/share/doc/zswapd/copyright; do
        [ -e "$root$f" ] || fail "$f not in the package"
done
[ -d "$root/etc/zswapd/policy.d" ] || fail "/etc/zswapd/policy.d not in the package"
grep -qx /etc/zswapd/zswapd.conf "$tmp/control/conffiles" || fail "zswapd.conf is not a conffile"
grep -qx 'ExecStart=/usr/sbin/zswapd' "$root/lib/systemd/system/zswapd.service" ||
        fail "the unit does not start /usr/sbin/zswapd"
grep -q 'deb-systemd-helper.* enable .*zswapd.service' "$tmp/control/postinst" ||
        fail "postinst does not enable zswapd.service"
grep -q "deb-systemd-invoke start 'zswapd.service'" "$tmp/control/postinst" ||
        fail "postinst does not start zswapd.service"
grep -q 'zswapctl reexec' "$tmp/control/postinst" && ! grep -q '_dh_action=restart\|deb-systemd-invoke restart' "$tmp/control/postinst" ||
        fail "postinst restarts zswapd.service on upgrade, which gives every page back; it must re-execute it"

version=$(dpkg-deb -f "$deb" Version)
"$root/usr/sbin/zswapd" --version | grep -qw "$version" ||
        fail "zswapd --version says '$("$root/usr/sbin/zswapd" --version)', the package $version"
"$root/usr/sbin/zswapd" --help | grep -qF '(default /etc/zswapd)' || fail "zswapd does not read /etc/zswapd"

# The packaged daemon on the packaged config, on a socket of its own.
"$root/usr/sbin/zswapd" -c "$root/etc/zswapd" -s "$tmp/sock" > "$tmp/daemon.log" 2>&1 &
daemon=$!
# Asked until it answers or exits: a slow start is not a failure (a
# minute bounds one that hangs), and the socket file alone is not an
# answer (it exists from bind(), before listen()).
answered=
for _ in $(seq 1 600); do
        if "$root/usr/bin/zswapctl" -s "$tmp/sock" status > "$tmp/status" 2>&1; then
                answered=1
                break
        fi
        kill -0 "$daemon" 2>/dev/null || break
        sleep 0.1
done
[ -n "$answered" ] || fail "zswapctl status: $(cat "$tmp/status"); daemon: $(cat "$tmp/daemon.log")"
echo "check-deb: $(basename "$deb") $version: lintian without errors, layout, maintainer scripts," \
     "the daemon and zswapctl: ok"
