"""Map commands: ``list``, ``dump``, ``count`` (MAP addressing: :mod:`.options`).

Declared as data (:class:`~.options.Commands`), not as typer functions: these are the quick
commands the thin entry point (:mod:`.fastpath`) runs without importing typer, and it parses
their options from the same declarations typer's commands are built from (:mod:`.typed`).
"""

from __future__ import annotations

import contextlib
import io
import sys

from .. import interrupts
from .._sys import abi
from ..errors import BpfBatchError, InputError, Interrupted
from ..map import cursor
from ..map.cursor import check_batch_size
from ..map.handle import MapInfo, iter_infos, pinned_paths, require
from . import options
from .options import (
    BATCH_SIZE,
    DECODE,
    MAP,
    OUTPUT,
    Commands,
    Option,
    check_output,
    open_map,
)
from .progress import progress

commands = Commands()

def _show_record(info: MapInfo) -> dict:
    """The fields of ``bpftool -j map show``, same names and order; like bpftool, ``btf_id``
    only for a map that has BTF."""
    record = {"id": info.id, "type": info.type_name, "name": info.name, "flags": info.flags,
              "bytes_key": info.key_size, "bytes_value": info.value_size,
              "max_entries": info.max_entries, "bytes_memlock": info.memlock,
              "frozen": int(info.frozen)}
    if info.btf_id:
        record["btf_id"] = info.btf_id
    return record


#: ``list``'s formats: the columns of ``bpftool map show`` as a table, JSON, lines or CSV.
LIST_FORMATS = ("table", "json", "jsonl", "csv")


@commands.command(
    "list",
    Option("output", "-o", "--output", default="table", help=options.LIST_FORMATS,
           complete="list_formats"),
    Option("map_type", "--type", help="Only maps of this type (hash, percpu_array, ... as "
                                      "listed).", complete="map_types"),
    Option("match", "--match", help="Only maps whose name matches this shell pattern (flow*)."),
    Option("bpffs", "-f", "--bpffs", kind=bool, default=False,
           help="Show where each map is pinned on bpffs (bpftool -f)."),
    Option("pinned_only", "--pinned-only", kind=bool, default=False,
           help="Only maps pinned on bpffs (implies -f)."),
    Option("count", "--count", "--fill", kind=bool, default=False,
           help="Count every map's elements: entries, fill %, memlock and the programs "
                "using it, fullest first."),
    Option("budget", "--budget", metavar="DURATION",
           help="With --count: stop counting after DURATION (1s, 500ms); a map not counted "
                "by then shows '-' and why."),
)
def list_maps(output: str, map_type: str | None, match: str | None, bpffs: bool,
              pinned_only: bool, count: bool, budget: str | None) -> None:
    """List the maps on the system, like bpftool map show."""
    if output not in LIST_FORMATS:
        raise InputError(f"unknown format '{output}' (use {', '.join(LIST_FORMATS)})",
                         obj="--output")
    if budget is not None and not count:
        raise InputError("counts nothing without --count", obj="--budget")
    budget_s = None
    if budget is not None:
        from ..exec.predicate import parse_duration

        budget_s = parse_duration(budget, "--budget") / 1e9
    selected = options.map_selector(map_type, match)
    pins = pinned_paths() if bpffs or pinned_only else None

    def listed() -> list[MapInfo]:
        return [info for info in iter_infos()
                if selected(info) and (not pinned_only or info.id in pins)]
    if count:
        from .. import interrupts
        from ..map.inventory import inventory

        done, infos = interrupts.Tally(), []
        with interrupts.stopping(lambda: f"{done.applied} of {len(infos)} maps counted, "
                                         "nothing printed" if infos else
                                         "0 maps counted, nothing printed"):
            infos.extend(listed())
            rows = inventory(infos, budget_s=budget_s, tally=done)
        records = [_count_record(row) for row in rows]
        texts = _count_texts
    else:
        records = [_show_record(info) for info in listed()]
        texts = _show_texts
    if pins is not None:
        for record in records:
            record["pinned"] = pins.get(record["id"], [])
    _print_records(records, output, texts)


def _count_record(row) -> dict:
    """One line of ``list --count``: a :class:`~bpfbatch.map.inventory.Row` as JSON."""
    info = row.info
    return {"id": info.id, "type": info.type_name, "name": info.name, "entries": row.entries,
            "max_entries": info.max_entries,
            "fill": None if row.fill is None else round(row.fill, 2),
            "bytes_memlock": info.memlock,
            "programs": [{"id": p.id, "name": p.name} for p in row.programs],
            "inner": row.inner, "reason": row.reason}


def _show_texts(record: dict) -> dict:
    return {**record, "flags": hex(record["flags"]), "btf_id": record.get("btf_id", "")}


def _count_texts(record: dict) -> dict:
    return {**record, "entries": "-" if record["entries"] is None else record["entries"],
            "fill": "-" if record["fill"] is None else f"{record['fill']:.1f}",
            "programs": " ".join(f"{p['name']}({p['id']})" for p in record["programs"]),
            "inner": " ".join(map(str, record["inner"])),
            "reason": record["reason"] or ""}


def _print_records(records: list[dict], output: str, texts) -> None:
    """``records`` as JSON, JSON lines, or a table or CSV of their ``texts(record)``."""
    import json  # not at the top: count does not print JSON

    if output == "json" and options.PRETTY:  # -p: laid out as bpftool -p map show
        from .bpftool import pretty

        print(pretty(records))
    elif output == "json":
        json.dump(records, sys.stdout)
        sys.stdout.write("\n")
    elif output == "jsonl":
        sys.stdout.writelines(json.dumps(r) + "\n" for r in records)
    else:
        rows = [{**texts(r), **({"pinned": " ".join(r["pinned"])} if "pinned" in r else {})}
                for r in records]
        headers = list(rows[0]) if rows else list(_SHOW_COLUMNS)
        if output == "csv":
            import csv

            writer = csv.DictWriter(sys.stdout, headers, lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
            return
        from ..formats.table import simple

        print(simple([[row[h] for h in headers] for row in rows],
                     [_SHOW_COLUMNS.get(h, h) for h in headers],
                     [_right(rows, h) for h in headers]))


#: Table headings of the ``bpftool map show`` fields.
_SHOW_COLUMNS = {"id": "id", "type": "type", "name": "name", "flags": "flags",
                 "bytes_key": "key", "bytes_value": "value", "max_entries": "max_entries",
                 "bytes_memlock": "memlock", "frozen": "frozen", "btf_id": "btf_id",
                 "fill": "fill%"}


def _right(rows: list[dict], column: str) -> bool:
    return all(type(r[column]) is int or r[column] == "-" or column == "fill" for r in rows)


RECURSIVE = Option("recursive", "--recursive", kind=bool, default=False,
                   help="A map of maps: its inner maps' elements (dump: nested under each "
                        "outer entry; json, jsonl or bpftool-json).")


@commands.command("count", *MAP, BATCH_SIZE, RECURSIVE)
def count(map_id: int | None, pinned: str | None, name: str | None, batch_size: int,
          recursive: bool) -> None:
    """Count a map's elements with one batched pass (bpftool has no count)."""
    check_batch_size(batch_size)
    with open_map(map_id, pinned, name, read_only=True) as m:
        require(m.info, "count")
        if recursive:
            from ..formats import nested

            _require_maps_of_maps(m)
            total = nested.count(m, batch_size=batch_size)
        else:
            total = sum(batch.count for batch in cursor.BatchCursor(m, batch_size=batch_size))
    print(total)


def _require_maps_of_maps(m) -> None:
    if m.info.type not in abi.MAP_IN_MAP_TYPES:
        raise InputError(f"{m.info.label} is a {m.info.type_name} map, not a map of maps",
                         obj="--recursive")


@commands.command(
    "dump", *MAP, OUTPUT, BATCH_SIZE,
    Option("limit", "--limit", kind=int, help="Stop after N elements."),
    DECODE,
    Option("sum_cpus", "--sum", kind=bool, default=False,
           help="Per-CPU maps: one value per key, integer fields summed over the CPUs."),
    RECURSIVE,
)
def dump(map_id: int | None, pinned: str | None, name: str | None, output: str,
         batch_size: int, limit: int | None, decode: list[str] | None, sum_cpus: bool,
         recursive: bool) -> None:
    """Print a map's elements, typed from its BTF, read with batched lookups.

    Not an atomic snapshot: each hash bucket is read atomically, the map as a whole is not.
    """
    check_batch_size(batch_size)
    if limit is not None and limit < 0:
        raise InputError(f"must not be negative, got {limit}", obj="--limit")
    check_output(output)
    if recursive:
        return _dump_recursive(map_id, pinned, name, output, batch_size, limit, decode,
                               sum_cpus)
    from ..formats import pipeline

    pretty = options.PRETTY and output == "bpftool-json"  # -p: bpftool's layout, in memory
    out = None
    with interrupts.stopping(lambda: f"{out.written if out else 0} records written"), \
            open_map(map_id, pinned, name, read_only=True) as m:
        require(m.info, "slots" if output == "bpftool-json" else "dump")
        target = io.BytesIO() if pretty else pipeline.stdout()
        out = pipeline.Output(output, m.info, target, decode=decode or [], sum_cpus=sum_cpus)
        with progress(m.info.label, total=None) as advance:
            # The next batch syscall runs while this one is formatted (see read_ahead).
            # bpftool lists the keys whose value cannot be read: so does bpftool-json
            batches = cursor.read_ahead(cursor.BatchCursor(
                m, batch_size=batch_size, lookup_errors=output == "bpftool-json"))
            try:
                pipeline.run(batches, out, limit=limit, progress=advance)
            except Interrupted as exc:
                exc.obj = m.info.label
                # The trailer, so that what was written is a whole document of those
                # records (JSON's "]", Arrow's end of stream, Parquet's footer).
                with contextlib.suppress(BpfBatchError):
                    out.close()
                    if pretty:
                        _print_pretty(target.getvalue())
                raise
    if pretty:
        _print_pretty(target.getvalue())


def _print_pretty(data: bytes) -> None:
    """``-p``: bpftool's layout of the JSON ``data``, written whole (signals held back)."""
    from ..formats import pipeline
    from .bpftool import pretty_text

    with interrupts.deferred():
        pipeline.stdout().write(pretty_text(data))


def _dump_recursive(map_id: int | None, pinned: str | None, name: str | None, output: str,
                    batch_size: int, limit: int | None, decode: list[str] | None,
                    sum_cpus: bool) -> None:
    """``dump --recursive``: each outer entry with its inner map's elements
    (:mod:`bpfbatch.formats.nested`)."""
    from ..formats import nested, pipeline

    if output not in nested.FORMATS:
        raise InputError(f"--recursive writes {', '.join(nested.FORMATS)}, not {output}",
                         obj="--output")
    for flag, given in (("--limit", limit is not None), ("--sum", sum_cpus),
                        ("--decode", bool(decode) and output == "bpftool-json"),
                        ("-p", options.PRETTY)):
        if given:
            raise InputError(f"not with --recursive -o {output}", obj=flag)
    from .. import interrupts

    printed = interrupts.Tally()
    with open_map(map_id, pinned, name, read_only=True) as m, \
            interrupts.stopping(lambda: f"{printed.applied} outer entries printed"):
        _require_maps_of_maps(m)
        nested.dump(m, output, pipeline.stdout(), batch_size=batch_size, decode=decode,
                    tally=printed)
