"""Start-up budget: the whole-process cost of the quick commands on a small map.

``python -m tools.bench startup [--rounds R] [--out DIR]``

``count``, ``list`` and ``dump -o json|table`` of a 16-entry BTF map, against the bare
interpreter (``python -c pass``), ``python -c "import numpy"`` (the baseline: the budget is
0.75× of it) and ``bpftool map dump`` / ``map show`` of the same map. Each case is a fresh
process, interleaved with the others. ``python -X importtime -m bpfbatch ...`` says where
a command's time goes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.map import writes
from bpfbatch.map.handle import Map
from tools.bench.harness import BPFBATCH, Command, interleave, report, summarize

BASELINE = 'python -c "import numpy"'
ENTRIES = 16


def small_map() -> Map:
    with BtfBuilder() as b:
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        val = b.struct("val", [("a", u64), ("b", u64)])
        m = Map.create(MapType.HASH, 4, 16, 64, name="bb_bench_start", btf_fd=b.load(),
                       btf_key_type_id=u32, btf_value_type_id=val)
    keys = np.arange(ENTRIES, dtype=np.uint32)
    writes.update(m, keys, np.zeros((ENTRIES, 2), np.uint64), ENTRIES)
    return m


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench startup", description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)
    with small_map() as m:
        map_id = str(m.info.id)
        cases = {
            "python -c pass": Command([sys.executable, "-c", "pass"]),
            BASELINE: Command([sys.executable, "-c", "import numpy"]),
            "bpftool map show id N": Command(["bpftool", "map", "show", "id", map_id]),
            "bpftool -j map dump id N": Command(["bpftool", "-j", "map", "dump", "id", map_id]),
            "bpfbatch count": Command([*BPFBATCH, "count", "--map-id", map_id]),
            "bpfbatch list": Command([*BPFBATCH, "list"]),
            "bpfbatch dump -o json": Command([*BPFBATCH, "dump", "--map-id", map_id]),
            "bpfbatch dump -o table": Command([*BPFBATCH, "dump", "--map-id", map_id,
                                               "-o", "table"]),
        }
        rows = summarize(interleave(cases, rounds=args.rounds, warmup=2), BASELINE)
    report(f"Start-up: quick commands on a {ENTRIES}-entry map (budget: 0.75× {BASELINE})",
           rows, BASELINE, out_dir=args.out, params={"rounds": args.rounds, "entries": ENTRIES})
    return 0
