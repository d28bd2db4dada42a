#!/bin/bash
# Installs a configured build into a scratch DESTDIR and checks that it is
# laid out as a system package is: the unit in a directory systemd searches,
# its ExecStart the installed zswapd, a zswapd.conf whose commented lines
# are the daemon's defaults in the sysconfdir the daemon reads, an empty
# policy.d/, man pages, example policies.
#   tests/check-install.sh BUILD_DIR
# Run as root (the installed daemon is started once, on a scratch socket).
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR}
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT

fail() { echo "check-install: $*" >&2; exit 1; }
opt() { meson introspect --buildoptions "$build" | jq -r ".[] | select(.name == \"$1\") | .value"; }
abs() { case $2 in /*) echo "$2" ;; *) echo "$1/$2" ;; esac; }

meson install -C "$build" --no-rebuild --quiet --destdir "$dest"

prefix=$(opt prefix)
sbindir=$(abs "$prefix" "$(opt sbindir)")
confdir=$(abs "$prefix" "$(opt sysconfdir)")/zswapd
mandir=$(abs "$prefix" "$(opt mandir)")
datadir=$(abs "$prefix" "$(opt datadir)")
[ "$prefix" != /usr ] || [ "$confdir" = /etc/zswapd ] || fail "prefix /usr: config in $confdir, not /etc/zswapd"

for f in "$sbindir/zswapd" "$(abs "$prefix" "$(opt bindir)")/zswapctl" \
         "$confdir/zswapd.conf" "$mandir/man5/zswapd.conf.5" "$mandir/man8/zswapd.8" \
         "$mandir/man8/zswapctl.8" "$datadir/doc/zswapd/examples/browser.conf" \
         "$datadir/doc/zswapd/examples/build-service.conf"; do
        [ -f "$dest$f" ] || fail "$f not installed"
done
[ -d "$dest$confdir/policy.d" ] || fail "$confdir/policy.d not installed"
[ -z "$(ls -A "$dest$confdir/policy.d")" ] || fail "$confdir/policy.d is not empty"

# The unit: exactly one, in one of systemd's unit directories, starting the
# zswapd that was installed.
units=$(cd "$dest" && find . -name zswapd.service | sed 's|^\.||')
[ "$(echo "$units" | wc -l)" = 1 ] && [ -n "$units" ] || fail "zswapd.service installed as: '$units'"
unitdir=$(dirname "$units")
search=$(pkg-config --variable=systemdsystemunitpath systemd 2>/dev/null ||
         echo /etc/systemd/system:/usr/local/lib/systemd/system:/usr/lib/systemd/system:/lib/systemd/system)
case ":$search:" in
*":$unitdir:"*) ;;
*) fail "unit in $unitdir, which systemd does not search ($search)" ;;
esac
case $unitdir in
"$prefix"/*|/lib/systemd/system) ;;
*) fail "unit in $unitdir, outside the prefix $prefix" ;;
esac
exec_start=$(sed -n 's/^ExecStart=//p' "$dest$units")
[ "$exec_start" = "$sbindir/zswapd" ] || fail "ExecStart=$exec_start, installed at $sbindir/zswapd"

# The daemon reads the directory the config went to...
"$dest$sbindir/zswapd" --help | grep -qF "(default $confdir)" ||
        fail "zswapd does not read $confdir: $("$dest$sbindir/zswapd" --help | grep -A1 config)"
# ...and every default in it, uncommented, is accepted.
mkdir "$dest/conf"
sed -e 's/^#\([A-Z][A-Za-z]*=\)/\1/' "$dest$confdir/zswapd.conf" > "$dest/conf/zswapd.conf"
[ "$(grep -c '^[A-Z][A-Za-z]*=' "$dest/conf/zswapd.conf")" -ge 10 ] || fail "too few defaults in zswapd.conf"
# Until it says it listens, or exits: however long a loaded machine takes
# to start it (a minute bounds a daemon that hangs), not a fixed time.
"$dest$sbindir/zswapd" -c "$dest/conf" -s "$dest/sock" > "$dest/zswapd.log" 2>&1 &
daemon=$!
for _ in $(seq 1 600); do
        grep -q "listening on $dest/sock" "$dest/zswapd.log" && break
        kill -0 "$daemon" 2>/dev/null || break
        sleep 0.1
done
kill -TERM "$daemon" 2>/dev/null || true
wait "$daemon" || true
out=$(cat "$dest/zswapd.log")
echo "$out" | grep -q "listening on $dest/sock" || fail "the installed defaults do not start zswapd: $out"

echo "check-install: prefix $prefix: unit $units, config $confdir, ExecStart=$exec_start: ok"
