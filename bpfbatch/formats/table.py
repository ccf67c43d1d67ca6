"""The aligned table of ``dump -o table`` and ``list``: tabulate's ``simple`` format.

What both print is ``tabulate(rows, headers, tablefmt="simple", disable_numparse=True,
colalign=...)``, and that is what :func:`simple` returns. Importing tabulate (and the html
entities, textwrap and wcwidth it brings) costs ~4 ms of CPU time, a sixth of what a ``dump
-o table`` of a small map may spend above the bare interpreter to keep its start-up budget
(README, "Start-up"); so the tables nearly every map makes — one-line cells of printable
ASCII, nothing tabulate would strip, pad or measure otherwise — are drawn here, by the rules
tabulate follows for them, and any other table by tabulate itself.
``tests/unit/test_table.py`` holds the two to the same output over generated tables.
"""

from __future__ import annotations

from collections.abc import Sequence


def simple(rows: Sequence[Sequence], headers: Sequence[str], right: Sequence[bool]) -> str:
    """``rows`` under ``headers``, column ``i`` right-aligned where ``right[i]``: exactly
    tabulate's ``simple`` table with ``disable_numparse=True`` (no trailing newline)."""
    drawn = _draw(rows, headers, right)
    if drawn is not None:
        return drawn
    from tabulate import tabulate

    return tabulate(rows, headers=list(headers), tablefmt="simple", disable_numparse=True,
                    colalign=["right" if r else "left" for r in right] if rows else None)


def _draw(rows, headers, right) -> str | None:
    """tabulate's rules for one-line printable-ASCII text: every cell is ``f"{value}"``;
    a column is as wide as its widest cell, or its header plus 2; cells and headers are
    padded to it on their column's side and joined by two spaces; each line loses its
    trailing spaces; a line of dashes under the header. ``None`` for any table outside
    them (no rows, ragged rows, ``None`` cells, text tabulate strips or measures
    otherwise)."""
    if not rows or any(len(row) != len(headers) for row in rows):
        return None
    texts = [[f"{cell}" for cell in row] for row in rows]
    if any(cell is None for row in rows for cell in row) or not all(
            _plain(text) and text == text.strip() for row in texts for text in row) or not all(
            _plain(header) for header in headers):
        return None
    widths = [max(len(header) + 2, *(len(row[i]) for row in texts))
              for i, header in enumerate(headers)]
    dashes = "  ".join("-" * width for width in widths)
    return "\n".join([aligned_row(headers, widths, right), dashes,
                      *(aligned_row(cells, widths, right) for cells in texts)])


def aligned_row(cells, widths: Sequence[int], right: Sequence[bool]) -> str:
    """One row of the table: each cell's text padded to its column's width on its side,
    joined by two spaces, without the trailing spaces (also the rows of later batches,
    which keep the first batch's widths)."""
    return "  ".join(f"{cell}".rjust(width) if r else f"{cell}".ljust(width)
                     for cell, width, r in zip(cells, widths, right)).rstrip()


def _plain(text: str) -> bool:
    return text.isascii() and text.isprintable()
