"""Start-up budget: the whole-process cost of the quick commands on a small map.

``python -m tools.bench startup [--rounds R] [--out DIR]``

``count``, ``list`` and ``dump -o json|table`` of a 16-entry BTF map, against the bare
interpreter (``python -c pass``), ``python -c "import numpy"`` (the baseline: the budget is
0.75× of it) and ``bpftool map dump`` / ``map show`` of the same map. Each case is a fresh
process, interleaved with the others, the package's bytecode compiled first
(:mod:`tools.bench.__main__`).

The budget table says PASS or FAIL per command against 0.75× the baseline's median wall
time, with the ratio of the median CPU times (user + sys) beside it: on a loaded machine a
wall time is largely time spent waiting for a CPU, and the CPU ratio is the one to read (the
fastest run is no better: numpy's import is bimodal here). Each command also runs once more under
``python -X importtime``, and the table names the heavy imports (numpy, pydantic, rich, typer) it
pulled in, the usual reason for a FAIL; ``python -X importtime -m bpfbatch ...`` shows the
rest. Exits 1 when a command is over budget.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
from tabulate import tabulate

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.map import writes
from tools.bench.harness import BPFBATCH, Command, interleave, report, summarize

BASELINE = 'python -c "import numpy"'
BUDGET = 0.75
ENTRIES = 16
#: Imports a quick command on a small map must not need.
HEAVY = ("numpy", "pydantic", "rich", "typer")


def small_map() -> Map:
    with BtfBuilder() as b:
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        val = b.struct("val", [("a", u64), ("b", u64)])
        m = Map.create(MapType.HASH, 4, 16, 64, name="bb_bench_start", btf_fd=b.load(),
                       btf_key_type_id=u32, btf_value_type_id=val)
    keys = np.arange(ENTRIES, dtype=np.uint32)
    writes.update(m, keys, np.zeros((ENTRIES, 2), np.uint64), ENTRIES)
    return m


def heavy_imports(argv: list[str]) -> list[str]:
    """The :data:`HEAVY` packages that running ``argv`` (a ``python ...`` command) imports,
    from ``-X importtime``'s log on stderr."""
    run = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, check=True)
    loaded = {line.rsplit("|", 1)[-1].strip().split(".")[0]
              for line in run.stderr.splitlines() if line.startswith("import time:")}
    return [name for name in HEAVY if name in loaded]


def budget_table(rows: list[dict], commands: dict[str, Command]) -> tuple[str, bool]:
    """PASS/FAIL of each bpfbatch command against :data:`BUDGET` × the baseline (median wall
    times), with its CPU-time ratio and heavy imports; and whether all passed."""
    by_case = {row["case"]: row for row in rows}
    base_cpu = by_case[BASELINE]["user_s"] + by_case[BASELINE]["sys_s"]
    lines, ok = [], True
    for case, command in commands.items():
        row = by_case[case]
        passed = row["ratio"] < BUDGET
        ok &= passed
        cpu = (row["user_s"] + row["sys_s"]) / base_cpu
        lines.append([case, f"{row['ratio']:.2f}×", f"{cpu:.2f}×", "PASS" if passed else "FAIL",
                      ", ".join(heavy_imports(list(command.argv))) or "none"])
    return tabulate(lines, headers=["command (÷ import numpy)", "wall", "CPU time",
                                    f"budget: wall < {BUDGET}×", "heavy imports"],
                    tablefmt="github"), ok


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench startup", description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)
    with small_map() as m:
        map_id = str(m.info.id)
        commands = {
            "bpfbatch count": Command([*BPFBATCH, "count", "--map-id", map_id]),
            "bpfbatch list": Command([*BPFBATCH, "list"]),
            "bpfbatch dump -o json": Command([*BPFBATCH, "dump", "--map-id", map_id]),
            "bpfbatch dump -o table": Command([*BPFBATCH, "dump", "--map-id", map_id,
                                               "-o", "table"]),
        }
        cases = {
            "python -c pass": Command([sys.executable, "-c", "pass"]),
            BASELINE: Command([sys.executable, "-c", "import numpy"]),
            "bpftool map show id N": Command(["bpftool", "map", "show", "id", map_id]),
            "bpftool -j map dump id N": Command(["bpftool", "-j", "map", "dump", "id", map_id]),
            **commands,
        }
        rows = summarize(interleave(cases, rounds=args.rounds, warmup=2), BASELINE)
        report(f"Start-up: quick commands on a {ENTRIES}-entry map (budget: {BUDGET}× "
               f"{BASELINE})", rows, BASELINE, out_dir=args.out,
               params={"rounds": args.rounds, "entries": ENTRIES})
        table, ok = budget_table(rows, commands)
    print(table, flush=True)
    return 0 if ok else 1
