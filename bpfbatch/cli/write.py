"""Write commands: ``load``, ``delete``, ``clear``, ``drain``.

Thin: open the map, read the input (all of it, before the first syscall), call
:mod:`bpfbatch.map.whole`, report. Data goes to stdout; the one-line summaries go to stderr.
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Optional

import typer

from .. import interrupts
from .._sys import abi
from ..errors import BpfBatchError, InputError
from ..interrupts import Tally
from ..map import cursor, writes
from ..map.cursor import check_batch_size
from ..map.handle import require
from .progress import progress
from .options import DEFAULT_BATCH, check_output, open_map, record_codecs, say
from .typed import BatchSize, Decode, MapId, Name, Output, Pinned

commands = typer.Typer()

InputFile = Annotated[str, typer.Argument(help="Input file; '-' reads stdin.")]
InputFormat = Annotated[Optional[str], typer.Option(
    "--format", help="jsonl, json, csv, bpftool-json, parquet or arrow (default: from the "
                     "file name, else jsonl).")]



@commands.command("load")
def load(
    file: InputFile,
    map_id: MapId = None, pinned: Pinned = None, name: Name = None,
    fmt: InputFormat = None,
    batch_size: BatchSize = DEFAULT_BATCH,
    if_absent: Annotated[bool, typer.Option(
        "--if-absent", help="Only keys not in the map (BPF_NOEXIST semantics).")] = False,
    if_present: Annotated[bool, typer.Option(
        "--if-present", help="Only keys already in the map (BPF_EXIST semantics).")] = False,
    per_key: Annotated[bool, typer.Option(
        "--per-key", help="With --if-absent/--if-present: one exact syscall per record "
                          "instead of a racy key snapshot plus batches.")] = False,
    default_zero: Annotated[bool, typer.Option(
        "--default-zero", help="A struct field a record leaves out is 0 (without it, an "
                               "error naming file:line and the field).")] = False,
    decode: Decode = None,
    jobs: Annotated[Optional[int], typer.Option(
        "--jobs", "-j", min=1, help="Writers side by side for a large load into a hash or "
                                    "array map (default: one per CPU, at most 4). With more "
                                    "than one, the records a failing load applied are not "
                                    "the first ones of the file.")] = None,
) -> None:
    """Write records from FILE into the map in batches.

    The whole input is parsed and encoded first: bad input names file:line and changes
    nothing. The kernel's batch update has no BPF_NOEXIST/BPF_EXIST, so --if-absent and
    --if-present snapshot the map's keys with one pass and batch-write the records that pass
    the test; a key another writer creates or deletes in between is overwritten (re-created).
    --per-key closes that race at one syscall per record.
    """
    check_batch_size(batch_size)
    from ..map import whole
    from ..map.whole import Existing, LoadError, RecordError
    from ..records import read

    if if_absent and if_present:
        raise InputError("choose one of --if-absent and --if-present", obj="--if-absent")
    if per_key and not (if_absent or if_present):
        raise InputError("only applies with --if-absent or --if-present", obj="--per-key")
    only = Existing.ABSENT if if_absent else Existing.PRESENT if if_present else Existing.ANY
    tally = Tally()
    with interrupts.stopping(lambda: f"{tally.applied} entries loaded", tally), \
            open_map(map_id, pinned, name, read_only=False) as m:
        require(m.info, "load")  # before reading the input: its errors would hide the reason
        with progress(f"{m.info.label} reading {file}", "records"):
            codecs = record_codecs(m.info, decode, default_zero=default_zero)
            records = read.read_records(file, m.info, fmt=fmt, codecs=codecs)
        try:
            with progress(f"{m.info.label} loading {records.count} records", ""):
                result = whole.load(m, records.keys, records.values, records.count, only=only,
                                    per_key=per_key, batch_size=batch_size, tally=tally,
                                    jobs=jobs)
        except LoadError as exc:
            exc.message += f" (record at {records.where(exc.index)})"
            raise
        except RecordError as exc:
            exc.obj = records.where(exc.index)
            raise
    skipped = f", {result.skipped} skipped" if only is not Existing.ANY else ""
    say(f"{m.info.label}: {result.applied} entries loaded{skipped}")


@commands.command("delete")
def delete(
    file: InputFile,
    map_id: MapId = None, pinned: Pinned = None, name: Name = None,
    fmt: InputFormat = None,
    batch_size: BatchSize = DEFAULT_BATCH,
) -> None:
    """Delete the keys of FILE's records (values, if present, are ignored: a dump works).
    Keys not in the map are skipped and counted."""
    check_batch_size(batch_size)
    from ..records import read

    tally = Tally()
    with interrupts.stopping(lambda: f"{tally.applied} entries deleted", tally), \
            open_map(map_id, pinned, name, read_only=False) as m:
        require(m.info, "delete")
        records = read.read_records(file, m.info, fmt=fmt, with_values=False)
        result = writes.delete(m, records.keys, records.count, batch_size=batch_size,
                               tally=tally)
    if m.info.type == abi.MapType.XSKMAP:
        say(_slots_emptied(m.info, result.deleted))
        return
    say(f"{m.info.label}: {result.deleted} entries deleted, {result.missing} not found")


@commands.command("clear")
def clear(
    map_id: MapId = None, pinned: Pinned = None, name: Name = None,
    batch_size: BatchSize = DEFAULT_BATCH,
) -> None:
    """Remove every element (arrays: set every element to zero)."""
    check_batch_size(batch_size)
    from ..map import whole

    tally = Tally()
    with interrupts.stopping(lambda: f"{tally.applied} entries removed", tally), \
            open_map(map_id, pinned, name, read_only=False) as m, \
            progress(f"{m.info.label} clearing", ""):
        removed = whole.clear(m, batch_size=batch_size, tally=tally)
    if m.info.type == abi.MapType.XSKMAP:
        say(_slots_emptied(m.info, removed))
        return
    verb = "zeroed" if m.info.type in abi.ELEMENTS_ALWAYS_EXIST else "removed"
    say(f"{m.info.label}: {removed} entries {verb}")


def _slots_emptied(info, slots: int) -> str:
    """What a delete or clear of an xskmap did: its slots cannot be looked up, so whether
    one held a socket is unknown; say how many were emptied."""
    return f"{info.label}: {slots} slots emptied (an xskmap's slots cannot be read)"


@commands.command("drain")
def drain(
    map_id: MapId = None, pinned: Pinned = None, name: Name = None,
    output: Output = "json",
    batch_size: BatchSize = DEFAULT_BATCH,
    fsync: Annotated[bool, typer.Option(
        "--fsync", help="A batch counts as delivered only once it is on disk.")] = False,
    decode: Decode = None,
) -> None:
    """Print and delete every element (LOOKUP_AND_DELETE). Nothing is deleted that is not
    delivered or put back: each batch is taken, written to the last byte (and with --fsync
    synced) with SIGINT/SIGTERM/SIGHUP deferred; if the output fails (closed pipe, full disk)
    the records not completely written go back into the map and the command fails saying how
    many were delivered and put back. A signal stops it after the batch in hand. SIGKILL
    can lose at most one batch: --batch-size bounds it."""
    check_batch_size(batch_size)
    check_output(output)
    from ..errors import Interrupted
    from ..map import whole
    from ..records import pipeline

    with interrupts.stopping(lambda: "0 entries delivered (before the map was opened)"):
        out = pipeline.stdout(fsync=fsync)
        with open_map(map_id, pinned, name, read_only=False) as m:
            delivery = pipeline.delivery(output, m.info, whole.restorer(m), out,
                                         decode=decode or [])
            try:
                with progress(f"{m.info.label} draining"):
                    delivery.drain(cursor.BatchCursor(m, delete=True, batch_size=batch_size))
                delivery.close()
            except Interrupted as exc:
                exc.obj = m.info.label
                exc.message = (f"after {delivery.delivered} entries delivered, "
                               f"{_count(m)} left in the map")
                raise
    say(f"{m.info.label}: {delivery.delivered} entries drained")


def _count(m) -> int:
    with contextlib.suppress(BpfBatchError):
        return sum(batch.count for batch in cursor.BatchCursor(m))
    return -1
