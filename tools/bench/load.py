"""``python -m tools.bench load [--entries N] [--rounds R]``: loading a map from Parquet, from
JSONL and from a ``bpftool batch file`` of ``map update`` lines, whole processes in the same
run, interleaved, into an emptied map; for two tables:

- the demo's flow table (``struct flow_key`` with ``__be32`` addresses and ``__be16`` ports,
  which the JSON shows decoded, an enum and a ``u8[3]`` → ``struct flow_stats``);
- a plain ``u32 → u64`` hash with BTF (simple values: ``{"key":1,"value":2}``).

A C loop of ``bpf_map_update_batch`` over the same number of records (``c/write_floor.c``,
no parsing) shows the kernel's share, in one thread and in as many threads as bpfbatch's
load uses writers (one per CPU, at most 4: :func:`bpfbatch.map.writes.default_jobs`); the
JSONL load with ``--jobs 1`` shows what those writers save.

The inputs are what ``bpfbatch dump -o parquet`` / ``-o jsonl`` and bpftool's own syntax
make of the same ``--entries`` entries. A second table per map splits the JSONL load in this
process pinned to one CPU, with the codecs the CLI uses: parse (JSON text → Python values),
encode (values → packed bytes) and the batch update syscalls; and gives parse + encode as the
CLI does them (a large file in two halves at once when a second CPU is free).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from tabulate import tabulate

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.cli.options import record_codecs
from bpfbatch.labs.demo import create_flow_table, fill_flow_table
from bpfbatch.map import cursor, whole, writes
from bpfbatch.formats import read
from bpfbatch.formats.typedjson import typed_lines

from . import harness

PARQUET, JSONL = "bpfbatch load {}.parquet", "bpfbatch load {}.jsonl"
ONE_WRITER = "bpfbatch load {}.jsonl --jobs 1"
BPFTOOL = "bpftool batch file (map update lines)"
FLOOR = "C bpf_map_update_batch (no parsing: the syscall floor)"
FLOOR_THREADS = "C bpf_map_update_batch, {} threads"


@contextmanager
def simple_table(entries: int, name: str):
    """A ``u32 → u64`` hash with BTF, filled with ``entries`` keys."""
    with BtfBuilder() as b:
        u32, u64 = b.integer("__u32", 4), b.integer("__u64", 8)
        with Map.create(MapType.HASH, 4, 8, entries, name=name, btf_fd=b.load(),
                        btf_key_type_id=u32, btf_value_type_id=u64) as m:
            keys = np.arange(entries, dtype=np.uint32)
            writes.update(m, keys, keys.astype(np.uint64) * 1500, entries)
            yield m


def write_inputs(m: Map, tmp: Path, stem: str) -> tuple[Path, Path, Path]:
    """The map's entries as Parquet, JSONL and bpftool ``map update`` lines."""
    paths = tmp / f"{stem}.parquet", tmp / f"{stem}.jsonl", tmp / f"{stem}.bpftool"
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


def split(m: Map, path: Path, rounds: int) -> list[str]:
    """Median seconds of the JSONL load's steps in this process, with the CLI's codecs,
    pinned to one CPU: parse is the parser alone over every piece of the file (the typed
    parse when the layout has one, see :mod:`bpfbatch.formats.typedjson`), encode the rest
    of :func:`~bpfbatch.formats.read.read_records`, then the batch update syscalls. Last,
    ``read_records`` as the CLI runs it here: in two halves at once when the file is large
    and a second CPU is allowed (:mod:`bpfbatch.formats.halves`)."""
    times: dict[str, list[float]] = {"parse": [], "encode": [], "syscalls": [], "halves": []}
    codecs = record_codecs(m.info, None)
    allowed = os.sched_getaffinity(0)
    for _ in range(rounds):
        whole.clear(m)
        os.sched_setaffinity(0, {min(allowed)})
        try:
            with read._gc_paused():
                start = time.perf_counter()
                _parse_only(path, codecs)
                parsed = time.perf_counter()
            records = read.read_records(str(path), m.info, codecs=codecs)
            encoded = time.perf_counter()
            whole.load(m, records.keys, records.values, records.count)
            loaded = time.perf_counter()
        finally:
            os.sched_setaffinity(0, allowed)
        del records
        start_both = time.perf_counter()
        read.read_records(str(path), m.info, codecs=codecs)
        times["halves"].append(time.perf_counter() - start_both)
        times["parse"].append(parsed - start)
        times["encode"].append((encoded - parsed) - (parsed - start))
        times["syscalls"].append(loaded - encoded)
    return [f"{np.median(t):.3f}" for t in times.values()]


def _parse_only(path: Path, codecs) -> None:
    """The JSONL parse of ``path`` as the load does it, without the encoding: typed (the
    records as msgspec objects) when the layout has the fast path, else the general one."""
    typed = typed_lines(*codecs)
    pieces = read._jsonl_pieces(str(path), "bench")
    if typed is None:
        for _ in read._jsonl_chunks(pieces, "bench"):
            pass
        return
    for piece in pieces:
        _, lines, _, block = read.typed_block(piece, 1)
        if typed.parse(block or lines) is None:
            raise RuntimeError(f"{path}: the typed parse declined a block")


def bench(m: Map, stem: str, title: str, args, tmp: Path, floor: str) -> list[list[str]]:
    parquet, jsonl, bpftool = write_inputs(m, tmp, stem)
    map_id = str(m.info.id)
    empty = lambda: whole.clear(m)  # noqa: E731
    load = ["load", "--map-id", map_id]
    ours = JSONL.format(stem)
    threads = writes.default_jobs(args.entries)
    floor_threads = FLOOR_THREADS.format(threads)
    cases = {
        PARQUET.format(stem): harness.Command([*harness.BPFBATCH, *load, str(parquet)],
                                              setup=empty),
        ours: harness.Command([*harness.BPFBATCH, *load, str(jsonl)], setup=empty),
        ONE_WRITER.format(stem): harness.Command([*harness.BPFBATCH, *load, str(jsonl),
                                                  "--jobs", "1"], setup=empty),
        BPFTOOL: harness.Command(["bpftool", "batch", "file", str(bpftool)], setup=empty),
        FLOOR: harness.Command([floor, "update", map_id, str(args.entries), "8192"],
                               setup=empty),
        floor_threads: harness.Command([floor, "update", map_id, str(args.entries), "8192",
                                        str(threads)], setup=empty),
    }
    rows = harness.summarize(harness.interleave(cases, rounds=args.rounds, warmup=0), ours)
    parts = split(m, jsonl, args.rounds)
    harness.report(f"load {args.entries:,} {title}", rows, ours, out_dir=args.out,
                   params={"entries": args.entries, "table": stem})
    print(tabulate([parts], headers=[f"{ours} in process, one CPU: parse s", "encode s",
                                     "syscalls s", "parse + encode as the CLI does s"],
                   tablefmt="github") + "\n")
    wall = {r["case"]: r["wall_s"] for r in rows}
    return [[f"{stem}: Parquet load ÷ JSONL load", f"{wall[PARQUET.format(stem)] / wall[ours]:.2f}×",
             "≤ 0.5×"],
            [f"{stem}: bpftool batch file ÷ JSONL load", f"{wall[BPFTOOL] / wall[ours]:.1f}×",
             "≥ 5×"],
            [f"{stem}: JSONL load ÷ the C syscall floor", f"{wall[ours] / wall[FLOOR]:.1f}×", ""],
            [f"{stem}: Parquet load ÷ the C floor, {threads} threads",
             f"{wall[PARQUET.format(stem)] / wall[floor_threads]:.1f}×", ""],
            [f"{stem}: JSONL load, one writer ÷ {threads}",
             f"{wall[ONE_WRITER.format(stem)] / wall[ours]:.2f}×", ""]]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench load", description=__doc__)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)

    targets = []
    with tempfile.TemporaryDirectory() as tmp:
        floor = harness.build_c("write_floor.c", Path(tmp))
        with create_flow_table(args.entries, name=f"bb_bload{os.getpid()}") as m:
            fill_flow_table(m, args.entries)
            targets += bench(m, "flows", "flows of the demo's flow table", args, Path(tmp),
                             floor)
        with simple_table(args.entries, f"bb_bsimple{os.getpid()}") as m:
            targets += bench(m, "counts", "entries of a u32 → u64 hash", args, Path(tmp), floor)
    print(tabulate(targets, headers=["target", "measured", "goal"], tablefmt="github"))
    return 0
