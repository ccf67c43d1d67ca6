"""Map commands: ``list``, ``dump``, ``count`` (MAP addressing: :mod:`.options`)."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from ..errors import InputError
from ..map import cursor
from ..map.cursor import check_batch_size
from ..map.handle import MapInfo, iter_infos
from .progress import progress
from .options import (
    DEFAULT_BATCH,
    BatchSize,
    Decode,
    MapId,
    Name,
    Output,
    Pinned,
    check_output,
    open_map,
)

commands = typer.Typer()

def _show_record(info: MapInfo) -> dict:
    """The fields of ``bpftool -j map show``, same names and order."""
    return {"id": info.id, "type": info.type_name, "name": info.name, "flags": info.flags,
            "bytes_key": info.key_size, "bytes_value": info.value_size,
            "max_entries": info.max_entries, "bytes_memlock": info.memlock,
            "frozen": int(info.frozen), "btf_id": info.btf_id}


@commands.command("list")
def list_maps(
    output: Annotated[str, typer.Option("-o", "--output", help="table or json")] = "table",
) -> None:
    """List the maps on the system, like bpftool map show."""
    if output not in ("table", "json"):
        raise InputError(f"unknown format '{output}' (use table or json)", obj="--output")
    records = [_show_record(info) for info in iter_infos()]
    if output == "json":
        json.dump(records, sys.stdout)
        sys.stdout.write("\n")
        return
    from tabulate import tabulate

    headers = ["id", "type", "name", "flags", "key", "value", "max_entries", "memlock", "btf_id"]
    rows = [[r["id"], r["type"], r["name"], hex(r["flags"]), r["bytes_key"], r["bytes_value"],
             r["max_entries"], r["bytes_memlock"], r["btf_id"] or ""] for r in records]
    print(tabulate(rows, headers=headers, tablefmt="simple"))


@commands.command("count")
def count(map_id: MapId = None, pinned: Pinned = None, name: Name = None,
          batch_size: BatchSize = DEFAULT_BATCH) -> None:
    """Count a map's elements with one batched pass (bpftool has no count)."""
    check_batch_size(batch_size)
    with open_map(map_id, pinned, name, read_only=True) as m:
        total = sum(batch.count for batch in cursor.BatchCursor(m, batch_size=batch_size))
    print(total)


@commands.command("dump")
def dump(
    map_id: MapId = None, pinned: Pinned = None, name: Name = None,
    output: Output = "json",
    batch_size: BatchSize = DEFAULT_BATCH,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Stop after N elements.")] = None,
    decode: Decode = None,
) -> None:
    """Print a map's elements, typed from its BTF, read with batched lookups.

    Not an atomic snapshot: each hash bucket is read atomically, the map as a whole is not.
    """
    check_batch_size(batch_size)
    if limit is not None and limit < 0:
        raise InputError(f"must not be negative, got {limit}", obj="--limit")
    check_output(output)
    from ..records import pipeline

    with open_map(map_id, pinned, name, read_only=True) as m:
        out = pipeline.Output(output, m.info, sys.stdout.buffer, decode=decode or [])
        with progress(m.info.label, total=None) as advance:
            # The next batch syscall runs while this one is formatted (see read_ahead).
            batches = cursor.read_ahead(cursor.BatchCursor(m, batch_size=batch_size))
            pipeline.run(batches, out, limit=limit, progress=advance)
