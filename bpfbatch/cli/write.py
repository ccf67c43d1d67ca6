"""Write commands: ``delete``, ``clear``, ``drain`` (``load`` is :mod:`.load`).

Thin: open the map, read the input (all of it, before the first syscall), call
:mod:`bpfbatch.map.whole`, report. Data goes to stdout; the one-line summaries go to stderr.
"""

from __future__ import annotations

import contextlib
from typing import Annotated

import typer

from .. import interrupts
from .._sys import abi
from ..errors import BpfBatchError
from ..interrupts import Tally
from ..map import cursor, writes
from ..map.cursor import check_batch_size
from ..map.handle import require
from .progress import progress
from .options import DEFAULT_BATCH, check_output, open_map, record_codecs, say
from .typed import BatchSize, Decode, InputFormat, MapId, Name, Output, Pinned

commands = typer.Typer()


@commands.command("delete")
def delete(
    file: Annotated[list[str], typer.Argument(
        help="Input file; '-' reads stdin. Or one key in bpftool's words: key [hex] BYTES.",
        metavar="FILE")],
    map_id: MapId = None, pinned: Pinned = None, name: Name = None,
    fmt: InputFormat = None,
    batch_size: BatchSize = DEFAULT_BATCH,
    decode: Decode = None,
) -> None:
    """Delete the keys of FILE's records (values, if present, are ignored: a dump works).
    Keys are read as load reads them (decoded fields as dump shows them, or as stored; the
    same --decode as the dump's). Keys not in the map are skipped and counted. 'delete MAP
    key [hex] BYTES' deletes one key, as bpftool map delete does (a missing key is an error,
    as there)."""
    check_batch_size(batch_size)
    from ..formats import read
    from .bpftool import uses_keywords
    from .elements import delete_element

    if uses_keywords(file, "key"):
        return delete_element(file, map_id, pinned, name)
    if len(file) != 1:
        from .app import usage_error

        raise usage_error(f"expected one FILE, or bpftool's key [hex] BYTES, got {len(file)} "
                          "words")
    file = file[0]

    tally = Tally()
    with interrupts.stopping(lambda: f"{tally.applied} entries deleted", tally), \
            open_map(map_id, pinned, name, read_only=False) as m:
        require(m.info, "delete")
        records = read.read_records(file, m.info, fmt=fmt, with_values=False,
                                    codecs=record_codecs(m.info, decode))
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
    many were delivered and put back. A signal stops it after the batch in hand, and the
    output is closed (JSON's ']'): a whole document of what was delivered. SIGKILL
    can lose at most one batch: --batch-size bounds it."""
    check_batch_size(batch_size)
    check_output(output)
    from ..errors import Interrupted
    from ..map import whole
    from ..formats import pipeline

    with interrupts.stopping(lambda: "0 entries delivered"):
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
                # The trailer, as dump writes it, so that what was delivered is a whole
                # document (JSON's "]", Arrow's end of stream); a second signal meanwhile
                # changes nothing of what the first one stopped.
                with contextlib.suppress(BpfBatchError, Interrupted):
                    delivery.close()
                exc.message = (f"after {delivery.delivered} entries delivered, "
                               f"{_count(m)} left in the map")
                raise
    say(f"{m.info.label}: {delivery.delivered} entries drained")


def _count(m) -> int:
    with contextlib.suppress(BpfBatchError):
        return sum(batch.count for batch in cursor.BatchCursor(m))
    return -1
