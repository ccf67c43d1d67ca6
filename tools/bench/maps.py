"""Read-side benchmark: one 1M-entry BTF hash map (u32 key, 16-byte struct value) read by
every peer in the same run, interleaved, to /dev/null.

``python -m tools.bench maps [--entries N] [--rounds R] [--no-bcc] [--out DIR]``

Peers: a C loop over ``bpf_map_lookup_batch`` (the floor) and a C ``get_next_key`` + lookup
loop (``c/map_floor.c``, built with ``gcc -lbpf`` into a temporary directory), bcc's
``items()`` and ``items_lookup_batch()`` when bcc is installed, and ``bpftool -j map dump``;
against the bpfbatch API into numpy arrays and ``bpfbatch dump -o json`` / ``-o bpftool-json``
(whole process, interpreter start included). With bcc the map is the one a bcc program
created, so bcc reads its own table; everyone else reads the same map by id.

A second table dumps the demo's flow table (``struct flow_key`` with ``__be32`` addresses
and ``__be16`` ports, decoded without asking: ``"10.0.0.1"``, an enum, ``struct
flow_stats``) of as many entries with bpfbatch and bpftool, where the display decoders are
most of the work.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from tabulate import tabulate

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.labs.demo import create_flow_table, fill_flow_table
from bpfbatch.map import cursor, writes
from tools.bcc_setup import load_bcc
from tools.bench.harness import BPFBATCH, Command, InProcess, build_c, interleave, report, summarize

BCC_TEXT = "struct val {{ u64 a; u64 b; }};\nBPF_HASH(bench, u32, struct val, {n});\n"
FLOOR = "C lookup_batch loop (floor)"


def btf_map(entries: int) -> Map:
    with BtfBuilder() as b:
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        val = b.struct("val", [("a", u64), ("b", u64)])
        return Map.create(MapType.HASH, 4, 16, entries, name="bb_bench_read", btf_fd=b.load(),
                          btf_key_type_id=u32, btf_value_type_id=val)


def fill(m: Map, entries: int) -> None:
    keys = np.arange(entries, dtype=np.uint32)
    values = np.zeros((entries, 2), np.uint64)
    values[:, 0] = keys
    values[:, 1] = keys.astype(np.uint64) * 3
    assert writes.update(m, keys, values, entries) == entries


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench maps", description=__doc__)
    parser.add_argument("--entries", type=int, default=1 << 20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=cursor.DEFAULT_BATCH)
    parser.add_argument("--no-bcc", action="store_true", help="skip the bcc peers")
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)

    bcc = None if args.no_bcc else load_bcc()
    # Not "if program": a bcc.BPF with no table opened yet has len() 0, so it is falsy.
    program = bcc.BPF(text=BCC_TEXT.format(n=args.entries).encode()) if bcc else None
    with tempfile.TemporaryDirectory() as tmp:
        floor = build_c("map_floor.c", Path(tmp))
        if program is not None:
            table = program[b"bench"]
            m = Map(table.map_fd, owned=False)
        else:
            m = btf_map(args.entries)
        try:
            fill(m, args.entries)
            map_id = str(m.info.id)
            dump = [*BPFBATCH, "dump", "--map-id", map_id, "--batch-size", str(args.batch)]
            cases = {
                FLOOR: Command([floor, "lookup-batch", map_id, str(args.batch)]),
                "bpfbatch API → numpy arrays": InProcess(
                    lambda: cursor.read_all(m, batch_size=args.batch)),
                "bpfbatch dump -o json": Command([*dump, "-o", "json"]),
                "bpfbatch dump -o bpftool-json": Command([*dump, "-o", "bpftool-json"]),
                "C get_next_key+lookup loop": Command([floor, "lookup-perkey", map_id]),
                "bpftool -j map dump": Command(["bpftool", "-j", "map", "dump", "id", map_id]),
            }
            if program is not None:
                cases["bcc items_lookup_batch()"] = InProcess(lambda: list(table.items_lookup_batch()))
                cases["bcc items()"] = InProcess(lambda: table.items())
            rows = summarize(interleave(cases, rounds=args.rounds), baseline=FLOOR)
        finally:
            if program is not None:
                program.cleanup()
            else:
                m.close()
    report(f"read {args.entries:,} entries (u32 key, 16-byte struct value)", rows, FLOOR,
           out_dir=args.out, params={"entries": args.entries, "batch": args.batch,
                                     "bcc": program is not None})
    wall = {r["case"]: r["wall_s"] for r in rows}
    targets = [
        ["API → arrays ÷ C floor", f"{wall['bpfbatch API → numpy arrays'] / wall[FLOOR]:.2f}×", "≤ 1.10×"],
        ["bpftool ÷ dump -o json", f"{wall['bpftool -j map dump'] / wall['bpfbatch dump -o json']:.1f}×", "≥ 5×"],
        ["bpftool ÷ dump -o bpftool-json",
         f"{wall['bpftool -j map dump'] / wall['bpfbatch dump -o bpftool-json']:.1f}×", "≥ 2×"],
    ]
    if program is not None:
        targets.append(["bcc items() ÷ API → arrays",
                        f"{wall['bcc items()'] / wall['bpfbatch API → numpy arrays']:.0f}×", ""])
    targets.append(flow_dumps(args))
    print(tabulate(targets, headers=["target", "measured", "goal"], tablefmt="github"))
    return 0


def flow_dumps(args) -> list[str]:
    """The flow-table table (see the module doc); its target row."""
    ours = "bpfbatch dump -o jsonl (addresses, ports decoded)"
    with create_flow_table(args.entries, name="bb_bench_flows") as m:
        fill_flow_table(m, args.entries)
        dump = [*BPFBATCH, "dump", "--map-id", str(m.info.id)]
        cases = {
            ours: Command([*dump, "-o", "jsonl"]),
            "bpfbatch dump -o json": Command([*dump, "-o", "json"]),
            "bpfbatch dump -o bpftool-json": Command([*dump, "-o", "bpftool-json"]),
            "bpftool -j map dump": Command(["bpftool", "-j", "map", "dump", "id",
                                            str(m.info.id)]),
        }
        rows = summarize(interleave(cases, rounds=args.rounds), baseline=ours)
    report(f"dump {args.entries:,} flows of the demo's flow table", rows, ours,
           out_dir=args.out, params={"entries": args.entries, "table": "flows"})
    wall = {r["case"]: r["wall_s"] for r in rows}
    return ["flows: bpftool ÷ dump -o jsonl", f"{wall['bpftool -j map dump'] / wall[ours]:.1f}×",
            ""]
