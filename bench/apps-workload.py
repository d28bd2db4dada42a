#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The data and the second application of bench/apps.

  values --records N [--seed S]
      N redis SET commands in RESP on stdout, for redis-cli --pipe: keys
      key:%012d (those redis-benchmark -r N asks for), values of 1000 B.
  dict --records N --ops M --warmup W [--seed S] [--zipf A] [--batch B]
      A process holding N records in a dict and walking it; see walk_main.
  zswapd-delta BEFORE.json AFTER.json PID
      "name value" lines: what `zswapctl stats PID --json` counted between
      two snapshots (see zswapd_delta).

Every value is made of slices of three pools: text (words of a made-up
vocabulary with a skewed frequency, numbers, punctuation), structured
binary (packed records of counters, timestamps and floats) and random
bytes, so that a page compresses about as well as an application's heap
does, neither as well as a page of one repeated byte nor as badly as noise.
The same seed gives the same values everywhere.
"""

import argparse
import gc
import itertools
import json
import random
import signal
import struct
import sys
import time
import zlib
from array import array
from bisect import bisect_right

TEXT = 600      # bytes of text in a value
STRUCT = 336    # bytes of structured binary
NOISE = 64      # bytes of random bytes: TEXT + STRUCT + NOISE = 1000
POOL = 4 << 20  # bytes of each pool the slices are cut from


def make_pools(seed):
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9)))
             for _ in range(600)]
    weights = [1.0 / (i + 1) ** 1.1 for i in range(len(vocab))]
    states = ["active", "pending", "closed", "archived"]
    parts, size = [], 0
    while size < POOL:
        if rng.random() < 0.5:
            # a JSON document, as a cache or a session store holds them
            w = rng.choices(vocab, weights, k=6)
            part = ('{"id":%d,"user":"%s %s","status":"%s","tags":["%s","%s"],'
                    '"score":%.2f,"updated":%d,"note":"%s %s"}\n'
                    % (rng.randrange(10**7), w[0], w[1], rng.choice(states), w[2], w[3],
                       rng.random() * 100, 1_700_000_000 + rng.randrange(10**6), w[4], w[5]))
        else:
            # prose
            part = " ".join(rng.choices(vocab, weights, k=rng.randint(8, 30))) + ".\n"
        parts.append(part)
        size += len(part)
    text = "".join(parts).encode()[:POOL]

    recs = []
    ts = 1_700_000_000_000
    rec = struct.Struct("<IIqfHHI")
    for i in range(POOL // rec.size + 1):
        ts += rng.randrange(1000)
        recs.append(rec.pack(i, rng.randrange(16), ts,
                                rng.randrange(100) / 4.0, rng.randrange(300),
                                0, rng.randrange(16)))
    structured = b"".join(recs)[:POOL]
    noise = rng.randbytes(POOL)
    assert len(text) == len(structured) == len(noise) == POOL
    return rng, text, structured, noise


def records(n, seed):
    """Yields (text, binary) of record 0, 1, ... n - 1."""
    rng, text, structured, noise = make_pools(seed)
    rand = rng.randrange
    for _ in range(n):
        a = rand(POOL - TEXT)
        b = rand(POOL - STRUCT)
        c = rand(POOL - NOISE)
        yield text[a:a + TEXT], structured[b:b + STRUCT] + noise[c:c + NOISE]


def values_main(args):
    out = sys.stdout.buffer
    head = b"*3\r\n$3\r\nSET\r\n$16\r\n"
    mid = b"\r\n$%d\r\n" % (TEXT + STRUCT + NOISE)
    buf = []
    for i, (t, b) in enumerate(records(args.records, args.seed)):
        buf.append(b"%skey:%012d%s%s%s\r\n" % (head, i, mid, t, b))
        if len(buf) == 2048:
            out.write(b"".join(buf))
            buf.clear()
    out.write(b"".join(buf))
    out.flush()


def say(line):
    print(line, flush=True)


def wait_go():
    signal.sigwait({signal.SIGUSR1})


def percentile(sorted_values, q):
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def walk(d, keys, ops, start, end, batch):
    """Reads records ops[start:end] of d; returns (checksum, ns, per-op ns
    of each batch). A batch is timed as a whole: two clock reads per op
    would cost as much as a resident op itself."""
    crc32 = zlib.crc32
    now = time.perf_counter_ns
    lat = array("d")
    s = 0
    t_begin = now()
    for i in range(start, end, batch):
        j = min(i + batch, end)
        t0 = now()
        for k in ops[i:j]:
            r = d[keys[k]]
            s += crc32(r[1], crc32(r[0]))
        lat.append((now() - t0) / (j - i))
    return s & 0xFFFFFFFFFFFFFFFF, now() - t_begin, lat


def walk_main(args):
    """Builds the dict, then steps through: prints "ready", waits for
    SIGUSR1, walks the warm-up ops, prints "warmed", waits, walks the
    measured ops and prints their figures and "walked", waits, reads every
    record back against its checksum, prints "verified" and exits."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    n = args.records
    crc32 = zlib.crc32
    d = {}
    keys = []
    crcs = array("I")
    for i, (t, b) in enumerate(records(n, args.seed)):
        k = "rec:%08d" % i
        d[k] = (t, b, i)
        keys.append(k)
        crcs.append(crc32(b, crc32(t)))

    # Zipf(A) over ranks; rank r is record perm[r], so the popular records
    # lie all over the heap rather than in the first pages filled.
    rng = random.Random(args.seed + 1)
    perm = list(range(n))
    rng.shuffle(perm)
    cdf = array("d", itertools.accumulate(1.0 / (r + 1) ** args.zipf for r in range(n)))
    total = cdf[-1]
    rand = rng.random
    ops = array("I", (perm[bisect_right(cdf, rand() * total)] for _ in range(args.warmup + args.ops)))
    del perm, cdf
    expected = sum(crcs[k] for k in ops[args.warmup:]) & 0xFFFFFFFFFFFFFFFF
    # Nothing here makes cycles: a collection would only walk every
    # record, touching pages the workload does not.
    gc.collect()
    gc.freeze()
    gc.disable()
    say("ready records=%d ops=%d warmup=%d" % (n, args.ops, args.warmup))

    wait_go()
    walk(d, keys, ops, 0, args.warmup, args.batch)
    say("warmed")

    wait_go()
    s, ns, lat = walk(d, keys, ops, args.warmup, args.warmup + args.ops, args.batch)
    lat = sorted(lat)
    say("ops_s=%.1f" % (args.ops / (ns / 1e9)))
    say("p50_us=%.3f" % (percentile(lat, 0.50) / 1000))
    say("p99_us=%.3f" % (percentile(lat, 0.99) / 1000))
    say("walk_s=%.3f" % (ns / 1e9))
    say("checksum=%d" % s)
    say("expected=%d" % expected)
    say("checksum_ok=%d" % (s == expected))
    say("walked")

    wait_go()
    bad = sum(1 for i in range(n) if crc32(d[keys[i]][1], crc32(d[keys[i]][0])) != crcs[i]
              or d[keys[i]][2] != i)
    say("records=%d" % len(d))
    say("mismatched_records=%d" % bad)
    say("verified")


def flatten(obj, prefix=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from flatten(v, prefix + k + ".")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield prefix[:-1], obj


def target_of(path, pid):
    with open(path) as f:
        stats = json.load(f)
    for t in stats.get("targets", []):
        if t.get("pid") == pid:
            return dict(flatten(t))
    return {}


def zswapd_delta(args):
    """What zswapd counted for PID between two snapshots: its faults,
    refaults, evictions and prefetches, and every field whose name holds
    "stop" (the target's stopped time, however the daemon names it), and
    its faults held under the budget:
    counters as differences, maxima, percentiles, percentages and ratios as
    they stand at the end. A stopped time in ns is also given as a share of WALL_S."""
    a, b = target_of(args.before, args.pid), target_of(args.after, args.pid)
    if not b:
        return
    counters = ["faults", "refaults", "zero_faults", "evicted_pages",
                "prefetched_pages", "prefetch_hits", "throttled_faults"]
    for k in counters:
        if k in b:
            print("zswapd_%s %d" % (k, b[k] - a.get(k, 0)))
    # Faults parked for want of room under the budget (the first-touch
    # hold): how many, and their threads' total wait.
    for k in ("hold.held_faults", "hold.timeouts"):
        if k in b:
            print("zswapd_%s %d" % (k.replace(".", "_"), b[k] - a.get(k, 0)))
    if "hold.held_ns" in b:
        print("zswapd_hold_held_ms %.1f" % ((b["hold.held_ns"] - a.get("hold.held_ns", 0)) / 1e6))
    for q in ("p50", "p99"):
        if "fault_ns_" + q in b:
            print("zswapd_fault_%s_us %.1f" % (q, b["fault_ns_" + q] / 1000))
    for k, v in b.items():
        if "stop" not in k:
            continue
        name = "zswapd_" + k.replace(".", "_")
        if any(w in k for w in ("max", "percent", "ratio", "attached", "p50", "p99")):
            print("%s %s" % (name, v))
        else:
            print("%s %s" % (name, v - a.get(k, 0)))
            if k.endswith("stopped_ns") and args.wall_s > 0:
                print("zswapd_stopped_share_pct %.3f" % ((v - a.get(k, 0)) / (args.wall_s * 1e9) * 100))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("values")
    v.add_argument("--records", type=int, required=True)
    v.add_argument("--seed", type=int, default=1)
    w = sub.add_parser("dict")
    w.add_argument("--records", type=int, required=True)
    w.add_argument("--ops", type=int, required=True)
    w.add_argument("--warmup", type=int, default=0)
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--zipf", type=float, default=0.99)
    w.add_argument("--batch", type=int, default=32)
    z = sub.add_parser("zswapd-delta")
    z.add_argument("before")
    z.add_argument("after")
    z.add_argument("pid", type=int)
    z.add_argument("--wall-s", type=float, default=0.0)
    args = ap.parse_args()
    if args.cmd == "values":
        values_main(args)
    elif args.cmd == "dict":
        walk_main(args)
    else:
        zswapd_delta(args)


if __name__ == "__main__":
    main()
