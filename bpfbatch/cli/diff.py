"""``diff``: two maps, a map and a file, or two files, compared by key (see
:mod:`bpfbatch.compare`).

Its exit status is diff(1)'s: 0 the two hold the same, 1 they differ, 2 trouble — a usage
error as everywhere, but a runtime error (no such map, a bad line) too, since 1 already
means "they differ" (:data:`.options.RUNTIME_STATUS`). Signals as everywhere: one line, 128
+ the signal.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import interrupts
from ..errors import InputError
from . import complete, options
from .options import DEFAULT_BATCH, DIFF_FORMATS, INPUT_FORMATS, say
from .typed import BatchSize

commands = typer.Typer()

_SIDES = "A B: each a map (id N, pinned PATH, name NAME) or a file (JSONL, JSON, CSV, " \
         "bpftool's JSON, Parquet, Arrow; '-' is stdin)."


@commands.command("diff")
def diff(
    sides: Annotated[list[str], typer.Argument(metavar="A B", help=_SIDES,
                                               autocompletion=complete.map_words)],
    output: Annotated[str, typer.Option("-o", "--output", help=f"{DIFF_FORMATS}.",
                                        autocompletion=complete.diff_formats)] = "table",
    decode: Annotated[Optional[list[str]], typer.Option(
        "--decode", metavar="FIELD=KIND", autocompletion=complete.decoders,
        help="Read the files and show the changes with FIELD as KIND (as dump's --decode). "
             "Repeatable.")] = None,
    fmt: Annotated[Optional[str], typer.Option(
        "--format", autocompletion=complete.input_formats,
        help=f"The files' format: {INPUT_FORMATS} (default: from the name, else the "
             "content).")] = None,
    like: Annotated[Optional[str], typer.Option(
        "--like", metavar="MAP", autocompletion=complete.any_map,
        help="Two files: the map whose layout they hold (an id, a pinned path or a "
             "name).")] = None,
    against: Annotated[Optional[str], typer.Option(
        "--against", metavar="FILE", help="Check the map A against the contents FILE "
        "desires: what would have to be added, deleted, updated.")] = None,
    sum_cpus: Annotated[bool, typer.Option(
        "--sum", help="Per-CPU maps: compare each key's value summed over the CPUs (integer "
        "fields, as dump --sum shows them); a file holds such sums or per-CPU values, which "
        "are summed.")] = False,
    batch_size: BatchSize = DEFAULT_BATCH,
) -> int:
    """Compare two maps or files by key: added, removed, changed fields (exit 0 same, 1
    differ, 2 trouble, like diff(1)).

    A and B are read with the same view as dump (--decode and the automatic decoders): a
    key or value compares equal whatever form each side wrote it in. Maps are read as dump
    reads them, not as an atomic snapshot.
    """
    options.RUNTIME_STATUS = 2  # first: 1 is "they differ"
    from ..compare import diff as compare, render
    from ..map.cursor import check_batch_size

    check_batch_size(batch_size)
    if output not in render.FORMATS:
        raise InputError(f"unknown format '{output}' (use {', '.join(render.FORMATS)})",
                         obj="--output")
    specs = options.map_words(sides, "A B")
    if against is not None:
        if len(specs) != 1:
            raise InputError("--against takes one map, A", obj="A")
        if sum_cpus:
            raise InputError("--against checks what a load would write, CPU by CPU; a sum "
                             "is not loaded", obj="--sum")
        specs.append(("file", against))
    elif len(specs) != 2:
        raise InputError(f"expected two sides, got {len(specs)}", obj="A B")
    if like is not None and any(kind != "file" for kind, _ in specs):
        raise InputError("only two files need a map's layout: a map side gives it",
                         obj="--like")
    written = interrupts.Tally()
    total = []
    with interrupts.stopping(lambda: f"{written.applied} of {total[0]} changes written"
                             if total else "0 changes written, still comparing"):
        opened = []
        try:
            for kind, name in specs:
                opened.append(_open((kind, name)) if kind != "file" else name)
            if like is not None:
                opened.append(_open(_like(like)))
            d = compare(*opened[:2], decode=decode, fmt=fmt,
                        like=opened[2] if like is not None else None, batch_size=batch_size,
                        sum_cpus=sum_cpus)
        finally:
            for side in opened:
                if not isinstance(side, str):
                    side.close()
        total.append(len(d))
        _write(d, output, against is not None, written)
    say(render.summary(d, against is not None))
    return 1 if d else 0


def _like(text: str) -> tuple[str, str]:
    """``--like``'s one token: a map id (digits), a pinned path (with a ``/``), a name."""
    return ("id" if text.isdigit() else "pinned" if "/" in text else "name"), text


def _open(word: tuple[str, str]):
    from ..api import Map

    return Map.open(**options.map_address(word), read_only=True, **options.TYPES)


def _write(d, output: str, against: bool, written: interrupts.Tally) -> None:
    """The output, each piece whole: a signal lands between two lines (json: before or
    after the one document)."""
    from ..compare import render
    from ..formats.pipeline import stdout

    out = stdout()
    if output == "json":
        text = render.json_document(d, against)
        with interrupts.deferred():
            out.write(text.encode())
            written.applied = len(d)
        return
    pieces = render.jsonl(d, against) if output == "jsonl" else render.table(d, against)
    lines = []
    for piece in pieces:
        lines.append(piece)
        if len(lines) == 1024 or output == "table":
            _flush(out, lines, written, output)
    _flush(out, lines, written, output)
    written.applied = len(d)


def _flush(out, lines: list[str], written: interrupts.Tally, output: str) -> None:
    if not lines:
        return
    with interrupts.deferred():
        out.write("".join(lines).encode())
        if output == "jsonl":
            written.applied += len(lines)
        lines.clear()
