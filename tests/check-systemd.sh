#!/bin/bash
# The Debian package under a genuine systemd: a Debian 12 root (mmdebstrap,
# minbase with systemd), booted with systemd-nspawn --boot, the .deb
# installed in it with apt, and then, through systemctl and zswapctl run
# inside the container:
#   - the maintainer scripts enable and start zswapd.service, which reaches
#     active (Type=notify: READY=1) with its status text, the capabilities
#     the unit gives it, watchdog pings, and reloads;
#   - a policy in /etc/zswapd/policy.d attaches two transient services
#     (systemd-run) of the test target, one root and one User=nobody;
#   - zswapctl reclaim takes their pages (stored, resident memory falls)
#     and every byte verifies after the faults bring them back;
#   - systemctl restart, stop and start with pages stored: each stop gives
#     every page back, each start attaches the targets again;
#   - writeback to a swapfile under the unit's sandbox;
#   - an upgrade (the package installed again) with pages stored: zswapd
#     re-executes in place and no page goes back;
#   - kill -9 of zswapd with pages stored: systemd restarts it, the new one
#     takes every target over from the state its rescue task saved;
#   - the same while a fork child is not named yet: its userfaultfd goes
#     through systemd's file descriptor store;
#   - dpkg --remove with pages stored gives every page back.
# With --meson-install instead of a package, the build's `meson install`
# (its prefix, /usr/local by default) goes into the root, the unit is
# enabled and started with systemctl and at the end disabled and stopped.
# docs/systemd-tests.md has the details.
#   tests/check-systemd.sh BUILD_DIR [DEB | --meson-install]
# BUILD_DIR holds the built test target (tests/zswapd-test-target) and
# tests/zswapd-test-hold. Without
# DEB the package is built first (tests/check-deb.sh). Run as root. Exits
# 77 (skipped) where nspawn cannot run: not root, no systemd-nspawn or
# mmdebstrap, no namespaces, or no Debian mirror to make the root from
# and no cached root.
# The root is made once and kept in ZSWAPD_NSPAWN_CACHE (default
# /var/cache/zswapd-test); each run boots a copy of it, so every run starts
# from a clean Debian 12 without zswapd. ZSWAPD_NSPAWN_MIRROR (default
# http://deb.debian.org/debian) is where it comes from.
set -euo pipefail
# Paths as given, before the cd to the tree.
build=$(realpath -m "${1:?usage: $0 BUILD_DIR [DEB | --meson-install]}")
mode=deb
deb=
case ${2:-} in
--meson-install) mode=meson ;;
?*) deb=$(realpath -m "$2") ;;
esac
cd "$(dirname "$0")/.."

pid1=
booted=
fail() {
        echo "check-systemd: FAIL: $*" >&2
        if [ -n "$booted" ] && [ -d "/proc/$pid1" ]; then
                echo "--- zswapd's journal in the container (last 30 lines)" >&2
                ct --timeout 20 journalctl -u zswapd --no-pager -n 30 >&2 || true
        fi
        exit 1
}
skip() { echo "check-systemd: SKIP: $*" >&2; exit 77; }
say() { echo "check-systemd: $*"; }

cache=${ZSWAPD_NSPAWN_CACHE:-/var/cache/zswapd-test}
mirror=${ZSWAPD_NSPAWN_MIRROR:-http://deb.debian.org/debian}
target_bin=$build/tests/zswapd-test-target
hold_bin=$build/tests/zswapd-test-hold

[ "$(id -u)" = 0 ] || skip "needs root (it boots a container)"
command -v systemd-nspawn >/dev/null || skip "no systemd-nspawn: apt-get install systemd-container"
command -v jq >/dev/null || fail "jq missing: apt-get install jq"
[ -x "$target_bin" ] || fail "$target_bin missing: meson compile -C $build"
unshare --mount --pid --uts --ipc --fork true 2>/dev/null ||
        skip "this machine does not let root make namespaces (a container without CAP_SYS_ADMIN?)"

tmp=$(mktemp -d)
run=
nspawn=
cleanup() {
        local rc=$?
        if [ -n "$nspawn" ] && kill -0 "$nspawn" 2>/dev/null; then
                # nspawn turns SIGTERM into a clean shutdown of the container.
                kill -TERM "$nspawn" 2>/dev/null || true
                for _ in $(seq 1 150); do kill -0 "$nspawn" 2>/dev/null || break; sleep 0.2; done
                kill -KILL "$nspawn" 2>/dev/null || true
                wait "$nspawn" 2>/dev/null || true
        fi
        # Its console tells why a boot failed (after a boot, the journal
        # does, in fail()).
        if [ $rc != 0 ] && [ $rc != 77 ] && [ -z "$booted" ] && [ -s "$tmp/console.log" ]; then
                echo "--- container console (last 30 lines)"; tail -n 30 "$tmp/console.log"
        fi
        # The container's mounts lived in its own mount namespace, gone
        # with it; --one-file-system keeps rm inside the copy regardless.
        [ -z "$run" ] || rm -rf --one-file-system "$run" || true
        rm -rf "$tmp" || true
        return $rc
}
trap cleanup EXIT

# Bounded waits, polling state; no verdict rests on how long it took.
poll() { # SECONDS COMMAND...: 1 when COMMAND did not succeed in time
        local end=$((SECONDS + $1))
        shift
        until "$@"; do
                [ $SECONDS -lt $end ] || return 1
                sleep 0.2
        done
}
wait_for() { # SECONDS WHAT COMMAND...: fails naming WHAT after SECONDS
        poll "$1" "${@:3}" || fail "$2: not within ${1}s"
}

# --- what to install, and the Debian packages it needs
confdir=/etc/zswapd
if [ $mode = meson ]; then
        opt() { meson introspect --buildoptions "$build" | jq -r ".[] | select(.name == \"$1\") | .value"; }
        abs() { case $1 in /*) echo "$1" ;; *) echo "$(opt prefix)/$1" ;; esac; }
        confdir=$(abs "$(opt sysconfdir)")/zswapd
        meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/inst" ||
                fail "meson install -C $build failed"
        # The packages of the libraries the binaries load, and procps for
        # the unit's ExecReload= (kill).
        depends=$(ldd "$tmp/inst$(abs "$(opt sbindir)")/zswapd" "$tmp/inst$(abs "$(opt bindir)")/zswapctl" |
                awk '/=> \//{ print $3 }' | sort -u | while read -r lib; do
                        dpkg -S "$lib" 2>/dev/null || dpkg -S "*/${lib##*/}"
                done | cut -d: -f1 | tr ',' '\n' | sed 's/[[:space:]]//g' | sort -u)
        depends="$depends procps"
else
        if [ -z "$deb" ]; then
                mkdir "$tmp/deb"
                CHECK_DEB_OUT=$tmp/deb tests/check-deb.sh
                deb=$(ls "$tmp"/deb/zswapd_*.deb)
        fi
        [ -f "$deb" ] || fail "no package at '$deb'"
        # What apt would install with it: its Depends, first of each alternative.
        depends=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' |
                sed -E 's/\|.*//; s/\(.*\)//; s/[[:space:]]//g' | sed '/^$/d')
fi

# --- the root: minbase with systemd and the package's dependencies, made
# once; remade when the package needs something the cached one lacks.
mkdir -p "$cache"
base=$cache/bookworm
# shellcheck disable=SC2086 # one package name per word
includes=$(printf '%s\n' systemd dbus $depends | sort -u)
include_list=$(echo "$includes" | paste -sd ,)
exec 9> "$cache/lock"
flock -w 900 9 || fail "$cache/lock held by another run for 15 minutes"
lacks() { # the cached root lacks one of the packages
        local p
        for p in $includes; do
                dpkg-query --admindir="$base/var/lib/dpkg" -W -f='${db:Status-Status}\n' "$p" 2>/dev/null |
                        grep -qx installed || return 0
        done
        return 1
}
if [ -d "$base" ] && ! lacks; then
        say "cached Debian 12 root: $base"
else
        command -v mmdebstrap >/dev/null || skip "no cached root and no mmdebstrap: apt-get install mmdebstrap"
        host=$(echo "$mirror" | sed -E 's|^[a-z]+://([^/:]+).*|\1|')
        port=80
        [ "${mirror#https:}" = "$mirror" ] || port=443
        timeout 20 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null ||
                skip "no cached root in $cache and $host cannot be reached to make one"
        say "making a Debian 12 root in $base (minbase + $include_list)"
        rm -rf --one-file-system "$base.new"
        timeout 1200 mmdebstrap --variant=minbase --include="$include_list" \
                --aptopt='Acquire::Retries "3"' bookworm "$base.new" "$mirror" \
                > "$tmp/mmdebstrap.log" 2>&1 || { tail -n 30 "$tmp/mmdebstrap.log"; fail "mmdebstrap failed"; }
        rm -rf --one-file-system "$base"
        mv "$base.new" "$base"
fi
run=$(mktemp -d "$cache/run.XXXXXX")
cp -a --reflink=auto "$base/." "$run/"
flock -u 9
exec 9>&-

# The test's own files: the target, FIFOs that feed its commands, the files
# it answers in. /var/lib/zswapd-test is on the root's disk, so the host
# reaches them at $run/var/lib/zswapd-test without entering the container.
mkdir -p "$run/usr/local/libexec/zswapd-test" "$run/var/lib/zswapd-test"
chmod 1777 "$run/var/lib/zswapd-test"
cp "$target_bin" "$run/usr/local/libexec/zswapd-test/target"
cp "$hold_bin" "$run/usr/local/libexec/zswapd-test/hold"
if [ $mode = meson ]; then
        # tar, not cp: with the /usr prefix the unit is under /lib, a
        # symlink to usr/lib in the root (merged /usr), which cp would not
        # enter.
        tar -C "$tmp/inst" -c . | tar -C "$run" -x --keep-directory-symlink
else
        cp "$deb" "$run/root/"
fi
io=$run/var/lib/zswapd-test

# --- boot. This host has no systemd of its own and no system bus, which
# decides the options:
#   --register=no --keep-unit  no machined to register with, no manager to
#                              make a scope: the container stays in our cgroup;
#   --system-call-filter=pidfd_getfd
#                              nspawn's seccomp allow-list lacks it, and
#                              zswapd takes each target's userfaultfd with it;
#   --bind=/dev/userfaultfd    nspawn's /dev has only the basic nodes; zswapd
#                              hands this device to non-root targets so that
#                              their userfaultfd serves kernel-mode faults;
#   --private-network          the machine's network stays the host's alone
#                              (and the container keeps CAP_NET_ADMIN, which
#                              the unit's PrivateNetwork= uses for its loopback);
#   --capability=CAP_IPC_LOCK  not in nspawn's default set, and in the unit's
#                              CapabilityBoundingSet= (io_uring buffers).
# Without a system bus there is no machinectl or systemd-run -M: commands
# run in the container's namespaces with nsenter (ct below).
# CAP_SYS_RESOURCE may be outside this host's bounding set, and then the
# container's: zswapd widens its PSI windows and says so, and systemd cannot
# apply the unit's OOMScoreAdjust=; the checks below allow for that alone.
machine=zswapd-test-$$
systemd-nspawn --quiet -D "$run" --machine="$machine" --boot \
        --register=no --keep-unit --private-network \
        --system-call-filter=pidfd_getfd --bind=/dev/userfaultfd --capability=CAP_IPC_LOCK \
        --console=read-only > "$tmp/console.log" 2>&1 &
nspawn=$!

find_pid1() {
        kill -0 "$nspawn" 2>/dev/null || fail "systemd-nspawn exited: $(tail -n 20 "$tmp/console.log")"
        local p
        for p in $(pgrep -P "$nspawn"); do
                [ "$(cat "/proc/$p/comm" 2>/dev/null)" = systemd ] && pid1=$p && return 0
        done
        return 1
}
wait_for 60 "the container's systemd (PID 1) to start" find_pid1

# ct [--timeout S] CMD...: CMD inside the container, as PID 1's children see it.
ct() {
        local t=120
        [ "$1" = --timeout ] && { t=$2; shift 2; }
        timeout "$t" nsenter -t "$pid1" -a env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"
}
boot_done() {
        local s
        s=$(ct --timeout 10 systemctl is-system-running 2>/dev/null) || true
        case $s in running|degraded) return 0 ;; esac
        return 1
}
wait_for 120 "the container's boot to finish (systemctl is-system-running)" boot_done
booted=1
say "booted: $(ct systemctl --version | head -n 1), PID 1 is $pid1 on the host," \
    "state $(ct systemctl is-system-running || true)"

prop() { ct systemctl show -p "$2" --value "$1"; }
active() { [ "$(ct systemctl is-active "$1" 2>/dev/null)" = "$2" ]; }

# --- install: the package's postinst enables and starts the unit, as on a machine;
# after meson install, systemctl does, finding the unit where it was put.
if [ $mode = meson ]; then
        what="meson install (config in $confdir)"
        ct systemctl daemon-reload
        ct systemctl enable --now zswapd > "$tmp/enable.log" 2>&1 ||
                { cat "$tmp/enable.log"; fail "systemctl enable --now zswapd after meson install"; }
else
        what=$(basename "$deb")
        # As a user installs it: apt checks its Depends against the root
        # (which holds them and nothing more; the container has no network).
        ct env DEBIAN_FRONTEND=noninteractive apt-get install -y "/root/$what" \
                > "$tmp/apt.log" 2>&1 ||
                { cat "$tmp/apt.log"; fail "apt-get install ./$what failed in the root"; }
fi
[ "$(ct systemctl is-enabled zswapd)" = enabled ] || fail "$what did not enable zswapd.service"
zswapd_ready() {
        # Type=notify: active only after READY=1, and the status text it sends.
        active zswapd active && prop zswapd StatusText | grep -q '^Serving '
}
check_started() {
        wait_for 30 "zswapd.service active with status 'Serving ...' ($1)" zswapd_ready
        [ "$(prop zswapd NRestarts)" = 0 ] || fail "zswapd restarted on its own"
        ct zswapctl status > "$tmp/status" || fail "zswapctl status: $(cat "$tmp/status")"
}
check_started "installed by $what"
watchdog0=$(prop zswapd WatchdogTimestampMonotonic)
say "installed $what: enabled, active, status: $(prop zswapd StatusText)"

# The unit's privileges as the kernel applied them: the capabilities of its
# CapabilityBoundingSet= (DAC_READ_SEARCH 2, IPC_LOCK 14, SYS_PTRACE 19,
# SYS_RESOURCE 24) that the container has, and OOMScoreAdjust= where the
# container may lower it (CAP_SYS_RESOURCE).
main=$(prop zswapd MainPID)
bnd=$(ct sed -n 's/^CapBnd:\t//p' /proc/1/status)
eff=$(ct sed -n 's/^CapEff:\t//p' "/proc/$main/status")
want=$(( 0x$bnd & ((1 << 2) | (1 << 14) | (1 << 19) | (1 << 24)) ))
[ $((0x$eff)) = "$want" ] || fail "zswapd's capabilities are $eff, the unit and the container give $(printf %x "$want")"
oom=$(ct cat "/proc/$main/oom_score_adj")
rescue=$(ct pgrep -P "$main" -x zswapd-rescue) || fail "zswapd $main has no zswapd-rescue task"
rescue_oom=$(ct cat "/proc/$rescue/oom_score_adj")
[ "$rescue_oom" = "$oom" ] || fail "zswapd-rescue's oom_score_adj is $rescue_oom, zswapd's $oom"
if (( 0x$bnd & (1 << 24) )); then
        [ "$oom" = -1000 ] || fail "zswapd's oom_score_adj is $oom, the unit sets -1000"
        say "capabilities $eff as the unit sets them, oom_score_adj $oom (zswapd-rescue too)"
else
        say "capabilities $eff as the unit sets them, without CAP_SYS_RESOURCE (not in this" \
            "host's bounding set): oom_score_adj $oom (zswapd-rescue too), not the unit's -1000"
fi

# Two policies, loaded by the unit's ExecReload= (SIGHUP). The second keeps at most 16 MiB of its target in the pool: the rest
# goes to the swapfile once writeback is on.
cat > "$run$confdir/policy.d/60-check-systemd-writeback.conf" <<EOF
[Match]
Unit=zt-writeback.service
[Policy]
MinColdAge=1d
PoolLimit=16M
EOF
cat > "$run$confdir/policy.d/50-check-systemd.conf" <<EOF
[Match]
Unit=zt-root.service zt-nobody.service
# The policy attaches; the pages are taken by zswapctl reclaim alone, so
# that what is resident at each check does not depend on when the policy's
# own reclaim ran: no page is untouched for a day in a test whose every
# wait is bounded (minutes in all).
[Policy]
MinColdAge=1d
EOF
ct systemctl reload zswapd || fail "systemctl reload zswapd"
has_policies() {
        ct zswapctl policies --json |
                jq -e '[.policies[].name | select(test("^[56]0-check-systemd"))] | length == 2' >/dev/null
}
wait_for 30 "policies 50-check-systemd and 60-check-systemd-writeback loaded after systemctl reload" has_policies
active zswapd active || fail "zswapd not active after the reload"
say "systemctl reload: policies loaded"

# --- the targets: transient services of the test target. Each reads its
# commands from a FIFO it holds open read-write itself (so it never sees
# end-of-file and never blocks opening it) and answers one line per command.
declare -A tpid
start_target() { # UNIT [systemd-run options...]
        local unit=$1
        shift
        mkfifo -m 0666 "$io/$unit.in"
        ct systemd-run --quiet --unit="$unit" "$@" /bin/sh -c \
                "exec /usr/local/libexec/zswapd-test/target --synthetic <>/var/lib/zswapd-test/$unit.in >/var/lib/zswapd-test/$unit.out" ||
                fail "systemd-run $unit failed"
        wait_for 30 "$unit to start and say ready" grep -q '^ok ready' "$io/$unit.out"
        tpid[$unit]=$(prop "$unit" MainPID)
        grep -q "^ok ready pid=${tpid[$unit]}\$" "$io/$unit.out" ||
                fail "$unit: MainPID ${tpid[$unit]}, the target says $(cat "$io/$unit.out")"
}
# What a target that does not answer is doing: its answers so far, the
# state and kernel stack of each of its threads.
tdiag() {
        local t
        echo "answers: $(tr '\n' ';' < "$io/$1.out")"
        for t in $(ct ls "/proc/${tpid[$1]}/task"); do
                echo "thread $t: $(ct grep State: "/proc/${tpid[$1]}/task/$t/status")"
                ct cat "/proc/${tpid[$1]}/task/$t/stack" | head -n 12
        done
}
answered() { [ "$(wc -l < "$io/$1.out")" -gt "$2" ]; }
# tcmd UNIT SECONDS COMMAND: sends COMMAND, prints its answer, fails unless "ok".
tcmd() {
        local unit=$1 secs=$2 cmd=$3 n
        n=$(wc -l < "$io/$unit.out")
        # A target that died leaves no reader: bound the open too.
        # shellcheck disable=SC2016 # expanded by that sh
        timeout 10 sh -c 'echo "$1" > "$2"' sh "$cmd" "$io/$unit.in" ||
                fail "$unit does not take commands (state $(prop "$unit" ActiveState))"
        poll "$secs" answered "$unit" "$n" ||
                fail "$unit did not answer '$cmd' within ${secs}s: $(tdiag "$unit")"
        local ans
        ans=$(sed -n "$((n + 1))p" "$io/$unit.out")
        [ "${ans%% *}" = ok ] || fail "$unit: '$cmd' answered '$ans'"
        echo "$ans"
}
rss_kib() { tcmd "$1" 30 rss | sed -n 's/^ok rss_kb=\([0-9]*\)$/\1/p'; }
verify() {
        local ans
        ans=$(tcmd "$1" 300 verify)
        [ "$ans" = "ok good=16384 bad=0 first_bad=-1" ] || fail "$1 after $2: verify says '$ans'"
}
attached() { # UNIT: attached by one of our policies
        ct zswapctl targets --json | jq -e --argjson p "${tpid[$1]}" \
                '.targets[] | select(.pid == $p and (.policy | test("^[56]0-check-systemd")))' >/dev/null
}
tstat() { ct zswapctl stats "${tpid[$1]}" --json | jq -r ".targets[0].$2"; }

units=(zt-root zt-nobody)
start_target zt-root
start_target zt-nobody -p User=nobody
[ "$(ct stat -c %u "/proc/${tpid[zt-nobody]}")" = 65534 ] || fail "zt-nobody does not run as nobody"
for u in "${units[@]}"; do
        tcmd "$u" 120 "fill 64" >/dev/null
        wait_for 30 "policy 50-check-systemd to attach $u (pid ${tpid[$u]})" attached "$u"
done
status_serves() { prop zswapd StatusText | grep -q "^Serving $1 targets: "; }
wait_for 30 "zswapd's status text to count 2 targets (it says '$(prop zswapd StatusText)')" status_serves 2
say "policy attached both targets (root and User=nobody), 64 MiB each"

# reclaim_all PHASE: every target's pages into the store; resident memory
# falls below a quarter of the buffer, at least 15/16 of its pages stored.
reclaim_all() {
        local u before after stored
        for u in "${units[@]}"; do
                before=$(rss_kib "$u")
                [ "$before" -ge 65536 ] || fail "$u resident ${before} KiB before the reclaim ($1), under its 64 MiB"
                ct zswapctl reclaim "${tpid[$u]}" > "$tmp/reclaim" ||
                        fail "zswapctl reclaim $u ($1): $(cat "$tmp/reclaim")"
                stored=$(tstat "$u" stored_pages)
                after=$(rss_kib "$u")
                [ "$stored" -ge 15360 ] || fail "$u ($1): $stored pages stored, $(cat "$tmp/reclaim")"
                [ "$after" -lt 16384 ] || fail "$u ($1): resident $after KiB after the reclaim, was $before"
                say "$1: $u reclaimed: $stored pages stored, resident $before -> $after KiB"
        done
}
# given_back PHASE [UNIT...]: no page left in a store that is gone, every
# byte right (default: the two targets).
given_back() {
        local u r phase=$1
        shift
        [ $# -gt 0 ] || set -- "${units[@]}"
        for u in "$@"; do
                r=$(rss_kib "$u")
                [ "$r" -ge 65536 ] || fail "$u: resident $r KiB after $phase: pages not given back"
                verify "$u" "$phase"
        done
        say "$phase: every page back in $*, every byte verified"
}

reclaim_all "reclaim"
for u in "${units[@]}"; do verify "$u" "the reclaim"; done
[ "$(ct zswapctl stats --json | jq -r .global.faults)" -gt 0 ] || fail "the verifies raised no fault"
say "reclaim: both targets verified through the faults"

# WatchdogSec=30s: systemd records each WATCHDOG=1 (zswapd sends one at
# least every 10 s); a daemon that never pinged would be killed at 30 s.
watchdog_pinged() { [ "$(prop zswapd WatchdogTimestampMonotonic)" != "$watchdog0" ]; }
wait_for 30 "zswapd to ping systemd's watchdog" watchdog_pinged
say "watchdog: pinged"

# restart: stop gives the pages back, start attaches again; the new
# zswapd has writeback on, with its swapfile where the unit lets it write
# (/var/lib/zswapd, the StateDirectory=).
reclaim_all "before restart"
cat >> "$run$confdir/zswapd.conf" <<EOF

[Writeback]
Enabled=yes
SwapfileSize=256M
EOF
old=$(prop zswapd MainPID)
ct systemctl restart zswapd || fail "systemctl restart zswapd"
check_started "after systemctl restart"
[ "$(prop zswapd MainPID)" != "$old" ] || fail "systemctl restart left the same zswapd ($old)"
given_back "systemctl restart"
for u in "${units[@]}"; do
        wait_for 30 "policy to attach $u again after the restart" attached "$u"
done

# Writeback under the unit's sandbox (io_uring, O_TMPFILE in /var/lib/zswapd):
# a target held to 16 MiB in the pool, its pages read back from disk.
wb() { ct zswapctl stats --json | jq -r ".global.writeback.$1"; }
start_target zt-writeback
tcmd zt-writeback 120 "fill 64" >/dev/null
wait_for 30 "policy 60-check-systemd-writeback to attach zt-writeback" attached zt-writeback
ct zswapctl reclaim "${tpid[zt-writeback]}" > "$tmp/reclaim" || fail "zswapctl reclaim zt-writeback: $(cat "$tmp/reclaim")"
written=$(wb written_back_pages)
[ "$written" -gt 0 ] || fail "writeback: nothing written ($(ct zswapctl stats --json | jq -c .global.writeback))"
[ "$(wb write_failures)" = 0 ] || fail "writeback: $(wb write_failures) writes failed"
verify zt-writeback "writeback"
[ "$(wb disk_reads)" -gt 0 ] || fail "writeback: the verify read nothing back from disk"
say "writeback: $written pages written to the swapfile, $(wb disk_reads) read back, every byte verified"

# stop with pages stored (some of them on disk), then start.
reclaim_all "before stop"
ct zswapctl reclaim "${tpid[zt-writeback]}" > "$tmp/reclaim" || fail "zswapctl reclaim zt-writeback: $(cat "$tmp/reclaim")"
ct systemctl stop zswapd || fail "systemctl stop zswapd"
active zswapd inactive || fail "zswapd is $(ct systemctl is-active zswapd) after stop"
[ "$(prop zswapd Result)" = success ] || fail "zswapd stopped with result $(prop zswapd Result)"
given_back "systemctl stop"
given_back "systemctl stop" zt-writeback
ct systemctl start zswapd || fail "systemctl start zswapd"
check_started "after systemctl start"
for u in "${units[@]}"; do
        wait_for 30 "policy to attach $u again after the start" attached "$u"
done
reclaim_all "after start"
for u in "${units[@]}"; do verify "$u" "the reclaim after start"; done

# An upgrade with pages stored (the same package again: dpkg runs the
# upgrade path of its maintainer scripts) keeps them: zswapd re-executes
# the new binary in place (zswapctl reexec) instead of restarting. After
# meson install, zswapctl reexec itself.
upgrade=(dpkg -i "/root/$what")
[ $mode = deb ] || upgrade=(zswapctl reexec)
# note_kept: the pages each target has stored now, for kept_stored.
declare -A kept
note_kept() {
        local u
        for u in "${units[@]}"; do kept[$u]=$(tstat "$u" stored_pages); done
}
# kept_stored PHASE: every target still has the pages note_kept saw stored
# (none given back: resident memory stays low), and every byte is right.
kept_stored() {
        local u r
        for u in "${units[@]}"; do
                [ "$(tstat "$u" stored_pages)" = "${kept[$u]}" ] ||
                        fail "$u: ${kept[$u]} pages stored before $1, $(tstat "$u" stored_pages) after"
                r=$(rss_kib "$u")
                [ "$r" -lt 16384 ] || fail "$u: resident $r KiB after $1: pages were given back"
                verify "$u" "$1"
        done
}

reclaim_all "before ${upgrade[*]}"
old=$(prop zswapd MainPID)
note_kept
ct "${upgrade[@]}" > "$tmp/upgrade.log" 2>&1 || { cat "$tmp/upgrade.log"; fail "${upgrade[*]}"; }
check_started "after ${upgrade[*]}"
[ "$(prop zswapd MainPID)" = "$old" ] ||
        fail "${upgrade[*]} replaced zswapd $old by $(prop zswapd MainPID): a restart, not a re-exec"
kept_stored "${upgrade[*]}"
# Each target is still its policy's: the label crossed the exec.
for u in "${units[@]}"; do
        wait_for 30 "policy 50-check-systemd to keep $u after ${upgrade[*]}" attached "$u"
done
say "${upgrade[*]}: same zswapd (pid $old) re-executed, ${kept[*]} pages kept stored, every byte verified"

# Nothing zswapd logged at error level in all of this.
errs=$(ct journalctl -u zswapd --no-pager -o cat -p err) || true
[ -z "$errs" ] || fail "zswapd logged errors: $errs"
for u in "${units[@]}"; do
        active "$u" active || fail "$u is $(ct systemctl is-active "$u")"
done

# kill -9 with pages stored: zswapd-rescue saves them in the runtime
# directory (kept across the restart), systemd restarts zswapd
# (Restart=on-failure), and the new one takes every target over: no page
# comes back meanwhile, every byte verifies.
reclaim_all "before kill -9"
old=$(prop zswapd MainPID)
note_kept
restarts=$(prop zswapd NRestarts)
ct kill -KILL "$old"
restarted() {
        [ "$(prop zswapd NRestarts)" -gt "$restarts" ] && zswapd_ready &&
                [ "$(prop zswapd MainPID)" != "$old" ]
}
wait_for 120 "systemd to restart zswapd after kill -9 of $old" restarted
# The journal takes zswapd's lines from a stream, in its own time.
took_over() {
        ct journalctl -u zswapd --no-pager -o cat | grep -q "^Took over [0-9]* processes a dead zswapd served"
}
wait_for 30 "the restarted zswapd to log that it took the targets over" took_over
kept_stored "kill -9 and the restart"
# The rescue saved each target's policy (the label the engine keeps).
for u in "${units[@]}"; do
        wait_for 30 "policy 50-check-systemd to take $u back after kill -9" attached "$u"
done
say "kill -9: zswapd $old killed, restarted as $(prop zswapd MainPID), ${kept[*]} pages taken over, every byte verified"

# kill -9 while a fork child is not named yet: zswapd's reaper, which
# names fork children, is held (ptrace, zswapd-test-hold) across a fork of
# zt-root, so that the child's userfaultfd is only in zswapd's descriptor
# table when zswapd dies. zswapd-rescue hands it to systemd's file
# descriptor store (FileDescriptorStoreMax=, NotifyAccess=all), the
# restarted zswapd takes it from there and names the child, and the
# child's copy of the pages taken before the fork verifies.
reclaim_all "before a fork and kill -9"
old=$(prop zswapd MainPID)
restarts=$(prop zswapd NRestarts)
ct --timeout 300 /usr/local/libexec/zswapd-test/hold "$old" zswapd-reaper > "$io/hold.out" 2>&1 &
holder=$!
wait_for 30 "zswapd-test-hold to hold zswapd's reaper ($(cat "$io/hold.out"))" grep -q '^held ' "$io/hold.out"
child=$(tcmd zt-root 30 fork-hold | sed -n 's/^ok child=\([0-9]*\)$/\1/p')
[ -n "$child" ] || fail "zt-root's fork-hold named no child"
ct zswapctl stats "$child" > /dev/null 2>&1 && fail "fork child $child was named while zswapd's reaper was held"
ct kill -KILL "$old"
wait "$holder" || fail "zswapd-test-hold: $(cat "$io/hold.out")"
wait_for 120 "systemd to restart zswapd after kill -9 of $old" restarted
took_child() {
        ct journalctl -u zswapd --no-pager -o cat |
                grep -q "^Took 1 fork children not named yet, whose userfaultfds the service manager kept"
}
wait_for 30 "the restarted zswapd to take fork child $child from systemd's file descriptor store" took_child
named() { ct zswapctl stats "$child" > /dev/null 2>&1; }
wait_for 30 "the restarted zswapd to name fork child $child" named
ans=$(tcmd zt-root 300 fork-release)
[ "$ans" = "ok good=16384 bad=0" ] || fail "fork child $child after kill -9 says '$ans'"
for u in "${units[@]}"; do verify "$u" "kill -9 with a fork child not named yet"; done
[ "$(prop zswapd NFileDescriptorStore)" = 0 ] ||
        fail "systemd still stores $(prop zswapd NFileDescriptorStore) descriptors of zswapd's"
say "kill -9 with fork child $child not named yet: its userfaultfd kept in systemd's file descriptor store, the child named by zswapd $(prop zswapd MainPID), every byte verified"

# Removing the package with pages stored: its prerm stops the unit, which
# gives every page back (after meson install: disable --now).
removal=(dpkg --remove)
[ $mode = deb ] || removal=(systemctl disable --now)
reclaim_all "before ${removal[*]}"
ct "${removal[@]}" zswapd > "$tmp/remove.log" 2>&1 || { cat "$tmp/remove.log"; fail "${removal[*]} zswapd"; }
active zswapd active && fail "zswapd still active after ${removal[*]}"
[ "$(prop zswapd Result)" = success ] || fail "zswapd stopped with result $(prop zswapd Result) by ${removal[*]}"
given_back "${removal[*]}"
say "ok: $what: install, start, reload, policy attach (root and nobody), reclaim, restart, stop, start, upgrade, kill -9, kill -9 with a fork child not named yet, remove" \
    "under systemd $(ct systemctl --version | sed -n '1s/^systemd \([0-9]*\).*/\1/p')"
