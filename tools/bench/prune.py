"""``python -m tools.bench prune [--entries N] [--rounds R] [--hash] [--out DIR]``

Pruning a 2M-entry flow table with half of it expired, four ways, on the same map, interleaved:

- bpfbatch's kernel path: the map exec program, loaded once (a ``prune --every`` round), and
  as a one-shot ``exec`` that includes opening and verifying the program; the default selects
  in the program and deletes each key with ``BPF_MAP_LOOKUP_AND_DELETE_ELEM`` + re-check,
  ``kernel-fast`` deletes in the program;
- bpfbatch's user-space emulation (batch lookup, numpy predicate, lookup-and-delete with
  re-check);
- C, ``bpf_map_lookup_batch`` of the whole map then ``bpf_map_delete_elem`` per expired key —
  Cilium's conntrack GC since cilium/cilium#36288 (``c/prune_floor.c batch``);
- C, ``get_next_key`` + ``lookup_elem`` per element and ``delete_elem`` per expired one —
  the per-key loop of bpftool, bcc and Katran (``c/prune_floor.c perkey``);
- the same per-key loop in Python, as bcc's Python tools run it (``Map.next_key`` /
  ``lookup`` / ``delete``).

The table is the flow table of ``progs/flowtable.bpf.c`` (an LRU hash, sized 1.25 × N so the
fill evicts nothing), or with ``--hash`` a plain hash of the same layout. Before every run it is
refilled untimed: N flows, the even ones last seen at boot, the odd ones now; after every run
the remaining count is checked (N/2). The C peers get the cutoff as a constant; bpfbatch uses
``last_seen_ns < now - 30s``. Prints medians and ratios (case / kernel path), writes JSON.

Then the adversarial part (``--adversary-seconds``, 0 skips it): per mode, prune rounds on a
table of ``--adversary-filler`` expired flows (put back before each round) plus 64 keys that
``tools/bench/refresher.py`` expires and refreshes in a tight loop in its own process; prints
live deletions (refreshed entries that stayed deleted) per million deletions, next to the
median round time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.exec import walker
from bpfbatch.labs import demo
from bpfbatch.loader import BpfObject
from bpfbatch.map import cursor, writes
from bpfbatch.map.handle import Map
from bpfbatch.records.codec import map_codecs
from tools.bench.harness import Command, InProcess, build_c, interleave, report, summarize

WHERE = "last_seen_ns < now - 30s"
KERNEL = "bpfbatch kernel path (prune round)"
KERNEL_FAST = "bpfbatch kernel-fast (prune round, deletes in the program)"
#: Keys the adversarial refresher expires and refreshes.
ADVERSARY_KEYS = 64
PY_PER_KEY = "Python get_next_key + lookup + delete per key"


def python_per_key(m, offset: int, cutoff: int) -> None:
    """The per-key loop in Python: successor first, then lookup, delete when expired."""
    key = m.next_key(None)
    while key is not None:
        successor = m.next_key(key)
        value = m.lookup(key)
        if value is not None and int.from_bytes(value[offset:offset + 8], "little") < cutoff:
            m.delete(key)
        key = successor


class Table:
    """The map under test, its refill and its check."""

    def __init__(self, entries: int, plain_hash: bool):
        self.entries = entries
        self.obj = None
        if plain_hash:
            self.map = demo.create_flow_table(entries, name="bb_bench_prune")
        else:
            self.obj = BpfObject.package("flowtable")
            self.obj.configure_map("flows", max_entries=entries * 5 // 4)
            self.obj.load()
            self.map = self.obj.map("flows")
        key_codec, value_codec = map_codecs(self.map.info)
        rng = np.random.default_rng(1)
        self.keys = np.zeros(entries, key_codec.dtype)
        self.keys["saddr"] = np.arange(entries, dtype=np.uint32)
        self.keys["daddr"] = rng.integers(0, 2**32, entries, dtype=np.uint32)
        self.keys["sport"] = rng.integers(1024, 65535, entries, dtype=np.uint16)
        self.keys["dport"] = 443
        self.keys["proto"] = 6
        self.values = np.zeros(entries, value_codec.dtype)
        self.values["packets"] = rng.integers(1, 1000, entries)
        self.values["bytes"] = self.values["packets"] * 800
        self.offset = value_codec.dtype.fields["last_seen_ns"][1]
        self.filled = False

    def refill(self) -> None:
        """Check what the previous run left (half), then put every flow back."""
        if self.filled:
            left = sum(b.count for b in cursor.BatchCursor(self.map))
            if left != self.entries - self.entries // 2:
                raise SystemExit(f"a prune left {left} flows, expected {self.entries // 2}")
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        self.values["first_seen_ns"] = 1
        self.values["last_seen_ns"] = np.where(np.arange(self.entries) % 2, now, 1)
        writes.update(self.map, self.keys, self.values, self.entries)
        held = sum(b.count for b in cursor.BatchCursor(self.map))
        if held != self.entries:
            raise SystemExit(f"the table holds {held} flows after the fill, not {self.entries}")
        self.filled = True

    def close(self) -> None:
        if self.obj:
            self.obj.close()
        else:
            self.map.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench prune", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hash", action="store_true", help="a plain hash instead of the LRU")
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    parser.add_argument("--adversary-seconds", type=float, default=5.0)
    parser.add_argument("--adversary-filler", type=int, default=100_000)
    args = parser.parse_args(argv)
    cutoff = time.clock_gettime_ns(time.CLOCK_MONOTONIC)  # between boot and every refill
    table = Table(args.entries, args.hash)
    m = table.map
    try:
        with tempfile.TemporaryDirectory() as tmp, \
                walker.KernelWalker(m) as kernel:
            peer = build_c("prune_floor.c", Path(tmp))
            predicate = walker.compile_for(m, WHERE)
            ident = [str(m.info.id), str(table.offset), str(cutoff)]
            cases = {
                KERNEL: InProcess(lambda: kernel.run(predicate, "delete"), table.refill),
                KERNEL_FAST: InProcess(lambda: kernel.run(predicate, "delete", fast=True),
                                       table.refill),
                "bpfbatch kernel path (exec, program load included)": InProcess(
                    lambda: walker.exec_map(m, predicate, "delete", mode="kernel"),
                    table.refill),
                "bpfbatch user-space emulation": InProcess(
                    lambda: walker.user_exec(m, predicate, "delete"), table.refill),
                "C lookup_batch + delete per key (Cilium GC)": Command(
                    [peer, "batch", *ident, str(cursor.DEFAULT_BATCH)], setup=table.refill),
                "C get_next_key + lookup + delete per key": Command(
                    [peer, "perkey", *ident], setup=table.refill),
                PY_PER_KEY: InProcess(lambda: python_per_key(m, table.offset, cutoff),
                                      table.refill),
            }
            samples = interleave(cases, rounds=args.rounds, warmup=0)
            table.refill()  # checks the last run
        kind = "hash" if args.hash else "LRU hash (progs/flowtable.bpf.c)"
        rows = summarize(samples, KERNEL)
        report(f"prune {args.entries:,}-entry flow table, 50 % expired, {kind}", rows, KERNEL,
               out_dir=args.out, params={"entries": args.entries, "rounds": args.rounds,
                                         "map": kind, "where": WHERE})
        wall = {r["case"]: r["wall_s"] for r in rows}
        emulation = wall["bpfbatch user-space emulation"]
        print(f"kernel path: {wall[KERNEL]:.3f} s per prune (target ≤ 0.5 s). Emulation ÷ "
              f"per-key loops: {wall[PY_PER_KEY] / emulation:.1f}× faster than Python's, "
              f"{wall['C get_next_key + lookup + delete per key'] / emulation:.1f}× than C's "
              f"(target ≥ 5×)")
    finally:
        table.close()
    if args.adversary_seconds > 0:
        adversary_table(args.adversary_seconds, args.adversary_filler)
    return 0


def adversary_table(seconds: float, filler: int) -> None:
    """Live deletions per million deletions, per mode, under the expire-then-refresh writer."""
    print(f"\nprune under an expire-then-refresh writer ({ADVERSARY_KEYS} keys, "
          f"{filler:,} expired flows per round, {seconds:g} s per mode)")
    print(f"{'mode':<12} {'rounds':>7} {'median round':>13} {'deletions':>10} {'live':>6} "
          f"{'live per 1M deletions':>22}")
    for mode in ("kernel", "kernel-fast", "user"):
        rounds, median, deleted, live = _adversary_run(mode, seconds, filler)
        print(f"{mode:<12} {rounds:>7} {median * 1e3:>10.1f} ms {deleted:>10,} {live:>6} "
              f"{live / max(deleted, 1) * 1e6:>22,.0f}")


def _adversary_run(mode: str, seconds: float, filler: int) -> tuple[int, float, int, int]:
    with BtfBuilder() as b:
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        value = b.struct("flow", [("packets", u64), ("last_seen_ns", u64)])
        m = Map.create(MapType.HASH, 4, 16, ADVERSARY_KEYS + filler, name="bb_bench_adv",
                       btf_fd=b.load(), btf_key_type_id=u32, btf_value_type_id=value)
    with m:
        fresh = np.zeros((ADVERSARY_KEYS, 2), np.uint64)
        fresh[:, 1] = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        writes.update(m, np.arange(ADVERSARY_KEYS, dtype=np.uint32), fresh, ADVERSARY_KEYS)
        filler_keys = np.arange(ADVERSARY_KEYS, ADVERSARY_KEYS + filler, dtype=np.uint32)
        expired = np.ones((filler, 2), np.uint64)
        predicate = walker.compile_for(m, "last_seen_ns < now - 1s")
        kernel = walker.open_walker(m, mode, records=False)
        refresher = subprocess.Popen([sys.executable, "-m", "tools.bench.refresher",
                                      str(m.info.id), str(ADVERSARY_KEYS)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        times, deleted = [], 0
        try:
            assert refresher.stdout.readline() == "ready\n"
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                writes.update(m, filler_keys, expired, filler)
                start = time.perf_counter()
                if kernel is None:
                    result = walker.user_exec(m, predicate, "delete")
                else:
                    result = kernel.run(predicate, "delete", fast=mode == "kernel-fast")
                times.append(time.perf_counter() - start)
                deleted += result.deleted
        finally:
            refresher.stdin.close()
            counts = json.loads(refresher.stdout.readline())
            refresher.wait(30)
            if kernel is not None:
                kernel.close()
    return len(times), float(np.median(times)), deleted, counts["live"]
