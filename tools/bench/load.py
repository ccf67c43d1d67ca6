"""``python -m tools.bench load [--entries N] [--rounds R]``: loading the demo's flow table
(``struct flow_key`` with an enum and a ``u8[3]`` → ``struct flow_stats``) from Parquet, from
JSONL and from a ``bpftool batch file`` of ``map update`` lines, whole processes in the same
run, interleaved, into an emptied map.

The inputs are what ``bpfbatch dump -o parquet`` / ``-o jsonl`` and bpftool's own syntax
make of the same ``--entries`` flows. A second table splits the JSONL load in this process:
parse (JSON text → Python records), encode (records → packed bytes) and the batch update
syscalls; and, when orjson is installed, what orjson takes to parse the same text (the
question whether a faster parser is worth taking).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from tabulate import tabulate

from bpfbatch.labs.demo import create_flow_table, fill_flow_table
from bpfbatch.map import cursor, whole
from bpfbatch.map.handle import Map
from bpfbatch.records import read
from bpfbatch.records.codec import map_codecs
from bpfbatch.records.decoding import decoded_codecs

from . import harness

PARQUET, JSONL = "bpfbatch load flows.parquet", "bpfbatch load flows.jsonl"
BPFTOOL = "bpftool batch file (map update lines)"


def write_inputs(m: Map, tmp: Path) -> tuple[Path, Path, Path]:
    """The map's entries as Parquet, JSONL and bpftool ``map update`` lines."""
    paths = tmp / "flows.parquet", tmp / "flows.jsonl", tmp / "flows.bpftool"
    for path, fmt in zip(paths, ("parquet", "jsonl")):
        with path.open("wb") as out:
            subprocess.run([*harness.BPFBATCH, "dump", "--map-id", str(m.info.id), "-o", fmt],
                           stdout=out, check=True)
    keys, values = cursor.read_all(m)
    with paths[2].open("w") as lines:
        for key, value in zip(keys, values):
            lines.write(f"map update id {m.info.id} key hex {key.tobytes().hex(' ')} "
                        f"value hex {value.tobytes().hex(' ')}\n")
    return paths


def split(m: Map, path: Path, rounds: int) -> list[list[str]]:
    """Median seconds of the JSONL load's parse, encode and syscalls (and orjson's parse of
    the same pieces, arrays of their lines as the loader parses them)."""
    times: dict[str, list[float]] = {"parse": [], "encode": [], "syscalls": [], "orjson": []}
    codecs = decoded_codecs(*map_codecs(m.info))  # the dump decoded the fields it names
    try:
        import orjson
    except ImportError:
        orjson = None
    for _ in range(rounds):
        whole.clear(m)
        with read._gc_paused():
            start = time.perf_counter()
            for _ in read._jsonl_chunks(read._jsonl_pieces(str(path), "flows"), "flows"):
                pass
            parsed = time.perf_counter()
            for piece in read._jsonl_pieces(str(path), "flows") if orjson else ():
                orjson.loads("[" + ",".join(piece.splitlines()) + "]")
            fast = time.perf_counter()
        records = read.read_records(str(path), m.info, codecs=codecs)
        encoded = time.perf_counter()
        whole.load(m, records.keys, records.values, records.count)
        loaded = time.perf_counter()
        times["parse"].append(parsed - start)
        times["orjson"].append(fast - parsed)
        times["encode"].append((encoded - fast) - (parsed - start))
        times["syscalls"].append(loaded - encoded)
    return [[f"{np.median(t):.3f}" if t else "" for t in times.values()]]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench load", description=__doc__)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp, \
            create_flow_table(args.entries, name=f"bb_bload{os.getpid()}") as m:
        fill_flow_table(m, args.entries)
        parquet, jsonl, bpftool = write_inputs(m, Path(tmp))
        map_id = str(m.info.id)
        empty = lambda: whole.clear(m)  # noqa: E731
        load = ["load", "--map-id", map_id]
        cases = {
            PARQUET: harness.Command([*harness.BPFBATCH, *load, str(parquet)], setup=empty),
            JSONL: harness.Command([*harness.BPFBATCH, *load, str(jsonl)], setup=empty),
            BPFTOOL: harness.Command(["bpftool", "batch", "file", str(bpftool)], setup=empty),
        }
        rows = harness.summarize(harness.interleave(cases, rounds=args.rounds, warmup=0), JSONL)
        parts = split(m, jsonl, args.rounds)
    harness.report(f"load {args.entries:,} flows of the demo's flow table", rows, JSONL,
                   out_dir=args.out, params={"entries": args.entries})
    print(tabulate(parts, headers=["JSONL load in process: parse s", "encode s", "syscalls s",
                                   "orjson's parse of the same text s"],
                   tablefmt="github") + "\n")
    wall = {r["case"]: r["wall_s"] for r in rows}
    print(tabulate([
        ["Parquet load ÷ JSONL load", f"{wall[PARQUET] / wall[JSONL]:.2f}×", "≤ 0.5×"],
        ["bpftool batch file ÷ JSONL load", f"{wall[BPFTOOL] / wall[JSONL]:.1f}×", "≥ 5×"],
    ], headers=["target", "measured", "goal"], tablefmt="github"))
    return 0
