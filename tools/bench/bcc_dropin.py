"""``python -m tools.bench bcc_dropin [--entries N] [--rounds R]``: the bcc drop-in against
bcc's own batch calls, on one bcc table each, in the same run, interleaved.

Two bcc tables a bcc tool would declare — ``BPF_HASH(flows, struct flow, struct stats)`` and
``BPF_HASH(counts, u32, u64)`` — filled with ``--entries`` entries, untimed, before every
round. The cases:

- ``bpfbatch.bcc.items()`` vs bcc's ``items_lookup_batch()`` (consumed into a list) and, for
  reference, bcc's per-key ``items()``;
- ``bpfbatch.bcc.items_and_clear()`` vs bcc's ``items_lookup_and_delete_batch()``.

The drop-in returns what bcc's ``items()`` returns (``Key``/``Leaf`` ctypes objects, also for
scalar types); bcc's batch calls hand out the raw ctypes array items (plain ``int`` for a
scalar key or leaf), which is less work, so ≤ 1.0× is the drop-in doing no more than bcc.
"""

from __future__ import annotations

import argparse
import array
import ctypes
import gc
import timeit
from itertools import repeat
from pathlib import Path

import numpy as np
from tabulate import tabulate

from bpfbatch import bcc as batched
from bpfbatch.map import writes
from bpfbatch.map.cursor import BatchCursor
from bpfbatch.map.handle import Map
from tools.bcc_setup import load_bcc

from . import harness

TEXT = """
struct flow {{ u32 saddr; u32 daddr; u16 sport; u16 dport; u8 proto; }};
struct stats {{ u64 packets; u64 bytes; u64 last_seen_ns; }};
BPF_HASH(flows, struct flow, struct stats, {n});
BPF_HASH(counts, u32, u64, {n});
"""


def _filler(table, entries: int):
    """Fill ``table`` with ``entries`` distinct keys in one batch update (its sizes only)."""
    m = Map(table.map_fd, owned=False)
    key_size, value_size = m.info.key_size, m.info.value_size
    keys = np.zeros((entries, key_size), np.uint8)
    keys[:, :4] = np.arange(entries, dtype=np.uint32).view(np.uint8).reshape(entries, 4)
    values = np.full((entries, value_size), 7, np.uint8)

    def fill():
        assert writes.update(m, keys, values, entries) == entries
    return fill


def per_entry_costs(table, entries: int, rows: list[dict], ours: str, theirs: str) -> list:
    """What one entry costs, in ns, in each part of the read-out: the two whole calls, the
    batch syscalls alone (a cursor pass that builds nothing), and the construction of one
    key and one leaf object of bcc's types, the cheapest way (from the number) and the
    general one (``from_buffer_copy``)."""
    wall = {r["case"]: r["wall_s"] for r in rows}
    table_map = Map(table.map_fd, owned=False)

    def best(fn) -> float:
        was_on = gc.isenabled()
        gc.disable()
        try:
            return min(timeit.repeat(fn, number=1, repeat=5)) * 1e9 / entries
        finally:
            if was_on:
                gc.enable()

    def syscalls_only():
        for _ in BatchCursor(table_map, delete=False):
            pass

    out = [[f"{theirs}, whole call", f"{wall[theirs] * 1e9 / entries:.0f}"],
           [f"{ours}, whole call", f"{wall[ours] * 1e9 / entries:.0f}"],
           ["the batch syscalls alone (a cursor pass)", f"{best(syscalls_only):.0f}"]]
    for side in ("Key", "Leaf"):
        ctype = getattr(table, side)
        size = ctypes.sizeof(ctype)
        data = bytes(entries * size)
        out.append([f"one {side} ({ctype.__name__}) from its bytes: from_buffer_copy",
                    f"{best(_copies(ctype, data, entries)):.0f}"])
        code = getattr(ctype, "_type_", None)
        if isinstance(code, str) and len(code) == 1 and code in "bBhHiIlLqQfd":
            out.append([f"one {side} ({ctype.__name__}) from its number",
                        f"{best(_from_numbers(ctype, array.array(code, data))):.0f}"])
    return out


def _copies(ctype, data: bytes, entries: int):
    size = ctypes.sizeof(ctype)
    return lambda: list(map(ctype.from_buffer_copy, repeat(data), range(0, entries * size, size)))


def _from_numbers(ctype, numbers: array.array):
    return lambda: list(map(ctype, numbers))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench bcc_dropin", description=__doc__)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-key", action="store_true", help="also time bcc's per-key items()")
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)

    bcc = load_bcc()
    if bcc is None:
        print("bcc_dropin: bcc or kernel headers not available", flush=True)
        return 1
    program = bcc.BPF(text=TEXT.format(n=args.entries).encode())
    targets, costs = [], []
    try:
        for name in ("flows", "counts"):
            table = program[name.encode()]
            fill = _filler(table, args.entries)
            ours, theirs = f"bpfbatch.bcc.items({name})", f"bcc {name}.items_lookup_batch()"
            drain_ours = f"bpfbatch.bcc.items_and_clear({name})"
            drain_theirs = f"bcc {name}.items_lookup_and_delete_batch()"
            cases: dict[str, harness.Case] = {
                theirs: harness.InProcess(lambda t=table: list(t.items_lookup_batch()), setup=fill),
                ours: harness.InProcess(lambda t=table: batched.items(t), setup=fill),
                drain_theirs: harness.InProcess(
                    lambda t=table: list(t.items_lookup_and_delete_batch()), setup=fill),
                drain_ours: harness.InProcess(lambda t=table: batched.items_and_clear(t),
                                              setup=fill),
            }
            if args.per_key:
                cases[f"bcc {name}.items()"] = harness.InProcess(lambda t=table: t.items(),
                                                                 setup=fill)
            rows = harness.summarize(harness.interleave(cases, rounds=args.rounds), theirs)
            harness.report(f"bcc drop-in, {args.entries:,} entries of {name}", rows, theirs,
                           out_dir=args.out, params={"entries": args.entries, "table": name})
            fill()
            costs += per_entry_costs(table, args.entries, rows, ours, theirs)
            wall = {r["case"]: r["wall_s"] for r in rows}
            targets += [[f"{ours} ÷ {theirs}", f"{wall[ours] / wall[theirs]:.2f}×", "≤ 1.0×"],
                        [f"{drain_ours} ÷ {drain_theirs}",
                         f"{wall[drain_ours] / wall[drain_theirs]:.2f}×", "≤ 1.0×"]]
    finally:
        program.cleanup()
    print(tabulate(costs, headers=["per entry", "ns"], tablefmt="github") + "\n")
    print(tabulate(targets, headers=["target", "measured", "goal"], tablefmt="github"))
    return 0
