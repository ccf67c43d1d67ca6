"""``migrate``: a map's records into a map of a new layout (:mod:`bpfbatch.migrate`).

Thin: read FROM and TO in bpftool's words, open them, call :func:`bpfbatch.migrate.migrate`,
print the plan or say what was done.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import interrupts
from ..errors import InputError, Interrupted
from ..map.cursor import check_batch_size
from . import complete
from .options import DEFAULT_BATCH, INPUT_FORMATS, TYPES, map_address, map_words, say
from .typed import BatchSize

commands = typer.Typer()

Words = Annotated[list[str], typer.Argument(
    metavar="FROM TO", autocompletion=complete.map_words, help="Each a map in bpftool's words: id N, pinned PATH or name NAME; "
                            "FROM may also be a file of records (JSONL, JSON, CSV, bpftool "
                            "JSON, Parquet, Arrow) whose layout --btf OBJ --key-type T "
                            "--value-type T give (default: TO's). Those types are FROM's, "
                            "never TO's.")]


@commands.command("migrate")
def migrate(
    words: Words,
    plan: Annotated[bool, typer.Option(
        "--plan", help="Print the layout diff and each field's conversion, after the "
                       "same checks as a migration; write nothing.")] = False,
    rename: Annotated[Optional[list[str]], typer.Option(
        "--rename", metavar="OLD=NEW", help="FROM's field OLD is TO's NEW (paths as dump "
                                            "-o csv names columns: value.first_seen_ns; a "
                                            "bare name is a value field). Repeatable.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option(
        "--set", metavar="FIELD=VALUE", help="TO's FIELD is VALUE in every entry (as dump -o "
                                             "jsonl prints it); other new fields are 0. "
                                             "Repeatable.")] = None,
    sum_: Annotated[bool, typer.Option(
        "--sum", help="A per-CPU FROM into a plain TO: each integer the sum over the "
                      "CPUs.")] = False,
    catch_up: Annotated[Optional[int], typer.Option(
        "--catch-up", metavar="[N]", min=1,
        help="After the copy, up to N passes (default 10) copying what changed in FROM "
             "since the last (new, changed, deleted keys), until one finds nothing.")] = None,
    swap_pin: Annotated[Optional[str], typer.Option(
        "--swap-pin", metavar="PATH", help="Then rename TO's pin over PATH (FROM's pin, "
                                           "checked before anything is written) in one "
                                           "step: the next program opening PATH gets "
                                           "TO.")] = None,
    batch_size: BatchSize = DEFAULT_BATCH,
    fmt: Annotated[Optional[str], typer.Option(
        "--format", metavar="FMT", autocompletion=complete.input_formats,
        help=f"A file FROM's format: {INPUT_FORMATS} (default: from its name).")] = None,
    decode: Annotated[Optional[list[str]], typer.Option(
        "--decode", metavar="FIELD=KIND", autocompletion=complete.decoders, help="The --decode options dump wrote a file FROM "
                                               "with (ipv4, be16, hex, ...): read back with "
                                               "them. Repeatable.")] = None,
) -> None:
    """Move a map's records into a map of a new layout, field by field by name, and catch up
    with what changes meanwhile.

    Fields are matched by name through nested structs, unions and arrays, keys too.
    Integers widen with FROM's signedness and narrow only when every value fits; enums go by
    enumerator name; arrays and char arrays resize when nothing is cut; new fields are 0 or
    --set; removed fields are listed. Every record is converted before the first write: one
    that cannot be is an error naming its key, and nothing is written. TO must be empty (an
    array: all zero) and hold FROM's entries (max_entries).
    """
    check_batch_size(batch_size)
    source, target = _ends(words)
    from ..migrate.copy import Counts

    counts = Counts(swap_pin=swap_pin)
    try:  # to the last line: a signal after the swap still says it happened
        result, src, dst = _run(counts, source, target, plan=plan, rename=rename, set_=set_,
                                sum_=sum_, catch_up=catch_up, swap_pin=swap_pin,
                                batch_size=batch_size, fmt=fmt, decode=decode)
        if plan:
            print(f"FROM {_label(source, src)}\nTO   {dst.info.label}\n{result.plan}", end="")
            return
        said = f"{dst.info.label}: {counts.said()}"
        if result.removed:
            said += f"; removed: {', '.join(result.removed)}"
        say(said)
    except Interrupted as exc:  # the stop line says what the swap path names, too
        exc.message = f"after {counts.said()}"
        raise


def _run(counts, source: tuple[str, str], target: tuple[str, str], *, plan: bool, rename,
         set_, sum_: bool, catch_up: int | None, swap_pin: str | None, batch_size: int,
         fmt: str | None, decode: list[str] | None):
    """Open FROM and TO, migrate; ``(result, src, dst)``. An error says what was written
    into TO before it (``counts``)."""
    from .. import migrate as migration
    from ..api import Map
    from ..migrate import source as sources

    with interrupts.stopping(counts.done, counts), \
            Map.open(**map_address(target), read_only=plan) as dst:
        if source[0] == "file":
            src = sources.file_source(source[1], dst.info, **TYPES, fmt=fmt, decode=decode,
                                      percpu=sum_ and not dst.info.percpu)
            opened = None
        elif fmt is not None or decode:
            raise InputError("reads a file FROM (as dump wrote it); FROM is a map",
                             obj="--format" if fmt is not None else "--decode")
        else:
            opened = src = Map.open(**map_address(source), read_only=True, **TYPES)
        try:
            result = migration.migrate(
                src, dst, plan_only=plan, rename=rename or (), set=set_ or (), sum=sum_,
                catch_up=catch_up or 0, swap_pin=swap_pin, batch_size=batch_size,
                dst_pin=target[1] if target[0] == "pinned" else None, counts=counts)
        finally:
            if opened is not None:
                opened.close()
    return result, src, dst


def _label(source: tuple[str, str], src) -> str:
    return source[1] if source[0] == "file" else src.info.label


def _ends(words: list[str]) -> tuple[tuple[str, str], tuple[str, str]]:
    """FROM and TO of ``words`` (:func:`.options.map_words`): TO is a map, FROM a map or a
    file."""
    ends = map_words(words, "FROM TO")
    if len(ends) != 2:
        raise InputError(f"expected FROM and TO, each id N, pinned PATH or name NAME (FROM "
                         f"may be a file), got {' '.join(words)!r}", obj="FROM TO")
    if ends[1][0] == "file":
        raise InputError(f"TO is a map (id N, pinned PATH or name NAME), not {ends[1][1]!r}",
                         obj="FROM TO")
    return ends[0], ends[1]
