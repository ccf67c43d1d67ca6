"""``python -m tools.bench diff [--entries N] [--rounds R]``: ``bpfbatch diff`` of two maps of
the demo's flow table layout, whole processes in the same run, interleaved.

B is A's copy with 1% of the values changed (one field each), 0.1% of the keys deleted and
as many new ones added. The peers:

- what a user does today: ``bpftool -j map dump`` of both, an entry a line (``jq -c '.[]'``)
  and sorted (two hash maps list their keys in different orders), and a text ``diff`` of the
  two (unsorted, diff(1) ran for more than ten minutes on 1M entries here);
- the C floor: two passes of ``bpf_map_lookup_batch`` (``c/map_floor.c``), one per map, no
  comparison at all.

A second table splits ``bpfbatch.diff`` in this process: the two reads, the join and value
compare, the fields of the changed keys.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from bpfbatch import diff as bb_diff
from bpfbatch.compare import Diff, _Side
from bpfbatch.labs.demo import create_flow_table, fill_flow_table
from bpfbatch.map import cursor, writes

from . import harness

DIFF = "bpfbatch diff id A id B -o jsonl"
BPFTOOL = "bpftool -j map dump A, B | jq | sort + diff(1)"
FLOOR = "C 2× bpf_map_lookup_batch (the floor)"


def make_pair(entries: int, changed: float = 0.01, churn: float = 0.001):
    """Two flow tables: A filled, B its copy with ``changed`` of the values changed and
    ``churn`` of the keys replaced by new ones."""
    a = create_flow_table(int(entries * 1.1), name="bb_bench_da")
    b = create_flow_table(int(entries * 1.1), name="bb_bench_db")
    fill_flow_table(a, entries)
    keys, values = cursor.read_all(a)
    rng = np.random.default_rng(7)
    values = values.copy()
    pick = rng.choice(entries, int(entries * changed), replace=False)
    packets = values[pick, 0:8].copy().view("<u8")
    values[pick, 0:8] = (packets + 1).view(np.uint8)
    keep = np.ones(entries, bool)
    keep[rng.choice(entries, int(entries * churn), replace=False)] = False
    new_keys = keys[:int(entries * churn)].copy()
    new_keys[:, 12] = 99  # a protocol no flow has: keys A lacks
    keys = np.concatenate([keys[keep], new_keys])
    values = np.concatenate([values[keep], values[:len(new_keys)]])
    writes.update(b, np.ascontiguousarray(keys), np.ascontiguousarray(values), len(keys))
    return a, b


def split(a, b, rounds: int) -> list[list[str]]:
    """Median seconds of the steps of ``bpfbatch.diff`` in this process."""
    from bpfbatch.records.decoding import view

    steps: dict[str, list[float]] = {"read A and B": [], "join + compare": [], "total": []}
    for _ in range(rounds):
        start = time.perf_counter()
        sides = [_Side(m.info.label, *cursor.read_all(m)) for m in (a, b)]
        read = time.perf_counter()
        d = Diff(sides[0], sides[1], view(a.info))
        done = time.perf_counter()
        steps["read A and B"].append(read - start)
        steps["join + compare"].append(done - read)
        start = time.perf_counter()
        bb_diff(a, b)
        steps["total"].append(time.perf_counter() - start)
    return [[name, f"{np.median(times):.3f}"] for name, times in steps.items()] + \
        [["changes", f"{d.added} added, {d.removed} removed, {d.changed} changed"]]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench diff")
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)
    a, b = make_pair(args.entries)
    with a, b, tempfile.TemporaryDirectory() as tmp:
        floor = harness.build_c("map_floor.c", Path(tmp))
        ia, ib = a.info.id, b.info.id
        dumps = " && ".join(f"bpftool -j map dump id {i} | jq -c '.[]' | sort > {tmp}/{side}"
                            for i, side in ((ia, "a"), (ib, "b")))
        dumps += f" && {{ diff {tmp}/a {tmp}/b > /dev/null; test $? -le 1; }}"
        cases = {
            DIFF: harness.Command(_diff_argv(ia, ib)),
            BPFTOOL: harness.Command(["sh", "-c", dumps]),
            FLOOR: harness.Command(["sh", "-c", f"{floor} lookup-batch {ia} 8192 && "
                                                f"{floor} lookup-batch {ib} 8192"]),
        }
        samples = harness.interleave(cases, rounds=args.rounds)
        rows = harness.summarize(samples, DIFF)
        harness.report(f"diff of two {args.entries}-entry flow tables", rows, DIFF,
                       out_dir=args.out, params={"entries": args.entries})
        from tabulate import tabulate

        print(tabulate(split(a, b, args.rounds), headers=["bpfbatch.diff step", "s (median)"],
                       tablefmt="github"))
    return 0


def _diff_argv(ia: int, ib: int) -> list[str]:
    """The diff as a command whose exit status 1 (they differ) the harness takes as done."""
    return ["sh", "-c", f"{' '.join(harness.BPFBATCH)} diff id {ia} id {ib} -o jsonl -q "
                        f"> /dev/null; test $? -le 1"]
