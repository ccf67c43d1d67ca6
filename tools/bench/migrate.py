"""``migrate``: the demo's flow table upgraded to its v2 layout, against the C floor.

``python -m tools.bench migrate [--entries N] [--rounds R]``

FROM is ``progs/flowtable.bpf.o``'s flow table (an LRU hash, sized 5/4 of ``--entries`` so
that nothing is evicted), filled with the demo's synthetic flows
(:func:`bpfbatch.labs.demo.fill_flow_table`); TO is ``progs/flowtable_v2.bpf.o``'s, whose
layout widens one field (``key.proto``: u8 → u32), adds two (``ifindex``, ``max_len``) and
renames one (``first_seen_ns`` → ``first_ns``). Cases, interleaved, TO emptied (untimed)
before each:

* ``bpfbatch migrate`` — the whole process, as a user runs it;
* ``bpfbatch.migrate()`` — the library in this process;
* the C floor (``c/migrate_floor.c``): one ``lookup_batch`` pass over FROM and one
  ``update_batch`` pass of as many entries into TO, without converting anything.

Ratios are case / the C floor. Goals: the whole process ≤ 2 s and ≤ 3× the floor.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from tabulate import tabulate

import bpfbatch
from bpfbatch.labs.demo import fill_flow_table
from bpfbatch.loader import BpfObject
from bpfbatch.map import whole
from tools.bench.harness import BPFBATCH, Command, InProcess, build_c, interleave, report, summarize

RENAME = "first_seen_ns=first_ns"
FLOOR = "C floor: lookup_batch all + update_batch all"
CLI = "bpfbatch migrate (whole process)"
LIBRARY = "bpfbatch.migrate() (library)"


def _table(name: str, entries: int) -> BpfObject:
    obj = BpfObject.package(name)
    obj.configure_map("flows", max_entries=entries * 5 // 4)
    obj.load()
    return obj


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench migrate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bpfbatch-bench-"))
    try:
        floor = build_c("migrate_floor.c", tmp)
        with _table("flowtable", args.entries) as old, _table("flowtable_v2", args.entries) as new:
            src, dst = old.map("flows"), new.map("flows")
            fill_flow_table(src, args.entries)
            assert src.count() == args.entries, "the LRU evicted: give it more room"
            empty = lambda: whole.clear(dst)  # noqa: E731
            ids = [str(src.info.id), str(dst.info.id)]
            rows = summarize(interleave({
                CLI: Command([*BPFBATCH, "migrate", "id", ids[0], "id", ids[1], "--rename",
                              RENAME, "--batch-size", str(args.batch_size)], setup=empty),
                LIBRARY: InProcess(lambda: bpfbatch.migrate(src, dst, rename=[RENAME],
                                                            batch_size=args.batch_size),
                                   setup=empty),
                FLOOR: Command([floor, *ids, str(args.batch_size)], setup=empty),
            }, rounds=args.rounds), baseline=FLOOR)
            assert dst.count() == args.entries
            empty()  # a plan checks, as a migration does, that TO is empty
            plan = bpfbatch.migrate(src, dst, rename=[RENAME], plan_only=True).plan
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = args.entries
    print(f"plan:\n{plan}")
    report(f"migrate {n:,} flows to the v2 layout: bpfbatch vs the C floor", rows, FLOOR,
           out_dir=args.out, params={"entries": n, "batch_size": args.batch_size})
    wall = {row["case"]: row["wall_s"] for row in rows}
    print("## targets\n\n" + tabulate([
        [f"migrate {n:,} (whole process)", f"{wall[CLI]:.2f} s", "≤ 2 s"],
        [f"migrate {n:,} vs the C floor", f"{wall[CLI] / wall[FLOOR]:.2f}× the C time",
         "≤ 3×"],
    ], headers=["comparison", "measured", "target"], tablefmt="github") + "\n")
    return 0
