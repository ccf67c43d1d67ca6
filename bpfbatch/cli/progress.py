"""Progress on stderr for long commands, never mixed into the records they print.

Shown only when stderr is a terminal, ``-q`` is not given, and stdout is not that same
terminal: rows written to the terminal between two refreshes of a live display would be
broken by it (``⠙ map 1906: 16356 elements 0:00:00167776794 …``), and rows on the terminal
are progress enough. Transient: gone when the command ends. rich is imported only when shown.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator

from . import options


def wanted() -> bool:
    """Whether a live display may be drawn on stderr now."""
    if options.QUIET or not sys.stderr.isatty():
        return False
    if not sys.stdout.isatty():
        return True
    out, err = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
    return (out.st_rdev, out.st_ino) != (err.st_rdev, err.st_ino)


@contextlib.contextmanager
def progress(label: str, what: str = "elements", total: int | None = None
             ) -> Iterator[Callable[[int], None]]:
    """A live counter ``label: N what`` (``N/TOTAL`` with a bar when ``total`` is known);
    yields ``advance(n)``. Nothing at all when :func:`wanted` says no."""
    if not wanted():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                               TextColumn, TimeElapsedColumn)

    columns = [SpinnerColumn(), TextColumn("{task.description}:")]
    columns += [BarColumn(), MofNCompleteColumn()] if total else \
        [TextColumn("{task.completed}")]
    columns += [TextColumn(what), TimeElapsedColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


def counted(sink: Callable, advance: Callable[[int], None]) -> Callable:
    """``sink`` (called with a batch) that also advances the progress by the batch's count."""
    def write(batch) -> None:
        sink(batch)
        advance(batch.count)
    return write
