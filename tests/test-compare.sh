#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Tests bench/compare on a small size: it runs the kernel contenders for
# real, its table and JSON parse, the workload finds no corrupted byte, it
# puts every setting back (swap, zswap parameters, zram, debugfs, cgroups),
# also when interrupted, and it refuses to run over swap that is in use.
# The over-commit workload runs at 2 x 16 MiB, under the kernel's limit and
# under a zswapd policy's budget.
#
#   tests/test-compare.sh SRCDIR BUILDDIR
#
# Skips (77) when not root, when swap is already in use here (we must not
# disturb it), or without a memory cgroup controller.

set -euo pipefail

srcdir=${1:?SRCDIR}
builddir=${2:?BUILDDIR}
compare=$srcdir/bench/compare
size=32
tmp=
own_swap=

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
sanitized=$(meson introspect "$builddir" --buildoptions 2>/dev/null |
        jq -r '.[] | select(.name == "b_sanitize") | .value' 2>/dev/null || echo none)
[ -n "$sanitized" ] || sanitized=none
# A sanitized workload's LeakSanitizer stops its own threads with ptrace
# when it exits, which fails ("does not work under ptrace") if zswapd
# holds it stopped for a drop at that moment; the other tests check leaks.
[ "$sanitized" = none ] || export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0

# Returns 0 whatever it found: under set -e a failing EXIT trap would turn
# a skip (77) into a failure.
cleanup() {
        [ -n "$own_swap" ] && { swapoff "$own_swap" 2>/dev/null; rm -f "$own_swap"; }
        [ -n "$tmp" ] && rm -rf "$tmp"
        return 0
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || skip "needs root"
# Swap, zswap and zram are the machine's: two runs at once (another build
# tree's suite, a benchmark) would switch them under each other. The lock
# bench/compare takes, held across all of its runs here.
lock=/run/lock/zswapd-compare.lock
exec 9> "$lock"
flock -w 400 9 || skip "another bench/compare has held $lock for 400 s"
export ZSWAPD_COMPARE_LOCKED=1
[ "$(awk 'NR > 1' /proc/swaps | wc -l)" = 0 ] || skip "swap already in use on this machine"
[ -d /sys/fs/cgroup/memory ] || grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null ||
        skip "no memory cgroup controller"
[ -x "$builddir/bench/zswapd-bench-workload" ] || fail "workload not built in $builddir"

tmp=$(mktemp -d /tmp/test-compare.XXXXXX)
swapfile=/var/tmp/test-compare.$$.swap

# Everything the driver may touch, as one text to compare before and after.
state() {
        echo "swaps:"; awk 'NR > 1 { print $1 }' /proc/swaps
        echo "zswap:"; grep -H . /sys/module/zswap/parameters/* 2>/dev/null || true
        if [ -e /sys/block/zram0 ]; then
                echo "zram:"; cat /sys/block/zram0/disksize /sys/block/zram0/comp_algorithm
        fi
        echo "debugfs:"; grep -c ' /sys/kernel/debug ' /proc/mounts || true
        echo "swapfile:"; ls "$swapfile" 2>/dev/null || true
}

# The groups bench/compare makes, of any run (zswapd-compare.PID.NAME).
compare_groups() {
        find /sys/fs/cgroup/memory /sys/fs/cgroup -maxdepth 4 -type d -name 'zswapd-compare.*' \
                2>/dev/null | sort -u || true
}

assert_restored() {
        local foreign left

        state > "$tmp/after"
        # A swap area that neither bench/compare nor this test makes is
        # another program's (one that does not take the lock), switched on
        # meanwhile: then nothing here can be judged.
        foreign=$(awk 'NR > 1 { print $1 }' /proc/swaps | grep -vxF -e "$swapfile" -e /dev/zram0 || true)
        [ -z "$foreign" ] || skip "another program turned swap on during the run: $foreign"
        diff -u "$tmp/before" "$tmp/after" || fail "$1: settings not restored"
        # Only groups that were not there before are this run's: one left
        # by an earlier run may go meanwhile.
        compare_groups > "$tmp/groups.after"
        left=$(comm -13 "$tmp/groups.before" "$tmp/groups.after")
        [ -z "$left" ] || fail "$1: groups left behind: $left"
}

# await_exit_or_line PID FILE REGEX: waits up to two minutes until FILE
# has a line matching REGEX (or, with an empty FILE, until PID exits).
await_exit_or_line() {
        local i

        for i in $(seq 1 2400); do
                if [ -n "$2" ]; then
                        grep -q "$3" "$2" && return 0
                        kill -0 "$1" 2>/dev/null || return 1
                else
                        kill -0 "$1" 2>/dev/null || return 0
                        # A zombie has exited: wait reaps it.
                        [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" = Z ] && return 0
                fi
                sleep 0.05
        done
        return 1
}

# What a process that did not get on is doing: its state, whom it waits
# for, what traces it.
proc_report() {
        [ -d "/proc/$1" ] || { echo "process $1 is gone"; return 0; }
        echo "process $1: $(grep -E '^(State|TracerPid|SigPnd|ShdPnd|SigBlk)' "/proc/$1/status" | tr '\n\t' '  ')"
        echo "wchan $(cat "/proc/$1/wchan" 2>/dev/null); stack: $(tr '\n' ' ' < "/proc/$1/stack" 2>/dev/null)"
}

# A JSON checker that exists here, strongest first.
json_ok() {
        if command -v jq >/dev/null; then
                jq -e . "$1" >/dev/null
        elif command -v python3 >/dev/null; then
                python3 -m json.tool "$1" >/dev/null
        else
                echo "no jq or python3: JSON syntax not checked" >&2
        fi
}

# figure WORKLOAD CONTENDER KEY -> its median ("" when absent).
figure() {
        jq -r --arg w "$1" --arg c "$2" --arg k "$3" \
                '.results[] | select(.workload == $w and .contender == $c) | .figures[$k].median // empty' \
                "$tmp/out.json"
}

state > "$tmp/before"
compare_groups > "$tmp/groups.before"
contenders=floor,swapfile,zswap,zram,zswapd-lz4

echo "== JSON run, both workloads"
rc=0
"$compare" --size $size --reps 1 --contenders $contenders --workload all --json \
        --build-dir "$builddir" --swapfile "$swapfile" > "$tmp/out.json" 2> "$tmp/err" || rc=$?
cat "$tmp/err"
[ $rc = 77 ] && skip "bench/compare refused to run: $(tail -n 1 "$tmp/err")"
grep -q "swap appeared meanwhile" "$tmp/err" && skip "another program turned swap on during the run"
[ $rc = 0 ] || fail "bench/compare failed with $rc"
assert_restored "JSON run"
json_ok "$tmp/out.json" || fail "output is not JSON"
if command -v jq >/dev/null; then
        [ "$(jq -r .size_mib "$tmp/out.json")" = $size ] || fail "size_mib"
        [ "$(jq -r '.results | length' "$tmp/out.json")" = 11 ] ||
                fail "expected 5 contenders x 2 workloads and the userfaultfd floor"
        # Not a byte lost anywhere, in either workload.
        # (The userfaultfd floor times faults on pages of its own: latencies only.)
        bad=$(jq '[.results[] | select(.available and .contender != "uffd-floor") | .figures.corrupted_bytes.max] | map(select(. != 0)) | length' "$tmp/out.json")
        [ "$bad" = 0 ] || fail "corrupted bytes reported"
        [ "$(jq '[.results[] | select(.available and .contender != "uffd-floor") | .figures.corrupted_bytes] | map(select(. == null)) | length' "$tmp/out.json")" = 0 ] ||
                fail "a contender reported no corrupted_bytes figure"
        # The floor evicts nothing; the swapfile takes 3/4 of the size out of
        # the workload, most of it from the filled pages (a sanitizer
        # runtime's cold memory may go first, and its shadow pages count
        # too: hence the loose upper bound).
        [ "$(figure reread floor evicted_pages)" = 0 ] || fail "floor evicted pages"
        # The userfaultfd round trip alone was timed, both ways.
        for k in floor_p50_us floor_p99_us floor_same_cpu_p50_us floor_same_cpu_p99_us; do
                awk -v v="$(figure reread uffd-floor $k)" 'BEGIN { exit !(v > 0) }' ||
                        fail "no userfaultfd floor figure $k"
        done
        ev=$(figure reread swapfile evicted_mib)
        awk -v e="$ev" -v s=$size 'BEGIN { exit !(e >= s / 2 && e <= 2 * s) }' ||
                fail "swapfile reclaim took $ev MiB, expected about $(( size * 3 / 4 ))"
        # Under ASan its runtime's tens of MiB of cold memory are what the
        # kernel's LRU takes first at this size: only the MiB check holds.
        if ! grep -q __asan_init "$builddir/bench/zswapd-bench-workload"; then
                ev=$(figure reread swapfile evicted_pages)
                [ -n "$ev" ] && [ "${ev%.*}" -ge $(( size * 256 / 2 )) ] ||
                        fail "only $ev of the workload's $(( size * 256 )) pages were evicted"
                [ -n "$(figure reread swapfile lat_p99_us)" ] || fail "no latency for the swapfile"
        fi
        # The table (on stderr with --json) gives every contender's figures
        # as multiples of zswap's when zswap ran, e.g. the swapfile's
        # reclaim speed.
        if [ "$(jq -r '.results[] | select(.workload == "reread" and .contender == "zswap") | .available' "$tmp/out.json")" = true ]; then
                grep -q "^as a multiple of kernel zswap's median:" "$tmp/err" || fail "no ratios to zswap in the table"
                awk '$1 == "swapfile" && NF == 5 { ok = 1 } END { exit !ok }' "$tmp/err" || fail "no swapfile row among the ratios"
        fi
        # Compressing contenders that ran report a ratio above 1 and save memory.
        for c in zswap zram; do
                [ "$(jq -r --arg c $c '.results[] | select(.workload == "reread" and .contender == $c) | .available' "$tmp/out.json")" = true ] || continue
                awk -v r="$(figure reread $c ratio)" 'BEGIN { exit !(r > 1) }' || fail "$c ratio"
                awk -v s="$(figure reread $c saved_mib)" 'BEGIN { exit !(s > 0) }' || fail "$c saved nothing"
        done
        # The zswapd hook says why it did not run, until the daemon exists.
        if [ ! -x "$builddir/daemon/zswapd" ]; then
                [ "$(jq -r '.results[] | select(.contender == "zswapd-lz4") | .available' "$tmp/out.json" | sort -u)" = false ] ||
                        fail "zswapd-lz4 reported available without a daemon"
        fi
        th=$(figure overcommit swapfile throughput_mibs)
        [ -n "$th" ] || fail "no over-commit throughput for the swapfile"
        # Under the kernel's limit the group never goes over its budget, and
        # what did not fit was reclaimed and read back.
        [ "$(figure overcommit swapfile over_budget_mib)" = 0 ] ||
                fail "the swapfile's group went $(figure overcommit swapfile over_budget_mib) MiB over a hard limit"
        # Not under a sanitizer: there the kernel's limit reclaims other
        # memory of the workload first (in an ASan run none of its data
        # pages left it, under any contender), so the figure is empty.
        fs=$(figure overcommit swapfile faults_served)
        if [ "$sanitized" = none ]; then
                [ -n "$fs" ] && [ "$fs" -gt 0 ] || fail "no page served back under the swapfile (faults_served '$fs')"
        fi
        [ -z "$(figure overcommit floor over_budget_mib)" ] || fail "the floor has no budget to go over"
        # zswapd holds the same budget with a policy: it ran, and says how
        # far the group went over it.
        if [ -x "$builddir/daemon/zswapd" ]; then
                [ -n "$(figure overcommit zswapd-lz4 throughput_mibs)" ] || fail "no over-commit under zswapd"
                [ -n "$(figure overcommit zswapd-lz4 over_budget_mib)" ] || fail "no over_budget_mib under zswapd"
                [ -n "$(figure reread zswapd-lz4 daemon_rss_mib)" ] || fail "no daemon_rss_mib under zswapd"
        fi
fi

echo "== table run"
"$compare" --size $size --reps 2 --contenders floor,zram --workload reread \
        --build-dir "$builddir" --swapfile "$swapfile" > "$tmp/out.txt" 2> "$tmp/err" || fail "table run failed: $(cat "$tmp/err")"
cat "$tmp/out.txt"
assert_restored "table run"
grep -q '^reclaim 75% and re-read:' "$tmp/out.txt" || fail "no table heading"
grep -qE '^floor +- +- +- +- ' "$tmp/out.txt" || fail "no floor row"
grep -qE '^  handler on any CPU p50 [0-9.]+(±[0-9]+%)? us' "$tmp/out.txt" || fail "no userfaultfd floor line"
if grep -q '^zram +/dev/zram0' "$tmp/out.txt" || grep -q '^zram +no ' "$tmp/out.txt"; then
        echo "zram not available here"
else
        # Ten columns: name, eight figures and the corrupted bytes (0).
        awk '$1 == "zram" { exit !(NF == 10 && $NF == 0) }' "$tmp/out.txt" || fail "zram row malformed"
fi

echo "== interrupted run"
"$compare" --size 64 --reps 3 --contenders swapfile --workload reread \
        --build-dir "$builddir" --swapfile "$swapfile" > /dev/null 2> "$tmp/err" &
pid=$!
# Interrupt it in the middle, once its swap is on. (TERM: a background job
# of a non-interactive shell starts with SIGINT ignored, which bash cannot
# trap; the driver handles INT the same way.)
for _ in $(seq 1 600); do
        awk 'NR > 1' /proc/swaps | grep -q "$swapfile" && break
        sleep 0.05
done
awk 'NR > 1' /proc/swaps | grep -q "$swapfile" || fail "interrupt test: swap never came on"
kill -TERM $pid
rc=0
wait $pid || rc=$?
[ $rc = 143 ] || fail "interrupted run exited with $rc, expected 143"
assert_restored "interrupted run"

echo "== refuses to run over swap in use"
own_swap=/var/tmp/test-compare-own.$$.swap
fallocate -l 16M "$own_swap" && chmod 600 "$own_swap" && mkswap "$own_swap" >/dev/null
swapon -p -2 "$own_swap"
rc=0
"$compare" --size $size --reps 1 --contenders floor --build-dir "$builddir" \
        --swapfile "$swapfile" > /dev/null 2>&1 || rc=$?
swapoff "$own_swap"; rm -f "$own_swap"; own_swap=
[ $rc = 77 ] || fail "ran over swap in use (exit $rc, expected 77)"
assert_restored "refusal"

echo "== the workload counts changed bytes exactly"
# Without this, "0 corrupted bytes" above could come from a check that
# never finds anything.
# Each mode writes a file of its own: the ready line of the one before
# must not start the next before it has blocked its go signal.
for mode in reread usemem; do
        out=$tmp/w-$mode.out
        "$builddir/bench/zswapd-bench-workload" $mode --size 16 --inject-corruption 3 > "$out" &
        pid=$!
        await_exit_or_line $pid "$out" '^ready' || fail "workload $mode: no ready line; $(proc_report $pid)"
        kill -USR1 $pid
        await_exit_or_line $pid "" "" || fail "workload $mode did not finish; $(proc_report $pid)"
        wait $pid || fail "workload $mode failed"
        grep -qx 'corrupted_bytes=3' "$out" || fail "$mode: $(grep corrupted "$out")"
        grep -qx 'corrupted_pages=3' "$out" || fail "$mode: wrong corrupted page count"
done

echo "== bad usage"
rc=0
"$compare" --size nope > /dev/null 2>&1 || rc=$?
[ $rc = 2 ] || fail "--size nope exited with $rc, expected 2"

echo "PASS"
