#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# zswapd's main job on a built-in default, from a fresh clone, as root:
#
#   tests/demo.sh [--mib N]
#
# Builds what is missing, starts zswapd on a private socket, starts a
# workload holding N MiB (default 512) of realistic data with a checksum per
# page, attaches zswapd to it, takes all its pages (zswapctl reclaim --all),
# lets the workload read every page back in random order and check every
# byte, detaches, checks every byte again, and prints what was saved and
# what the faults cost. Exits non-zero on any corruption or failure; stops
# everything it started on exit or interrupt.
set -euo pipefail

MIB=512
usage() {
        echo "usage: $0 [--mib N]   (default 512; run as root)"
}
while [ $# -gt 0 ]; do
        case "$1" in
        --mib) MIB="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
        --mib=*) MIB="${1#--mib=}"; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
        esac
done
case "$MIB" in
''|*[!0-9]*|0) echo "--mib wants a positive number of MiB" >&2; exit 2 ;;
esac
if [ "$(id -u)" -ne 0 ]; then
        echo "Run as root: zswapd needs ptrace and userfaultfd (sudo $0)." >&2
        exit 1
fi

cd "$(dirname "$0")/.."
BUILD=build
ZSWAPD=$BUILD/daemon/zswapd
ZSWAPCTL=$BUILD/cli/zswapctl
WORKLOAD=$BUILD/bench/zswapd-bench-fault

TMP=""
DAEMON_PID=""
WORKLOAD_PID=""
cleanup() {
        local rc=$?
        trap - EXIT INT TERM
        exec 3>&- 2>/dev/null || true
        if [ -n "$WORKLOAD_PID" ] && kill -0 "$WORKLOAD_PID" 2>/dev/null; then
                kill -KILL "$WORKLOAD_PID" 2>/dev/null || true
                wait "$WORKLOAD_PID" 2>/dev/null || true
        fi
        if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
                kill -TERM "$DAEMON_PID" 2>/dev/null || true
                wait "$DAEMON_PID" 2>/dev/null || true
        fi
        if [ $rc -ne 0 ] && [ -n "$TMP" ] && [ -s "$TMP/zswapd.log" ]; then
                echo "--- zswapd log (last lines) ---" >&2
                tail -n 20 "$TMP/zswapd.log" >&2
        fi
        [ -n "$TMP" ] && rm -rf "$TMP"
        exit $rc
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

die() {
        echo "demo: $*" >&2
        exit 1
}

step() {
        printf '==> %s\n' "$*"
}

# Waits up to $2 seconds for a line starting with $1 in the workload's
# output, failing early if the workload died.
wait_line() {
        local i
        for ((i = 0; i < $2 * 10; i++)); do
                if grep -q "^$1" "$TMP/workload.out"; then
                        grep "^$1" "$TMP/workload.out" | tail -n 1
                        return 0
                fi
                kill -0 "$WORKLOAD_PID" 2>/dev/null || die "the workload died (see above)"
                sleep 0.1
        done
        die "the workload did not answer '$1' within $2 s"
}

# field NAME: the value of "NAME":... (number) in the JSON object on stdin.
field() {
        sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p" | head -n 1
}

# The JSON of our target only: what follows its "pid".
target_stats() {
        "$ZSWAPCTL" -s "$SOCK" stats "$1" --json | sed -n "s/.*\"pid\":$1,//p"
}

rss_kib() {
        awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

mib() {
        awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'
}

step "checking build dependencies (tests/setup-deps.sh)"
tests/setup-deps.sh
BUILD_LOG=$(mktemp /tmp/zswapd-demo-build.XXXXXX)
if [ ! -f "$BUILD/build.ninja" ]; then
        step "configuring $BUILD"
        meson setup "$BUILD" >"$BUILD_LOG" 2>&1 || { cat "$BUILD_LOG" >&2; die "meson setup failed"; }
fi
step "building zswapd, zswapctl and the workload"
meson compile -C "$BUILD" daemon/zswapd:executable cli/zswapctl bench/zswapd-bench-fault \
        >"$BUILD_LOG" 2>&1 || { cat "$BUILD_LOG" >&2; die "build failed"; }
rm -f "$BUILD_LOG"

TMP=$(mktemp -d /tmp/zswapd-demo.XXXXXX)
SOCK=$TMP/zswapd.sock

step "starting zswapd on $SOCK"
"$ZSWAPD" --socket "$SOCK" 2>"$TMP/zswapd.log" &
DAEMON_PID=$!
for ((i = 0; i < 100; i++)); do
        [ -S "$SOCK" ] && break
        kill -0 "$DAEMON_PID" 2>/dev/null || die "zswapd exited: $(tail -n 3 "$TMP/zswapd.log")"
        sleep 0.1
done
[ -S "$SOCK" ] || die "zswapd did not create $SOCK within 10 s"

step "starting a workload with $MIB MiB of realistic data (program images, text, 10% zero pages)"
mkfifo "$TMP/cmd"
"$WORKLOAD" --workload --mib "$MIB" <"$TMP/cmd" >>"$TMP/workload.out" &
WORKLOAD_PID=$!
exec 3>"$TMP/cmd"
ready=$(wait_line ready 120)
pid=$(echo "$ready" | sed -n 's/.*pid=\([0-9]*\).*/\1/p')
pages=$(echo "$ready" | sed -n 's/.*pages=\([0-9]*\).*/\1/p')
[ "$pid" = "$WORKLOAD_PID" ] || die "unexpected workload answer: $ready"
rss_before=$(rss_kib "$pid")

step "zswapctl attach $pid"
"$ZSWAPCTL" -s "$SOCK" attach "$pid"

step "zswapctl reclaim $pid --all"
t0=$(date +%s%N)
"$ZSWAPCTL" -s "$SOCK" reclaim "$pid" --all
t1=$(date +%s%N)
rss_after=$(rss_kib "$pid")
stats=$(target_stats "$pid")
stored_pages=$(echo "$stats" | field stored_pages)
payload=$(echo "$stats" | field payload_bytes)
pool=$(echo "$stats" | field pool_bytes)
same=$(echo "$stats" | field same_filled_pages)
[ -n "$stored_pages" ] && [ -n "$pool" ] || die "cannot read 'zswapctl stats $pid --json'"

step "the workload reads every page back in random order and checks every byte"
echo reread >&3
reread=$(wait_line reread 600)
corrupted=$(echo "$reread" | sed -n 's/.*corrupted=\([0-9]*\).*/\1/p')
app_p50=$(echo "$reread" | sed -n 's/.*p50_ns=\([0-9]*\).*/\1/p')
app_p99=$(echo "$reread" | sed -n 's/.*p99_ns=\([0-9]*\).*/\1/p')
reread_mib_s=$(echo "$reread" | sed -n 's/.*mib_s=\([0-9.]*\).*/\1/p')
stats=$(target_stats "$pid")
faults=$(echo "$stats" | field faults)
eng_p50=$(echo "$stats" | field fault_ns_p50)
eng_p99=$(echo "$stats" | field fault_ns_p99)
rss_reread=$(rss_kib "$pid")

step "zswapctl detach $pid, then the workload checks every byte again"
"$ZSWAPCTL" -s "$SOCK" detach "$pid"
: >"$TMP/workload.out"
echo reread >&3
again=$(wait_line reread 600)
corrupted_again=$(echo "$again" | sed -n 's/.*corrupted=\([0-9]*\).*/\1/p')
echo exit >&3
exec 3>&-
wait "$WORKLOAD_PID" || die "the workload exited with an error"
WORKLOAD_PID=""
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || die "zswapd exited with an error: $(tail -n 3 "$TMP/zswapd.log")"
DAEMON_PID=""

awk -v mib="$MIB" -v pages="$pages" -v rb="$rss_before" -v ra="$rss_after" \
    -v rr="$rss_reread" -v sp="$stored_pages" -v pl="$payload" -v po="$pool" -v same="$same" \
    -v ns="$((t1 - t0))" -v faults="$faults" -v ap50="$app_p50" -v ap99="$app_p99" \
    -v ep50="$eng_p50" -v ep99="$eng_p99" -v rd="$reread_mib_s" -v bad="$corrupted" \
    -v bad2="$corrupted_again" 'BEGIN {
        stored = sp * 4096
        printf "\nzswapd demo: %d MiB workload (%d pages)\n", mib, pages
        printf "  resident before reclaim   %8.1f MiB\n", rb / 1024
        printf "  resident after reclaim    %8.1f MiB\n", ra / 1024
        printf "  stored in zswapd          %8.1f MiB of pages (%d, %d of them zero/same-filled)\n", stored / 1048576, sp, same
        printf "    compressed payload      %8.1f MiB\n", pl / 1048576
        printf "    pool memory             %8.1f MiB\n", po / 1048576
        printf "  memory saved              %8.1f MiB (resident drop minus pool)\n", (rb - ra) / 1024 - po / 1048576
        printf "  compression ratio         %8.2f (pages / pool), %.2f (pages / payload)\n", po ? stored / po : 0, pl ? stored / pl : 0
        printf "  reclaim                   %8.0f MiB/s (%.2f s)\n", ns ? stored / 1048576 / (ns / 1e9) : 0, ns / 1e9
        printf "  re-read in random order   %8.0f MiB/s, resident again %.1f MiB\n", rd, rr / 1024
        printf "  fault latency (workload)  p50 %.1f us, p99 %.1f us\n", ap50 / 1000, ap99 / 1000
        printf "  fault service (zswapd)    p50 %.1f us, p99 %.1f us over %d faults\n", ep50 / 1000, ep99 / 1000, faults
        printf "  verified %d pages, %d corrupted; after detach %d pages, %d corrupted\n", pages, bad, pages, bad2
}'
[ "$corrupted" = 0 ] && [ "$corrupted_again" = 0 ] || die "CORRUPTION: $corrupted pages after the reclaim, $corrupted_again after detach"
echo "demo: OK"
