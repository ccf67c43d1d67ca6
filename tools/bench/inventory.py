"""Inventory benchmark: ``list --count`` of 100 maps holding 10M entries in all, against
``bpftool map show`` + a per-map ``bpftool map dump | wc -l`` and the C floor, in one run.

``python -m tools.bench inventory [--maps N] [--entries TOTAL] [--subset K] [--rounds R]
[--out DIR]``

Cases, each a whole process, interleaved:

- ``bpfbatch list --count`` of the benchmark's maps (``--match``: the node's other maps come
  and go and are not the benchmark's);
- the C floor (``c/inventory_floor.c``): one process, one ``bpf_map_lookup_batch`` pass per
  map, nothing printed but the counts;
- the peer, ``bpftool map show`` then ``bpftool map dump id N | wc -l`` per map. It reads
  element by element and takes minutes for all the maps, so it runs on ``--subset`` of them
  and a last row extrapolates it linearly to all (every map holds the same number of
  entries, so each dump costs the same; ``bpftool map show`` alone is timed to take it out
  of the per-map cost): that row is computed, not measured.

A second table: what counting an *empty* hash of 16M ``max_entries`` costs (the batch call
walks every bucket), with and without preallocation, in process (``Map.count``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from tabulate import tabulate

from bpfbatch import Map
from bpfbatch._sys.abi import BPF_F_NO_PREALLOC, MapType
from bpfbatch.map import writes
from tools.bench.harness import BPFBATCH, Command, build_c, interleave, report, summarize

PREFIX = "bb_bench_inv"
LIST = "bpfbatch list --count"
SHOW = "bpftool map show"


def make_maps(n: int, total: int) -> list[Map]:
    """``n`` hashes (u32 → u64) holding ``total`` entries in all, each ~3/4 full."""
    per = total // n
    maps = []
    keys = np.arange(per, dtype=np.uint32)
    values = keys.astype(np.uint64)
    for i in range(n):
        m = Map.create(MapType.HASH, 4, 8, per * 4 // 3, name=f"{PREFIX}{i}")
        maps.append(m)
        assert writes.update(m, keys, values, per) == per
    return maps


def extrapolated(rows: list[dict], peer: str, factor: float, case: str) -> dict:
    """The peer's row for all maps: ``map show`` once plus its dumps times ``factor`` (the
    dumps of the subset are the peer's times less ``map show``'s). Computed, not measured."""
    by_case = {row["case"]: row for row in rows}
    show, measured = by_case[SHOW], by_case[peer]
    out = {**measured, "case": case}
    for key in ("wall_s", "min_s", "max_s", "user_s", "sys_s"):
        out[key] = show[key] + (measured[key] - show[key]) * factor
    out["ratio"] = out["wall_s"] / by_case[LIST]["wall_s"]
    return out


def empty_hash_table(rounds: int) -> str:
    """Median time of ``Map.count`` on an empty 16M-``max_entries`` hash, and with one
    entry, with and without preallocation."""
    lines = []
    for flags, label in ((0, "preallocated"), (BPF_F_NO_PREALLOC, "BPF_F_NO_PREALLOC")):
        with Map.create(MapType.HASH, 4, 8, 1 << 24, name=f"{PREFIX}_e", flags=flags) as m:
            empty = _median_count(m, rounds)
            m.update(b"\1\0\0\0", bytes(8))
            one = _median_count(m, rounds)
            lines.append([label, f"{m.info.memlock >> 20}", f"{empty * 1e3:.1f}",
                          f"{one * 1e3:.1f}"])
    return tabulate(lines, headers=["16M max_entries hash", "memlock MiB", "count, empty (ms)",
                                    "count, 1 entry (ms)"], tablefmt="github")


def _median_count(m: Map, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        m.count()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench inventory", description=__doc__)
    parser.add_argument("--maps", type=int, default=100)
    parser.add_argument("--entries", type=int, default=10_000_000)
    parser.add_argument("--subset", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)
    maps = make_maps(args.maps, args.entries)
    try:
        ids = [str(m.info.id) for m in maps]
        dumps = "; ".join(f"bpftool map dump id {i} | wc -l" for i in ids[:args.subset])
        peer = f"bpftool map show + dump, wc -l: {args.subset} maps"
        with tempfile.TemporaryDirectory() as tmp:
            cases = {
                LIST: Command([*BPFBATCH, "list", "--count", "--match", f"{PREFIX}*"]),
                "C lookup_batch floor, all maps": Command(
                    [build_c("inventory_floor.c", Path(tmp)), "8192", *ids]),
                SHOW: Command(["sh", "-c", "bpftool map show >/dev/null"]),
                peer: Command(["sh", "-c", f"bpftool map show >/dev/null; {dumps}"]),
            }
            rows = summarize(interleave(cases, rounds=args.rounds, warmup=1), LIST)
        rows.append(extrapolated(rows, peer, args.maps / args.subset,
                                 f"bpftool map show + dump, wc -l: all {args.maps} maps "
                                 "(extrapolated)"))
        report(f"Inventory: {args.maps} maps, {args.entries} entries", rows, LIST,
               out_dir=args.out, params={"maps": args.maps, "entries": args.entries,
                                         "subset": args.subset, "rounds": args.rounds})
    finally:
        for m in maps:
            m.close()
    print(empty_hash_table(args.rounds), flush=True)
    return 0
