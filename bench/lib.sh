# SPDX-License-Identifier: LGPL-2.1-or-later
#
# bench/lib.sh: what bench/compare, bench/apps, bench/coldage and
# bench/stops share, sourced by each: the record of everything they change
# on the machine and cleanup(), which puts it back; the cgroup v1/v2
# helpers and one application's groups; the kernel contenders (zswap with
# a swapfile behind it, zram, a plain swapfile) and the zswapd daemon; the
# per-run figures and their medians.
#
# The sourcing script sets, before calling anything here: bench_name (the
# prefix of its messages and of its cgroups' names), tmp and results (once
# made), contenders, arg_swapfile, arg_reclaim_cpu, arg_workload_cpu,
# workload (zswapd-bench-workload), zswapd and zswapctl. It installs
# cleanup() on EXIT and turns INT and TERM into exits.
# shellcheck disable=SC2154,SC2034   # those variables, set and read by the sourcing script

log() { echo "$bench_name: $*" >&2; }
die() { log "$*"; exit 1; }
refuse() { log "$*"; exit 77; }

# ---- what we touched, for cleanup() --------------------------------------------

tmp=
cgroups_made=()         # created cgroup directories, removed in reverse order
swaps_on=()             # swap areas we enabled
pids=()                 # processes we started
swapfile_made=0
zram_touched=0
zram_orig_alg=
debugfs_mounted=0
zswap_params=(enabled compressor max_pool_percent accept_threshold_percent shrinker_enabled)
declare -A zswap_saved=()
declare -A sysctl_saved=()   # /proc/sys files changed (sysctl_set), and their values

cleanup() {
        local rc=$? p cg dev i
        set +e
        trap - EXIT INT TERM
        for p in "${pids[@]}"; do
                kill -KILL "$p" 2>/dev/null
                wait "$p" 2>/dev/null
        done
        for ((i = ${#cgroups_made[@]} - 1; i >= 0; i--)); do
                cg=${cgroups_made[i]}
                # A killed task leaves its group a moment later (longer on
                # a loaded machine); a task we did not start ourselves
                # (a workload's child) is killed here.
                for _ in $(seq 1 50); do
                        [ -d "$cg" ] || break
                        rmdir "$cg" 2>/dev/null && break
                        # shellcheck disable=SC2046
                        kill -KILL $(cat "$cg/cgroup.procs" 2>/dev/null) 2>/dev/null
                        sleep 0.2
                done
                [ -d "$cg" ] && log "could not remove cgroup $cg"
        done
        for dev in "${swaps_on[@]}"; do
                swap_active "$dev" && { swapoff "$dev" || log "swapoff $dev failed"; }
        done
        if [ $zram_touched = 1 ]; then
                echo 1 > /sys/block/zram0/reset
                [ -n "$zram_orig_alg" ] && echo "$zram_orig_alg" > /sys/block/zram0/comp_algorithm
        fi
        if [ ${#zswap_saved[@]} -gt 0 ]; then
                echo N > /sys/module/zswap/parameters/enabled
                for p in "${zswap_params[@]}"; do
                        [ "$p" = enabled ] && continue
                        [ -n "${zswap_saved[$p]:-}" ] && echo "${zswap_saved[$p]}" > /sys/module/zswap/parameters/$p
                done
                echo "${zswap_saved[enabled]}" > /sys/module/zswap/parameters/enabled
        fi
        for p in "${!sysctl_saved[@]}"; do
                echo "${sysctl_saved[$p]}" > "$p" || log "could not restore $p to ${sysctl_saved[$p]}"
        done
        [ $swapfile_made = 1 ] && rm -f "$arg_swapfile"
        [ $debugfs_mounted = 1 ] && umount /sys/kernel/debug
        [ -n "$tmp" ] && rm -rf "$tmp"
        exit $rc
}

# Sets /proc/sys file $1 to $2; cleanup() puts back what it was first.
sysctl_set() {
        [ -n "${sysctl_saved[$1]+set}" ] || sysctl_saved[$1]=$(cat "$1")
        echo "$2" > "$1"
}

swap_active() { awk -v d="$1" 'NR > 1 && $1 == d { f = 1 } END { exit !f }' /proc/swaps; }
swaps_in_use() { awk 'NR > 1' /proc/swaps | wc -l; }

# ---- cgroups: v2 where the memory controller is there, else v1 ------------------

cg_mode=
cg_parent=

cg_detect() {
        local rel
        if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
                cg_mode=v2
                cg_parent=/sys/fs/cgroup
                grep -qw memory /sys/fs/cgroup/cgroup.subtree_control ||
                        die "the root cgroup does not delegate the memory controller"
        elif [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
                cg_mode=v1
                # Our own group, so that the session's accounting still sees us.
                rel=$(awk -F: '$2 == "memory" { print $3 }' /proc/self/cgroup)
                cg_parent=/sys/fs/cgroup/memory${rel%/}
        else
                refuse "no memory cgroup controller (v1 or v2) here"
        fi
}

# Creates a group named after us and $1; its path is left in cg_new.
cg_create() {
        cg_new=$cg_parent/zswapd-$bench_name.$$.$1
        mkdir "$cg_new"
        cgroups_made+=("$cg_new")
}

cg_remove() {
        local cg=$1
        for _ in 1 2 3 4 5 6 7 8 9 10; do
                rmdir "$cg" 2>/dev/null && return 0
                sleep 0.2
        done
        die "could not remove cgroup $cg"
}

cg_usage() { if [ $cg_mode = v2 ]; then cat "$1/memory.current"; else cat "$1/memory.usage_in_bytes"; fi; }
# Writes $2 to the memory controller's file $1. A v1 limit write fails with
# EINTR whenever a signal is pending, even one the shell got from a child
# that just ended (SIGCHLD): tried again a few times.
cg_write() {
        local i
        for i in 1 2 3 4 5 6 7 8; do
                echo "$2" 2>/dev/null > "$1" && return 0
                sleep 0.05
        done
        echo "$2" > "$1"
}
cg_limit_file() { if [ $cg_mode = v2 ]; then echo "$1/memory.max"; else echo "$1/memory.limit_in_bytes"; fi; }
# The group's highest usage since cg_peak_reset (v2: since it was made).
cg_peak_reset() { [ $cg_mode = v1 ] && cg_write "$1/memory.max_usage_in_bytes" 0; return 0; }
cg_peak() { if [ $cg_mode = v2 ]; then cat "$1/memory.peak" 2>/dev/null; else cat "$1/memory.max_usage_in_bytes"; fi; }
cg_unlimit() { if [ $cg_mode = v2 ]; then cg_write "$1/memory.max" max; else cg_write "$1/memory.limit_in_bytes" -1; fi; }

# ---- one application's groups (bench/apps, bench/coldage, bench/stops) ---------
# A memory group (the kernel's limit, and the usage zswapd's budget counts)
# and, where the memory controller is v1, a group of the same name in the v2
# hierarchy (or the name=systemd one), which is what zswapd matches a
# process's cgroup path against (zswapd.conf(5), CgroupPath=): the policy
# takes this application and nothing else on the machine.

match_root=

match_detect() {
        if [ $cg_mode = v2 ]; then
                match_root=$cg_parent
        else
                match_root=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
                [ -n "$match_root" ] || match_root=$(awk '$3 == "cgroup" && $4 ~ /name=systemd/ { print $2; exit }' /proc/mounts)
        fi
        [ -n "$match_root" ] || refuse "no cgroup hierarchy to match zswapd's policy with (v2 or name=systemd)"
}

# Makes the groups of run $1: memory group in app_cg, the cgroup path
# zswapd sees in app_path, the directories to join in app_dirs.
app_groups() {
        cg_create "$1"
        app_cg=$cg_new
        app_dirs=("$app_cg")
        if [ $cg_mode = v2 ]; then
                app_path=${app_cg#"$match_root"}
        else
                mkdir "$match_root/zswapd-$bench_name.$$.$1"
                cgroups_made+=("$match_root/zswapd-$bench_name.$$.$1")
                app_dirs+=("$match_root/zswapd-$bench_name.$$.$1")
                app_path=/zswapd-$bench_name.$$.$1
        fi
}

app_groups_remove() {
        local d
        for d in "${app_dirs[@]}"; do cg_remove "$d"; done
}

# Starts "$@" in the application's groups, pinned to the workload CPU,
# output in $out (emptied here: wait_line must never find a line of the
# run before); its pid in started.
start_app() {
        local out=$1
        shift
        : > "$out"
        taskset -c "$arg_workload_cpu" sh -c 'for d in $1; do echo $$ > "$d/cgroup.procs" || exit 1; done; shift; exec "$@"' \
                sh "${app_dirs[*]}" "$@" >"$out" 2>"$out.err" &
        started=$!
        pids+=("$started")
}

# Runs "$@" on the reclaim CPU in the background and waits for it, so that
# an interrupt is acted on at once; output in $1.
run_side() {
        local out=$1 pid
        shift
        taskset -c "$arg_reclaim_cpu" "$@" >"$out" 2>"$out.err" &
        pid=$!
        pids+=("$pid")
        reap "$pid"
}

# Waits until the line $3 appears in file $2 of process $1.
wait_line() {
        local pid=$1 out=$2 what=$3
        for _ in $(seq 1 24000); do
                grep -qs "^$what" "$out" && return 0
                kill -0 "$pid" 2>/dev/null || { log "the application died before '$what': $(tail -n 3 "$out.err")"; return 1; }
                sleep 0.05
        done
        log "no '$what' after 20 minutes"
        return 1
}

# ---- small helpers -------------------------------------------------------------

calc() { awk "BEGIN { printf \"%.${2:-3}f\", $1 }"; }
rss_bytes() { awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$1/status"; }
pss_bytes() { awk '/^Pss:/ { print $2 * 1024 }' "/proc/$1/smaps_rollup"; }
cpu_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
kv() { sed -n "s/^$2=//p" "$1" | tail -n 1; }

# Waits for a started process and forgets it; returns its status.
reap() {
        local pid=$1 rc=0 keep=() p
        wait "$pid" || rc=$?
        for p in "${pids[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
        pids=("${keep[@]}")
        return $rc
}

# Per-run figures: "workload contender rep key value" lines.
# A figure the workload did not report (no evicted page: no latency) is left
# out, and shows as "-".
rec() { [ -n "$2" ] || return 0; echo "$cur_workload $cur_contender $cur_rep $1 $2" >> "$results"; }

# ---- contenders ----------------------------------------------------------------
# Each has an available check (sets why_not), setup, held (bytes the
# compressing side holds now), and teardown. Setups refuse to run over
# somebody else's swap.

declare -A why_not=()
zswap_alg=
zram_alg=
# The compressors kernel zswap is given, first accepted wins ("auto").
zswap_candidates="lz4 zstd lzo-rle lzo deflate"
# Of the contender named plain "zswapd" (bench/apps).
zswapd_compressor=lz4
# zswapd's LogLevel= where the caller names none (bench/apps --zswapd-log-level).
zswapd_log_level=info

zswap_param() { cat "/sys/module/zswap/parameters/$1"; }

zswap_pick_compressor() {
        # shellcheck disable=SC2206   # a list of words
        local c cands=($zswap_candidates)
        [ "$arg_zswap_compressor" != auto ] && cands=("$arg_zswap_compressor")
        for c in "${cands[@]}"; do
                # zswap compresses through the crypto API: a compressor without
                # a crypto driver is not usable, even if the parameter takes it.
                grep -qE "^(name|driver) *: $c(-scomp|-generic)?\$" /proc/crypto || continue
                if echo "$c" > /sys/module/zswap/parameters/compressor 2>/dev/null &&
                   [ "$(zswap_param compressor)" = "$c" ]; then
                        zswap_alg=$c
                        return 0
                fi
        done
        return 1
}

check_available() {
        local c
        for c in $contenders; do
                case $c in
                zswap)
                        if [ ! -d /sys/module/zswap/parameters ]; then
                                why_not[zswap]="kernel without zswap"
                        elif ! zswap_pick_compressor; then
                                why_not[zswap]="the kernel accepts none of the compressors tried"
                        elif [ ! -f /sys/kernel/debug/zswap/pool_total_size ]; then
                                why_not[zswap]="no /sys/kernel/debug/zswap (debugfs)"
                        fi ;;
                zram)
                        if [ ! -e /sys/block/zram0 ]; then
                                why_not[zram]="no /dev/zram0 (modprobe zram)"
                        elif [ "$(cat /sys/block/zram0/disksize)" != 0 ]; then
                                why_not[zram]="/dev/zram0 is in use"
                        elif grep -qw lz4 /sys/block/zram0/comp_algorithm; then
                                zram_alg=lz4
                        else
                                zram_alg=$(sed 's/.*\[\(.*\)\].*/\1/' /sys/block/zram0/comp_algorithm)
                        fi ;;
                zswapd|zswapd-*)
                        [ -x "$zswapd" ] && [ -x "$zswapctl" ] ||
                                why_not[$c]="not available: $zswapd and $zswapctl are not built yet" ;;
                esac
        done
}

# Records the zswap parameters and zram's compressor before anything
# changes them (cleanup() puts them back), and mounts debugfs for zswap's
# pool figures if it is not there.
save_kernel_settings() {
        local p
        if [[ " $contenders " == *" zswap "* ]]; then
                for p in "${zswap_params[@]}"; do
                        [ -f "/sys/module/zswap/parameters/$p" ] && zswap_saved[$p]=$(zswap_param "$p")
                done
                if [ ! -d /sys/kernel/debug/zswap ] && ! mountpoint -q /sys/kernel/debug; then
                        mount -t debugfs debugfs /sys/kernel/debug && debugfs_mounted=1
                fi
        fi
        if [[ " $contenders " == *" zram "* ]] && [ -e /sys/block/zram0 ]; then
                zram_orig_alg=$(sed 's/.*\[\(.*\)\].*/\1/' /sys/block/zram0/comp_algorithm)
        fi
}

# The swapfile of kernel zswap and of the plain swapfile, $swap_mib MiB
# (also zram's disksize), when a contender needs it; cleanup() removes it.
make_swapfile() {
        if [[ " $contenders " =~ " "(zswap|swapfile)" " ]]; then
                [ -e "$arg_swapfile" ] && die "$arg_swapfile exists already; remove it or pass --swapfile"
                swapfile_made=1
                fallocate -l "${swap_mib}M" "$arg_swapfile"
                chmod 600 "$arg_swapfile"
                mkswap "$arg_swapfile" >/dev/null
        fi
}

ensure_no_foreign_swap() {
        [ "$(swaps_in_use)" = 0 ] || die "swap appeared meanwhile (someone else's): stopping"
}

setup() {
        case $1 in
        floor|none) ;;
        swapfile)
                ensure_no_foreign_swap
                swapon "$arg_swapfile"; swaps_on+=("$arg_swapfile") ;;
        zswap)
                ensure_no_foreign_swap
                echo "$zswap_alg" > /sys/module/zswap/parameters/compressor
                echo Y > /sys/module/zswap/parameters/enabled
                # Enabling falls back to the default compressor if ours fails.
                [ "$(zswap_param compressor)" = "$zswap_alg" ] ||
                        die "zswap runs $(zswap_param compressor), not $zswap_alg"
                swapon "$arg_swapfile"; swaps_on+=("$arg_swapfile") ;;
        zram)
                ensure_no_foreign_swap
                zram_touched=1
                echo 1 > /sys/block/zram0/reset
                echo "$zram_alg" > /sys/block/zram0/comp_algorithm
                echo "$(( swap_mib ))M" > /sys/block/zram0/disksize
                mkswap /dev/zram0 >/dev/null
                swapon /dev/zram0; swaps_on+=(/dev/zram0) ;;
        zswapd) zswapd_start "$zswapd_compressor" ;;
        zswapd-*) zswapd_start "${1#zswapd-}" ;;
        esac
}

teardown() {
        case $1 in
        swapfile) swapoff "$arg_swapfile" ;;
        zswap)
                swapoff "$arg_swapfile"
                echo N > /sys/module/zswap/parameters/enabled ;;
        zram)
                swapoff /dev/zram0
                echo 1 > /sys/block/zram0/reset ;;
        zswapd|zswapd-*) zswapd_stop ;;
        esac
}

# Bytes the compressing side holds; the second word is what it stores
# uncompressed, where the kernel says so.
held() {
        case $1 in
        zswap) echo "$(cat /sys/kernel/debug/zswap/pool_total_size) $(( $(cat /sys/kernel/debug/zswap/stored_pages) * 4096 ))" ;;
        zram) awk '{ print $3, $1 }' /sys/block/zram0/mm_stat ;;
        # The daemon's proportional set size: its own memory, pool and
        # bookkeeping, with its share of the libraries every process maps
        # anyway (its VmRSS counts them whole: 2 to 3 MiB more).
        zswapd|zswapd-*) echo "$(pss_bytes "$daemon_pid") 0" ;;
        *) echo "0 0" ;;
        esac
}

# ---- the zswapd hook -------------------------------------------------------------
# What it expects of the daemon and CLI (docs/benchmarks.md, "zswapd"):
#   zswapd -c DIR -s SOCKET           runs in the foreground until SIGTERM;
#                                     DIR/zswapd.conf sets [Store] Compressor=ALG
#                                     (none: zswapd's defaults),
#                                     DIR/policy.d/*.conf the budgets of the
#                                     callers (MemoryBudget=, zswapctl reload)
#   zswapctl stats                    succeeds once the daemon serves requests
#   zswapctl targets                  lists the attached pids and their policy
#   zswapctl attach PID
#   zswapctl reclaim PID --bytes N    returns when the eviction is done
#   zswapctl stats PID --json         one JSON object, "pool_bytes" used if present
# Reclaim CPU is the daemon's utime+stime over the reclaim plus zswapctl's.

daemon_pid=

# zswapd_start COMPRESSOR [POLICY [LOGLEVEL]]: COMPRESSOR "" leaves
# [Store] Compressor= unset, as a user's configuration does (policies
# without a budget then take their own); POLICY, when given, is the
# text of a policy file there from the start (a policy's settings that
# only a start applies, such as the age scans' interval, take effect).
zswapd_start() {
        # A config directory of our own (the caller's budget policies go
        # into its policy.d) and a socket of our own, so that a
        # daemon running on the machine is neither used nor disturbed.
        rm -rf "$tmp/zswapd.d"
        mkdir -p "$tmp/zswapd.d/policy.d"
        printf '[Daemon]\nLogLevel=%s\n[Store]\n%s\n' "${3:-$zswapd_log_level}" "${1:+Compressor=$1}" > "$tmp/zswapd.d/zswapd.conf"
        [ -z "${2:-}" ] || printf '%s\n' "$2" > "$tmp/zswapd.d/policy.d/$bench_name.conf"
        export ZSWAPD_SOCKET=$tmp/zswapd.sock
        # The daemon starts unpinned, so that its fault threads stay
        # unpinned: the scheduler places them (fault.c says why).
        # Once it answers (every thread started), all its other threads
        # (main loop, reclaim worker, compression helpers) are pinned to
        # the reclaim CPU, like the kernel's reclaiming process. (Pinned
        # at once instead, every thread it makes would inherit the pin: one
        # CPU, one fault thread, across CPUs from the workload.)
        "$zswapd" -c "$tmp/zswapd.d" >"$tmp/zswapd.log" 2>&1 &
        daemon_pid=$!
        pids+=("$daemon_pid")
        for _ in $(seq 1 100); do
                if "$zswapctl" stats >/dev/null 2>&1; then
                        zswapd_pin_reclaim "$daemon_pid"
                        return 0
                fi
                kill -0 "$daemon_pid" 2>/dev/null || die "zswapd exited: $(tail -n 5 "$tmp/zswapd.log")"
                sleep 0.1
        done
        die "zswapd did not answer zswapctl stats within 10 s"
}

# Pins every thread of the daemon but its fault threads to the reclaim CPU
# (or to arg_zswapd_cpu, where a benchmark sets one).
zswapd_pin_reclaim() {
        local task cpu=${arg_zswapd_cpu:-$arg_reclaim_cpu}
        for task in /proc/"$1"/task/*; do
                [ "$(cat "$task/comm" 2>/dev/null)" = zswapd-fault ] && continue
                taskset -p -c "$cpu" "${task##*/}" >/dev/null 2>&1 || true
        done
}

zswapd_stop() {
        kill -TERM "$daemon_pid" 2>/dev/null || true
        reap "$daemon_pid" || true
        daemon_pid=
}

# The userfaultfd round trip alone (a bare handler process answering with a ready
# page, bench/uffd-floor.c), from the workload's CPU: the floor under any
# userfaultfd service's fault latency, measured in the same run as the
# kernel's swap-in it is compared with. Recorded as contender uffd-floor.
run_uffd_floor() {
        local out=$tmp/uffd-floor.out k
        taskset -c "$arg_workload_cpu" "$workload" uffd-floor > "$out" 2> "$out.err" ||
                { log "uffd-floor failed: $(cat "$out.err")"; return 0; }
        for k in floor_p50_us floor_p99_us floor_same_cpu_p50_us floor_same_cpu_p99_us; do
                rec "$k" "$(kv "$out" "$k")"
        done
}

# ---- figures ---------------------------------------------------------------------

# "median min max n" of one figure over the repetitions.
stat_of() {
        awk -v w="$1" -v c="$2" -v k="$3" '$1 == w && $2 == c && $4 == k { print $5 }' "$results" |
                sort -g |
                awk '{ v[NR] = $1 }
                     END { if (NR == 0) { print "- - - 0"; exit }
                           m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                           print m, v[1], v[NR], NR }'
}

# A table cell: the median, and the spread as +-half the range in percent
# of the median when there is more than one run.
cell() {
        local m lo hi n
        read -r m lo hi n < <(stat_of "$1" "$2" "$3")
        [ "$n" = 0 ] && { echo "-"; return; }
        if [ "$n" -gt 1 ] && awk "BEGIN { exit !($m != 0) }"; then
                printf '%s±%s%%' "$(calc "$m" "$4")" "$(calc "($hi - $lo) / 2 / ($m < 0 ? -($m) : $m) * 100" 0)"
        else
                calc "$m" "$4"
        fi
}

json_str() { local s=${1//\\/\\\\}; printf '"%s"' "${s//\"/\\\"}"; }
