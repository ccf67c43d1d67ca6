"""Write commands: ``load``, ``delete``, ``clear``, ``drain``.

Thin: open the map, read the input (all of it, before the first syscall), call
:mod:`bpfbatch.map.whole`, report. Data goes to stdout; the one-line summaries go to stderr.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Optional

import typer

from .._sys import abi
from ..errors import BpfBatchError, InputError
from ..map import writes
from ..map.cursor import check_batch_size
from .progress import counted, progress
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
    say,
)

commands = typer.Typer()

InputFile = Annotated[str, typer.Argument(help="Input file; '-' reads stdin.")]
InputFormat = Annotated[Optional[str], typer.Option(
    "--format", help="jsonl, json, csv or bpftool-json (default: from the file name, else jsonl).")]



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
    decode: Decode = None,
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
    with open_map(map_id, pinned, name, read_only=False) as m:
        with progress(f"{m.info.label} reading {file}", "records"):
            records = read.read_records(file, m.info, fmt=fmt, codecs=_codecs(m.info, decode))
        try:
            with progress(f"{m.info.label} loading {records.count} records", ""):
                result = whole.load(m, records.keys, records.values, records.count, only=only,
                                    per_key=per_key, batch_size=batch_size)
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

    with open_map(map_id, pinned, name, read_only=False) as m:
        records = read.read_records(file, m.info, fmt=fmt, with_values=False)
        result = writes.delete(m, records.keys, records.count, batch_size=batch_size)
    say(f"{m.info.label}: {result.deleted} entries deleted, {result.missing} not found")


@commands.command("clear")
def clear(
    map_id: MapId = None, pinned: Pinned = None, name: Name = None,
    batch_size: BatchSize = DEFAULT_BATCH,
) -> None:
    """Remove every element (arrays: set every element to zero)."""
    check_batch_size(batch_size)
    from ..map import whole

    with open_map(map_id, pinned, name, read_only=False) as m, \
            progress(f"{m.info.label} clearing", ""):
        removed = whole.clear(m, batch_size=batch_size)
    verb = "zeroed" if m.info.type in abi.ELEMENTS_ALWAYS_EXIST else "removed"
    say(f"{m.info.label}: {removed} entries {verb}")


@commands.command("drain")
def drain(
    map_id: MapId = None, pinned: Pinned = None, name: Name = None,
    output: Output = "json",
    batch_size: BatchSize = DEFAULT_BATCH,
    decode: Decode = None,
) -> None:
    """Print and delete every element (LOOKUP_AND_DELETE). Each batch is written and flushed
    before the next is taken; if the output fails (closed pipe, full disk) the batch in hand
    is put back into the map and the command fails saying so."""
    check_batch_size(batch_size)
    from ..map import whole
    from ..map.whole import DrainError
    check_output(output)
    from ..records import pipeline

    with open_map(map_id, pinned, name, read_only=False) as m:
        # Flushed per batch: the drain deletes the next batch only once this one is out.
        out = pipeline.Output(output, m.info, sys.stdout.buffer, flush_each=True,
                              decode=decode or [])
        try:
            with progress(f"{m.info.label} draining") as advance:
                result = whole.drain(m, counted(out.write, advance), batch_size=batch_size)
            out.close()
        except DrainError:
            _abandon_stdout()
            raise
        except OSError as exc:  # the trailer (closing ']') could not be written
            _abandon_stdout()
            raise BpfBatchError(f"output failed after every entry was delivered: {exc.strerror}",
                                obj=m.info.label, errno=exc.errno) from None
    say(f"{m.info.label}: {result.delivered} entries drained")


def _codecs(info, decode: list[str] | None):
    """The codecs that read what ``dump`` wrote with the same ``--decode`` options."""
    from ..records.codec import map_codecs
    from ..records.decoding import decoded_codecs

    return decoded_codecs(*map_codecs(info), decode or [])


def _abandon_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush of what is left in its
    buffer cannot fail again (and print a second error) after ours."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
