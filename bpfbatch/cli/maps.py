"""Map commands: ``list``, ``dump``, ``count``, and the MAP addressing every map command shares.

``MAP := --map-id N | --pinned PATH | --name NAME`` (bpftool's ``id | pinned | name``; the
name is an exact match and must be unambiguous).
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Annotated, Optional

import typer

from ..errors import InputError
from ..map import cursor
from ..map.cursor import check_batch_size
from ..map.handle import Map, MapInfo, iter_infos
from . import app

MapId = Annotated[Optional[int], typer.Option("--map-id", help="Map id (as bpftool map show lists).")]
Pinned = Annotated[Optional[str], typer.Option("--pinned", help="Path of a map pinned on bpffs.")]
Name = Annotated[Optional[str], typer.Option("--name", help="Exact map name; must match one map.")]
BatchSize = Annotated[int, typer.Option("--batch-size", help="Elements per batch syscall.")]
#: The renderers' names (render.FORMATS, spelled out so that starting any command does not
#: import the codecs; tests/unit check the two agree).
OUTPUT_FORMATS = "table, json, jsonl, csv or bpftool-json"
Output = Annotated[str, typer.Option("-o", "--output", help=OUTPUT_FORMATS)]


def open_map(map_id: int | None, pinned: str | None, name: str | None, *,
             read_only: bool) -> Map:
    """The map the user named with exactly one of ``--map-id``, ``--pinned``, ``--name``."""
    given = [flag for flag, value in (("--map-id", map_id), ("--pinned", pinned), ("--name", name))
             if value is not None]
    if len(given) != 1:
        raise InputError("name the map with exactly one of --map-id, --pinned, --name"
                         + (f" (got {' and '.join(given)})" if given else ""), obj="MAP")
    return Map.open(id=map_id, pinned=pinned, name=name, read_only=read_only)


def _show_record(info: MapInfo) -> dict:
    """The fields of ``bpftool -j map show``, same names and order."""
    return {"id": info.id, "type": info.type_name, "name": info.name, "flags": info.flags,
            "bytes_key": info.key_size, "bytes_value": info.value_size,
            "max_entries": info.max_entries, "bytes_memlock": info.memlock,
            "frozen": int(info.frozen), "btf_id": info.btf_id}


@app.command("list")
def list_maps(
    output: Annotated[str, typer.Option("-o", "--output", help="table or json")] = "table",
) -> None:
    """List the maps on the system, like ``bpftool map show``."""
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


@app.command("count")
def count(map_id: MapId = None, pinned: Pinned = None, name: Name = None,
          batch_size: BatchSize = cursor.DEFAULT_BATCH) -> None:
    """Count a map's elements with one batched pass (bpftool has no count)."""
    check_batch_size(batch_size)
    with open_map(map_id, pinned, name, read_only=True) as m:
        total = sum(batch.count for batch in cursor.BatchCursor(m, batch_size=batch_size))
    print(total)


@app.command("dump")
def dump(
    map_id: MapId = None, pinned: Pinned = None, name: Name = None,
    output: Output = "json",
    batch_size: BatchSize = cursor.DEFAULT_BATCH,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Stop after N elements.")] = None,
) -> None:
    """Print a map's elements, typed from its BTF, read with batched lookups.

    Not an atomic snapshot: each hash bucket is read atomically, the map as a whole is not.
    """
    check_batch_size(batch_size)
    if limit is not None and limit < 0:
        raise InputError(f"must not be negative, got {limit}", obj="--limit")
    from ..records import pipeline

    pipeline.check_format(output, "--output")
    with open_map(map_id, pinned, name, read_only=True) as m:
        out = pipeline.Output(output, m.info, sys.stdout.buffer)
        with _progress(m.info.label) as advance:
            # The next batch syscall runs while this one is formatted (see read_ahead).
            batches = cursor.read_ahead(cursor.BatchCursor(m, batch_size=batch_size))
            pipeline.run(batches, out, limit=limit, progress=advance)


@contextlib.contextmanager
def _progress(label: str):
    """A live element counter on stderr when stderr is a terminal; otherwise nothing."""
    if not sys.stderr.isatty():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}: {task.completed} elements"),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield lambda n: bar.advance(task, n)
