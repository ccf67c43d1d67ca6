"""``python -m tools.bench prune [--entries N] [--rounds R] [--hash] [--out DIR]``

Pruning a 2M-entry flow table with half of it expired, on the same map, interleaved:

- ``bpfbatch prune`` as a whole process (start-up, program load and verification, the round),
  in its default mode (``kernel``);
- bpfbatch's kernel path, the program loaded once (a ``prune --every`` round): ``kernel``
  (the program selects; each key taken with lookup-and-delete, judged again, put back when
  refreshed) and ``kernel-fast`` (judge, delete, compare with the copy, put back what was
  written in place meanwhile, all in the program);
- bpfbatch's user-space emulation (batch lookup, numpy predicate, lookup-and-delete with
  re-check);
- C, ``bpf_map_lookup_batch`` of the whole map then ``bpf_map_delete_elem`` per expired key —
  Cilium's conntrack GC since cilium/cilium#36288 (``c/prune_floor.c batch``), the peer;
- C, ``get_next_key`` + ``lookup_elem`` per element and ``delete_elem`` per expired one —
  the per-key loop of bpftool, bcc and Katran (``c/prune_floor.c perkey``).

The table is the flow table of ``progs/flowtable.bpf.c`` (an LRU hash, sized 1.25 × N so the
fill evicts nothing), or with ``--hash`` a plain hash of the same layout. Before every run it is
refilled untimed: N flows, the even ones last seen at boot, the odd ones now; after every run
the remaining count is checked (N/2). The C peers get the cutoff as a constant; bpfbatch uses
``last_seen_ns < now - 10m`` (long enough that no fresh flow expires during a slow case).
Prints medians and ratios (case / the whole-process prune).

Then ``--every`` rounds, per kernel mode: the same table with 10 % of the flows expiring
before each round (set untimed), one program for all rounds: rounds per second.

Then the race table (``--adversary-seconds``, 0 skips it): per map type (hash, LRU hash and
their per-CPU variants), mode and kind of writer, prune rounds on a table of
``--adversary-filler`` expired flows (put back before each round) plus 64 keys that
``tools/bench/refresher.py`` expires and refreshes in a tight loop in its own process; prints
live deletions (refreshed entries that stayed deleted) per million deletions.
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

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.exec import walker
from bpfbatch.labs import demo
from bpfbatch.loader import BpfObject
from bpfbatch.map import cursor, writes
from bpfbatch.records.codec import map_codecs
from tools.bench.harness import (BPFBATCH, Command, InProcess, build_c, interleave, report,
                                 summarize)

WHERE = "last_seen_ns < now - 10m"
WHOLE = "bpfbatch prune (whole process, kernel mode)"
KERNEL = "bpfbatch kernel mode (round, program loaded)"
KERNEL_FAST = "bpfbatch kernel-fast (round, compare in the program)"
CILIUM = "C lookup_batch + delete per key (Cilium GC)"
#: Keys the adversarial refresher expires and refreshes.
ADVERSARY_KEYS = 64


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
    parser.add_argument("--every-rounds", type=int, default=10)
    parser.add_argument("--hash", action="store_true", help="a plain hash instead of the LRU")
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    parser.add_argument("--adversary-seconds", type=float, default=3.0)
    parser.add_argument("--adversary-filler", type=int, default=100_000)
    parser.add_argument("--adversary-gap", type=int, default=200,
                        help="bpf_loop turns between the in-place writer's two writes")
    args = parser.parse_args(argv)
    cutoff = time.clock_gettime_ns(time.CLOCK_MONOTONIC)  # between boot and every refill
    table = Table(args.entries, args.hash)
    m = table.map
    try:
        predicate = walker.compile_for(m, WHERE)
        with tempfile.TemporaryDirectory() as tmp, \
                walker.open_walker(m, "kernel", records=False, predicate=predicate) as kernel, \
                walker.open_walker(m, "kernel-fast", records=False,
                                   predicate=predicate) as kernel_fast:
            peer = build_c("prune_floor.c", Path(tmp))
            ident = [str(m.info.id), str(table.offset), str(cutoff)]
            cases = {
                WHOLE: Command([*BPFBATCH, "prune", "--map-id", str(m.info.id), "--field",
                                "last_seen_ns", "--older-than", "10m"], setup=table.refill),
                KERNEL: InProcess(lambda: kernel.run(predicate, "delete"), table.refill),
                KERNEL_FAST: InProcess(lambda: kernel_fast.run(predicate, "delete", fast=True),
                                       table.refill),
                "bpfbatch user-space emulation (round)": InProcess(
                    lambda: walker.user_exec(m, predicate, "delete"), table.refill),
                CILIUM: Command([peer, "batch", *ident, str(cursor.DEFAULT_BATCH)],
                                setup=table.refill),
                "C get_next_key + lookup + delete per key": Command(
                    [peer, "perkey", *ident], setup=table.refill),
            }
            samples = interleave(cases, rounds=args.rounds, warmup=0)
            table.refill()  # checks the last run
            table.filled = False  # every_rounds leaves 90 %, not half
            every = {fast: every_rounds(table, w, predicate, args.every_rounds, fast)
                     for fast, w in ((False, kernel), (True, kernel_fast))}
        kind = "hash" if args.hash else "LRU hash (progs/flowtable.bpf.c)"
        rows = summarize(samples, WHOLE)
        report(f"prune {args.entries:,}-entry flow table, 50 % expired, {kind}", rows, WHOLE,
               out_dir=args.out, params={"entries": args.entries, "rounds": args.rounds,
                                         "map": kind, "where": WHERE})
        wall = {r["case"]: r["wall_s"] for r in rows}
        print(f"bpfbatch prune, whole process: {wall[WHOLE]:.3f} s (target ≤ 1.0 s); kernel "
              f"part {wall[KERNEL]:.3f} s (target ≤ 0.6 s); the Cilium-style C GC is "
              f"{wall[CILIUM] / wall[WHOLE]:.2f}× its time (target ≥ 2×)")
        for fast, seconds in every.items():
            print(f"--every, {'kernel-fast' if fast else 'kernel'}: {1 / seconds:.1f} rounds/s "
                  f"with 10 % of {args.entries:,} flows expiring per round (median round "
                  f"{seconds * 1e3:.0f} ms; target ≥ 2 rounds/s)")
    finally:
        table.close()
    if args.adversary_seconds > 0:
        for filler in (args.adversary_filler, 0):
            adversary_table(args.adversary_seconds, filler, args.adversary_gap)
    return 0


def every_rounds(table: Table, kernel: walker.KernelWalker, predicate, rounds: int,
                 fast: bool) -> float:
    """Median seconds of a ``prune --every`` round (one loaded program; ``kernel-fast`` when
    ``fast``) deleting the 10 % of the table that expired since the last round."""
    times = []
    for r in range(rounds):
        table.values["last_seen_ns"] = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        table.values["last_seen_ns"][r % 10::10] = 1
        writes.update(table.map, table.keys, table.values, table.entries)
        start = time.perf_counter()
        result = kernel.run(predicate, "delete", fast=fast)
        times.append(time.perf_counter() - start)
        if result.deleted != len(table.keys[r % 10::10]):
            raise SystemExit(f"an --every round deleted {result.deleted}, expected "
                             f"{len(table.keys[r % 10::10])}")
    return float(np.median(times))


#: The map types of the race table.
RACE_TYPES = (MapType.HASH, MapType.LRU_HASH, MapType.PERCPU_HASH, MapType.LRU_PERCPU_HASH)


def adversary_table(seconds: float, filler: int, gap: int) -> None:
    """Live deletions per million deletions, per map type, mode and kind of writer, under
    the expire-then-refresh refresher. ``filler`` 0 is the tight race of the tests: rounds
    1 ms apart on the refreshed keys alone, so nearly every deletion is of a key the
    refresher is writing."""
    what = (f"{filler:,} expired flows per round" if filler else
            "no other flow, rounds 1 ms apart (the tests' tight race)")
    print(f"\nprune under an expire-then-refresh writer ({ADVERSARY_KEYS} keys, {what}, "
          f"{seconds:g} s per row)")
    print(f"{'map':<15} {'mode':<12} {'writer':<15} {'rounds':>7} {'deletions':>10} "
          f"{'kept':>6} {'live':>5} {'live per 1M deletions':>22} {'in the window':>14} "
          f"{'aged':>5}")
    writers = [("replace", 0), ("inplace", 0), ("inplace", gap)]
    for map_type in RACE_TYPES:
        for mode in ("kernel", "kernel-fast", "user"):
            for writer, turns in writers:
                rounds, deleted, kept, counts = _adversary_run(map_type, mode, writer, turns,
                                                               seconds, filler)
                label = f"{writer}" + (f" gap {turns}" if writer == "inplace" else "")
                live = counts["live"]
                print(f"{map_type.label:<15} {mode:<12} {label:<15} {rounds:>7} {deleted:>10,} "
                      f"{kept:>6} {live:>5} {live / max(deleted, 1) * 1e6:>22,.1f} "
                      f"{counts['window']:>14} {counts['aged']:>5}", flush=True)


def _adversary_run(map_type: MapType, mode: str, writer: str, gap: int, seconds: float,
                   filler: int) -> tuple[int, int, int, dict]:
    """(rounds, deletions, kept, the refresher's counts) of ``seconds`` of prune rounds."""
    with BtfBuilder() as b:
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        value = b.struct("flow", [("packets", u64), ("last_seen_ns", u64)])
        # room to spare: an LRU hash evicts before it is full (its free lists are per CPU)
        m = Map.create(map_type, 4, 16, 2 * (ADVERSARY_KEYS + filler), name="bb_bench_adv",
                       btf_fd=b.load(), btf_key_type_id=u32, btf_value_type_id=value)
    with m:
        words = m.info.value_stride // 8  # every CPU's {packets, last_seen_ns}
        fresh = np.zeros((ADVERSARY_KEYS, words), np.uint64)
        keys = np.arange(ADVERSARY_KEYS, dtype=np.uint32)
        writes.update(m, keys, fresh, ADVERSARY_KEYS)  # the refresher finds them
        filler_keys = np.arange(ADVERSARY_KEYS, ADVERSARY_KEYS + filler, dtype=np.uint32)
        expired = np.ones((filler, words), np.uint64)
        refill = filler > 0
        predicate = walker.compile_for(m, "last_seen_ns < now - 1s")
        kernel = walker.open_walker(m, mode, records=False, predicate=predicate)
        refresher = subprocess.Popen([sys.executable, "-m", "tools.bench.refresher",
                                      str(m.info.id), str(ADVERSARY_KEYS), writer, str(gap)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        rounds = deleted = kept = 0
        try:
            assert refresher.stdout.readline() == "ready\n"
            # fresh now: the refresher's start-up (it builds its program) may take longer
            # than the cutoff, and a key it has not written yet is not its to lose
            fresh[:, 1::2] = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            writes.update(m, keys, fresh, ADVERSARY_KEYS)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                if refill:
                    writes.update(m, filler_keys, expired, filler)
                if kernel is None:
                    result = walker.user_exec(m, predicate, "delete")
                else:
                    result = kernel.run(predicate, "delete", fast=mode == "kernel-fast")
                rounds += 1
                deleted += result.deleted
                kept += result.kept
                if not filler:
                    time.sleep(0.001)
        finally:
            refresher.stdin.close()
            counts = json.loads(refresher.stdout.readline())
            refresher.wait(30)
            if kernel is not None:
                kernel.close()
    return rounds, deleted, kept, counts
