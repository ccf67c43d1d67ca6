"""``python -m tools.bench bcc_dropin [--entries N] [--rounds R]``: the bcc drop-in against
bcc's own batch calls, on one bcc table each, in the same run, interleaved.

Two bcc tables a bcc tool would declare — ``BPF_HASH(flows, struct flow, struct stats)`` and
``BPF_HASH(counts, u32, u64)`` — filled with ``--entries`` entries, untimed, before every
round. The cases:

- ``bpfbatch.bcc.items()`` vs bcc's ``items_lookup_batch()`` (consumed into a list) and, for
  reference, bcc's per-key ``items()``;
- ``bpfbatch.bcc.items_and_clear()`` vs bcc's ``items_lookup_and_delete_batch()``;
- ``bpfbatch.bcc.items_lookup_batch()`` / ``items_lookup_and_delete_batch()`` (the drop-ins
  with bcc's batch-call types) vs bcc's calls of the same names.

``items()`` and ``items_and_clear()`` return what bcc's ``items()`` returns (``Key``/``Leaf``
ctypes objects, also for scalar types); bcc's batch calls hand out the raw ctypes array items
(plain ``int`` for a scalar key or leaf), which is less work. The per-entry table splits the
calls into the batch syscalls (as bcc makes them, one call of ``max_entries``, and as the
cursor does, ``DEFAULT_BATCH`` at a time) and the building of the objects, down to the bare
allocation of a ctypes object, which bounds from below what any way of building ``items()``'s
types can cost.
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

from bpfbatch import Map
from bpfbatch import bcc as batched
from bpfbatch.map import writes
from bpfbatch.map.cursor import BatchCursor
from bpfbatch.map.handle import DEFAULT_BATCH
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


def per_entry_costs(table, entries: int, rows: list[dict], name: str) -> list:
    """What one entry costs, in ns, in each part of the read-out: the whole calls, the batch
    syscalls alone (a cursor pass that builds nothing, at the cursor's batch size and at
    bcc's), the construction of one key and one leaf object of bcc's types (from the bytes,
    from the number, and the bare allocation every construction pays), and from those the
    floor of any read-out that hands out ``items()``'s types: the syscalls plus two
    allocations and a pair per entry."""
    wall = {r["case"]: r["wall_s"] * 1e9 / entries for r in rows}
    table_map = Map(table.map_fd, owned=False)

    def best(fn) -> float:
        was_on = gc.isenabled()
        gc.disable()
        try:
            return min(timeit.repeat(fn, number=1, repeat=5)) * 1e9 / entries
        finally:
            if was_on:
                gc.enable()

    def syscalls_only(batch_size: int):
        def run():
            for _ in BatchCursor(table_map, delete=False, batch_size=batch_size):
                pass
        return run

    syscalls = best(syscalls_only(DEFAULT_BATCH))
    out = [[case, f"{wall[case]:.0f}"] for case in _cases(name)]
    out += [[f"the batch syscalls alone, {DEFAULT_BATCH} per call (a cursor pass)",
             f"{syscalls:.0f}"],
            ["the batch syscalls alone, max_entries per call, as bcc calls them",
             f"{best(syscalls_only(table_map.info.max_entries)):.0f}"]]
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
        out.append([f"one {side} ({ctype.__name__}) allocated, unset: __new__ (the floor)",
                    f"{best(_allocations(ctype, entries)):.0f}"])
    floor = syscalls + best(_allocated_pairs(table.Key, table.Leaf, entries))
    out.append(["floor of items()'s types: syscalls + 2 allocations + a pair",
                f"{floor:.0f} ({floor / wall[_cases(name)[0]]:.2f}× bcc's batch call)"])
    return out


def _copies(ctype, data: bytes, entries: int):
    size = ctypes.sizeof(ctype)
    return lambda: list(map(ctype.from_buffer_copy, repeat(data), range(0, entries * size, size)))


def _from_numbers(ctype, numbers: array.array):
    return lambda: list(map(ctype, numbers))


def _allocations(ctype, entries: int):
    return lambda: list(map(ctype.__new__, repeat(ctype, entries)))


def _allocated_pairs(key_type, leaf_type, entries: int):
    return lambda: list(zip(map(key_type.__new__, repeat(key_type, entries)),
                            map(leaf_type.__new__, repeat(leaf_type, entries))))


def _cases(name: str) -> list[str]:
    """The timed cases of table ``name``: each of bcc's batch calls, then its drop-ins."""
    return [f"bcc {name}.items_lookup_batch()", f"bpfbatch.bcc.items({name})",
            f"bpfbatch.bcc.items_lookup_batch({name})",
            f"bcc {name}.items_lookup_and_delete_batch()", f"bpfbatch.bcc.items_and_clear({name})",
            f"bpfbatch.bcc.items_lookup_and_delete_batch({name})"]


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
            theirs, ours, ours_batch, drain_theirs, drain_ours, drain_ours_batch = _cases(name)
            cases: dict[str, harness.Case] = {
                theirs: harness.InProcess(lambda t=table: list(t.items_lookup_batch()), setup=fill),
                ours: harness.InProcess(lambda t=table: batched.items(t), setup=fill),
                ours_batch: harness.InProcess(lambda t=table: batched.items_lookup_batch(t),
                                              setup=fill),
                drain_theirs: harness.InProcess(
                    lambda t=table: list(t.items_lookup_and_delete_batch()), setup=fill),
                drain_ours: harness.InProcess(lambda t=table: batched.items_and_clear(t),
                                              setup=fill),
                drain_ours_batch: harness.InProcess(
                    lambda t=table: batched.items_lookup_and_delete_batch(t), setup=fill),
            }
            if args.per_key:
                cases[f"bcc {name}.items()"] = harness.InProcess(lambda t=table: t.items(),
                                                                 setup=fill)
            rows = harness.summarize(harness.interleave(cases, rounds=args.rounds), theirs)
            harness.report(f"bcc drop-in, {args.entries:,} entries of {name}", rows, theirs,
                           out_dir=args.out, params={"entries": args.entries, "table": name})
            fill()
            costs += per_entry_costs(table, args.entries, rows, name)
            wall = {r["case"]: r["wall_s"] for r in rows}
            targets += [[f"{mine} ÷ {bccs}", f"{wall[mine] / wall[bccs]:.2f}×", "≤ 1.0×"]
                        for mine, bccs in ((ours, theirs), (drain_ours, drain_theirs),
                                           (ours_batch, theirs),
                                           (drain_ours_batch, drain_theirs))]
    finally:
        program.cleanup()
    print(tabulate(costs, headers=["per entry", "ns"], tablefmt="github") + "\n")
    print(tabulate(targets, headers=["target", "measured", "goal"], tablefmt="github"))
    return 0
