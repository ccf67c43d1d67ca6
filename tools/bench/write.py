"""Write-side benchmarks: clear, drain and load against bcc, a C floor and bpftool.

``python -m tools.bench write [--entries N] [--bcc-sizes 10000,50000,100000] [--rounds R]``

1. clear vs bcc ``table.clear()`` at growing sizes (each map sized to its contents, as a tool
   sizes its table for the peak): bcc deletes while walking, so every ``get_next_key`` restarts
   from the first bucket and the cost grows quadratically. ``a·n + b·n²`` is fitted on the
   measured sizes and bcc's time at ``--entries`` extrapolated from it.
2. clear of ``--entries`` vs C: a lookup_batch + delete_batch loop and a
   lookup_and_delete_batch loop (``c/write_floor.c``, compiled with ``gcc -lbpf`` into a
   temporary directory).
3. drain vs the C lookup_and_delete_batch loop (library with a sink that keeps nothing, and
   the CLI writing JSONL to /dev/null).
4. load of ``--entries`` typed JSONL records vs ``bpftool batch file`` of ``map update``
   lines and vs C ``bpf_map_update_batch`` of the same number of records.

Every case runs in the same process tree, interleaved, on the same map; ``setup`` (refilling or
emptying the map) is not timed. Ratios are case / bpfbatch.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from tabulate import tabulate

from bpfbatch import Map
from bpfbatch import bcc as batched
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.map import whole, writes
from tools.bcc_setup import load_bcc
from tools.bench.harness import BPFBATCH, Command, InProcess, build_c, interleave, report, summarize


def fill(m: Map, n: int) -> None:
    """``n`` entries: key = index (first 4 bytes), value = index (first 8 bytes)."""
    keys = np.zeros((n, m.info.key_size), np.uint8)
    keys[:, :4] = np.arange(n, dtype=np.uint32).view(np.uint8).reshape(n, 4)
    values = np.zeros((n, m.info.value_stride), np.uint8)
    values[:, :8] = np.arange(n, dtype=np.uint64).view(np.uint8).reshape(n, 8)
    writes.update(m, keys, values, n)


def refill(m: Map, n: int):
    def setup() -> None:
        whole.clear(m)
        fill(m, n)
    return setup


def median_wall(rows: list[dict], case: str) -> float:
    return next(r["wall_s"] for r in rows if r["case"] == case)


# -- 1. clear vs bcc ----------------------------------------------------------------------


def bench_bcc_clear(sizes: list[int], rounds: int, out: Path) -> Callable[[int], float] | None:
    """Returns bcc's fitted time as a function of the size, or None without bcc.

    The model is ``a·n + b·n²`` (least squares): each ``get_next_key`` after a delete rescans
    the emptied buckets, ``n·buckets/2`` probes in all with ``buckets ≈ n``, plus the linear
    syscall cost that dominates small sizes and makes a plain power-law fit understate the
    growth. The power-law exponent is printed as evidence of the growth."""
    bcc = load_bcc()
    if bcc is None:
        print("bcc or kernel headers not available: skipping clear vs bcc\n")
        return None
    text = "".join(f"BPF_HASH(h{n}, u32, u64, {n});\n" for n in sizes)
    program = bcc.BPF(text=text.encode())
    try:
        cases = {}
        for n in sizes:
            table = program[f"h{n}".encode()]
            m = Map(table.map_fd, owned=False)
            cases[f"bpfbatch.bcc.clear {n:,}"] = InProcess(
                lambda table=table: batched.clear(table), setup=refill(m, n))
            cases[f"bcc clear() {n:,}"] = InProcess(table.clear, setup=refill(m, n))
        rows = summarize(interleave(cases, rounds=rounds, warmup=0),
                         baseline=f"bpfbatch.bcc.clear {sizes[-1]:,}")
    finally:
        program.cleanup()
    report("clear: bpfbatch vs bcc table.clear()", rows, f"bpfbatch.bcc.clear {sizes[-1]:,}",
           out_dir=out, params={"sizes": sizes, "rounds": rounds})
    times = np.array([median_wall(rows, f"bcc clear() {n:,}") for n in sizes])
    n = np.array(sizes, dtype=float)
    exponent = np.polyfit(np.log(n), np.log(times), 1)[0]
    (linear, quadratic), *_ = np.linalg.lstsq(np.column_stack([n, n * n]), times, rcond=None)
    print(f"bcc clear() grows as n^{exponent:.2f} over {sizes[0]:,}..{sizes[-1]:,} entries; "
          f"fit: {linear * 1e6:.2f} µs·n + {quadratic * 1e9:.3f} ns·n²\n")
    return lambda size: float(linear * size + quadratic * size * size)


# -- 2./3. clear and drain vs C -----------------------------------------------------------


def bench_clear_drain(entries: int, floor: str, rounds: int, out: Path) -> dict[str, float]:
    with Map.create(MapType.HASH, 4, 8, entries, name="bench_write") as m:
        map_id = str(m.info.id)
        setup = refill(m, entries)
        clear_rows = summarize(interleave({
            "bpfbatch clear (library)": InProcess(lambda: whole.clear(m), setup=setup),
            "bpfbatch clear (CLI)": Command([*BPFBATCH, "clear", "--map-id", map_id], setup=setup),
            "C lookup_batch + delete_batch": Command([floor, "clear-delete", map_id, "8192"], setup=setup),
            "C lookup_and_delete_batch": Command([floor, "drain", map_id, "8192"], setup=setup),
        }, rounds=rounds), baseline="bpfbatch clear (library)")
        report(f"clear {entries:,} entries: bpfbatch vs C", clear_rows,
               "bpfbatch clear (library)", out_dir=out, params={"entries": entries})
        drain_rows = summarize(interleave({
            "bpfbatch drain (library, sink keeps nothing)": InProcess(
                lambda: whole.drain(m, lambda batch: None), setup=setup),
            "bpfbatch drain -o jsonl > /dev/null (CLI)": Command(
                [*BPFBATCH, "drain", "--map-id", map_id, "-o", "jsonl"], setup=setup),
            "C lookup_and_delete_batch": Command([floor, "drain", map_id, "8192"], setup=setup),
        }, rounds=rounds), baseline="bpfbatch drain (library, sink keeps nothing)")
        report(f"drain {entries:,} entries: bpfbatch vs C", drain_rows,
               "bpfbatch drain (library, sink keeps nothing)", out_dir=out,
               params={"entries": entries})
    return {"clear": median_wall(clear_rows, "bpfbatch clear (library)"),
            "clear_c": min(median_wall(clear_rows, "C lookup_batch + delete_batch"),
                           median_wall(clear_rows, "C lookup_and_delete_batch")),
            "drain": median_wall(drain_rows, "bpfbatch drain (library, sink keeps nothing)"),
            "drain_c": median_wall(drain_rows, "C lookup_and_delete_batch")}


# -- 4. load vs bpftool and C -------------------------------------------------------------


def typed_map(entries: int) -> tuple[Map, BtfBuilder]:
    b = BtfBuilder()
    u8, u16, u32, u64 = (b.integer(n, s) for n, s in
                         (("__u8", 1), ("__u16", 2), ("__u32", 4), ("__u64", 8)))
    key = b.struct("flow", [("addr", u32), ("port", u16), ("proto", u8)])
    value = b.struct("stats", [("packets", u64), ("bytes", u64)])
    m = Map.create(MapType.HASH, 8, 16, entries, name="bench_load", btf_fd=b.load(),
                   btf_key_type_id=key, btf_value_type_id=value)
    return m, b


def write_inputs(tmp: Path, map_id: int, entries: int) -> tuple[Path, Path]:
    """The same records as typed JSONL and as bpftool ``map update`` lines."""
    jsonl, batch = tmp / "records.jsonl", tmp / "records.bpftool"
    with jsonl.open("w") as j, batch.open("w") as t:
        for i in range(entries):
            j.write('{"key":{"addr":%d,"port":443,"proto":6},"value":{"packets":%d,"bytes":%d}}\n'
                    % (i, i, i * 1500))
            key = (i.to_bytes(4, "little") + (443).to_bytes(2, "little") + b"\x06\x00")
            value = i.to_bytes(8, "little") + (i * 1500).to_bytes(8, "little")
            t.write(f"map update id {map_id} key hex {key.hex(' ')} value hex {value.hex(' ')}\n")
    return jsonl, batch


def bench_load(entries: int, floor: str, rounds: int, tmp: Path, out: Path) -> dict[str, float]:
    m, btf = typed_map(entries)
    try:
        jsonl, batch = write_inputs(tmp, m.info.id, entries)
        empty = lambda: whole.clear(m)  # noqa: E731
        map_id = str(m.info.id)
        rows = summarize(interleave({
            "bpfbatch load records.jsonl (CLI)": Command(
                [*BPFBATCH, "load", "--map-id", map_id, str(jsonl)], setup=empty),
            "bpftool batch file (map update lines)": Command(
                ["bpftool", "batch", "file", str(batch)], setup=empty),
            "C bpf_map_update_batch (no parsing)": Command(
                [floor, "update", map_id, str(entries), "8192"], setup=empty),
        }, rounds=rounds, warmup=0), baseline="bpfbatch load records.jsonl (CLI)")
    finally:
        m.close()
        btf.close()
    report(f"load {entries:,} typed records: bpfbatch vs bpftool and C", rows,
           "bpfbatch load records.jsonl (CLI)", out_dir=out, params={"entries": entries})
    return {"load": median_wall(rows, "bpfbatch load records.jsonl (CLI)"),
            "load_bpftool": median_wall(rows, "bpftool batch file (map update lines)")}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench write", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--bcc-sizes", default="10000,50000,100000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.bcc_sizes.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bpfbatch-bench-"))
    try:
        floor = build_c("write_floor.c", tmp)
        bcc_fit = bench_bcc_clear(sizes, args.rounds, args.out)
        ours = bench_clear_drain(args.entries, floor, args.rounds, args.out)
        ours |= bench_load(args.entries, floor, args.rounds, tmp, args.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = args.entries
    targets = []
    if bcc_fit:
        bcc_at_n = bcc_fit(n)
        targets.append([f"clear {n:,} vs bcc clear() (extrapolated {bcc_at_n:,.0f} s)",
                        _speed(bcc_at_n / ours["clear"]), "≥ 1000× faster"])
    targets += [
        [f"clear {n:,} vs best C batch loop", f"{ours['clear'] / ours['clear_c']:.2f}× the C time",
         "≤ 1.2×"],
        [f"drain {n:,} vs C lookup_and_delete loop",
         f"{ours['drain'] / ours['drain_c']:.2f}× the C time", "≤ 1.1×"],
        [f"load {n:,} JSONL vs bpftool batch file", _speed(ours["load_bpftool"] / ours["load"]),
         "≥ 10× faster"],
    ]
    print("## targets\n\n" + tabulate(targets, headers=["comparison", "measured", "target"],
                                       tablefmt="github") + "\n")
    return 0


def _speed(ratio: float) -> str:
    """``peer time / our time`` in words."""
    return f"{ratio:,.1f}× faster" if ratio >= 1 else f"{1 / ratio:,.1f}× slower"
