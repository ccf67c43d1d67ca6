"""Copy FROM into TO, then catch up with what changed in FROM meanwhile.

The first copy reads FROM whole, converts every record (:mod:`.convert`: all of them before
the first write, so a record that cannot be converted writes nothing) and writes them with
the batch update. A catch-up pass reads FROM again and compares it with what the previous
read saw, key by key on the raw bytes: keys that appeared or whose value changed are
converted and written, keys that disappeared are deleted from TO. Passes go on until one
finds nothing, or ``limit`` passes ran: then ``moving`` says how many keys the last one
still found changed. Updates that land in FROM after the last pass *began reading* may be
missing from TO: that read's start (``last_read_ns``, CLOCK_MONOTONIC) opens the window that
a pin swap closes.

A read of a map is not an atomic snapshot (a hash map is read bucket by bucket): a write
that completes before a pass starts reading is seen by that pass, one that lands during the
pass may or may not be, and is then seen by the next.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ..errors import InputError
from ..interrupts import Tally
from ..map import whole, writes
from .convert import ConversionError, Layout, convert
from .plan import SidePlan
from .source import Source

__all__ = ["Counts", "Copier"]


@dataclasses.dataclass
class Counts:
    """What a migration did, as it goes (an interrupted one says what it had done)."""

    #: When the last read of FROM began (CLOCK_MONOTONIC ns): later updates may be missing.
    last_read_ns: int | None = None
    #: From then to the pin swap (``None``: no swap): the window of updates a swap can lose.
    window_ns: int | None = None
    #: Entries written by the first copy.
    copied: int = 0
    #: Entries the catch-up passes wrote into TO, and deleted from it.
    updated: int = 0
    deleted: int = 0
    #: Catch-up passes run, and the keys the last one still found changed (0: FROM was
    #: still).
    passes: int = 0
    moving: int = 0

    def said(self) -> str:
        """The counts as the command's summary and its stop line say them."""
        text = f"{self.copied} entries copied"
        if self.passes:
            text += (f", {self.passes} catch-up pass{'es' if self.passes > 1 else ''} "
                     f"({self.updated} updated, {self.deleted} deleted, {self.moving} still "
                     "changing at the last)")
        return text


@dataclasses.dataclass
class Sides:
    """Both sides' plans, layouts and templates (zeros and ``--set`` values)."""

    key: SidePlan
    value: SidePlan
    layouts: tuple[Layout, Layout, Layout, Layout]  # key in, key out, value in, value out
    templates: tuple[bytes, bytes]
    summed: bool


class Copier:
    """Moves FROM's records into TO (``target``), converted by ``sides``."""

    def __init__(self, source: Source, target, sides: Sides, *, batch_size: int,
                 tally: Tally):
        self.source, self.target, self.sides = source, target, sides
        self.batch_size, self.tally = batch_size, tally
        self.counts = Counts()
        self._seen: tuple[np.ndarray, np.ndarray] | None = None

    def convert(self, keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """TO's rows of FROM's ``keys`` and ``values``; an error names the first key that
        cannot be converted, or two keys that would become one."""
        s = self.sides
        _, _, v_in, v_out = s.layouts
        out_keys = self.convert_keys(keys)
        try:
            out_values = convert(s.value, values, v_in, v_out, s.templates[1], summed=s.summed)
        except ConversionError as exc:
            exc.obj = self.source.where(exc.row, bytes(keys[exc.row]))
            raise
        if not s.key.whole_copy:
            self._distinct(keys, out_keys)
        return out_keys, out_values

    def convert_keys(self, keys: np.ndarray) -> np.ndarray:
        s = self.sides
        try:
            return convert(s.key, keys, s.layouts[0], s.layouts[1], s.templates[0])
        except ConversionError as exc:
            exc.obj = self.source.where(exc.row, bytes(keys[exc.row]))
            raise

    def _distinct(self, keys: np.ndarray, out_keys: np.ndarray) -> None:
        rows = _scalars(out_keys)
        _, first, inverse, counts = np.unique(rows, return_index=True, return_inverse=True,
                                              return_counts=True)
        twice = np.flatnonzero(counts[inverse] > 1)
        if len(twice):
            a, b = (int(i) for i in np.flatnonzero(inverse == inverse[twice[0]])[:2])
            raise InputError(f"becomes the same key as {self.source.where(b, bytes(keys[b]))} "
                             "in TO (the key fields that told them apart are removed or "
                             "cut)", obj=self.source.where(a, bytes(keys[a])))

    def first(self) -> None:
        """Read FROM, convert everything, write it into TO."""
        self.counts.last_read_ns = time.monotonic_ns()
        keys, values = self.source.read(self.batch_size)
        out_keys, out_values = self.convert(keys, values)
        self._write(out_keys, out_values)
        self.counts.copied = len(keys)
        self._seen = (keys, values)

    def catch_up(self, limit: int) -> None:
        """Up to ``limit`` passes copying what changed in FROM since the previous read."""
        if not self.source.live:
            raise InputError("a file does not change: --catch-up needs FROM to be a map",
                             obj="--catch-up")
        for _ in range(limit):
            started = time.monotonic_ns()
            keys, values = self.source.read(self.batch_size)
            previous = self._seen[0]
            changed, gone = _changes(self._seen, keys, values)
            self.counts.passes += 1
            self.counts.last_read_ns = started
            self.counts.moving = len(changed) + len(gone)
            self._seen = (keys, values)
            if not self.counts.moving:
                return
            if len(changed):
                out_keys, out_values = self.convert(keys[changed], values[changed])
                self._write(out_keys, out_values)
                self.counts.updated += len(changed)
            if len(gone):
                out_keys = self.convert_keys(previous[gone])
                deleted = writes.delete(self.target, out_keys, len(out_keys),
                                        batch_size=self.batch_size).deleted
                self.counts.deleted += deleted

    def _write(self, keys: np.ndarray, values: np.ndarray) -> None:
        whole.load(self.target, keys, values, len(keys), batch_size=self.batch_size,
                   tally=self.tally, jobs=None)


def _scalars(rows: np.ndarray) -> np.ndarray:
    """One comparable scalar per byte row (a ``width``-byte void)."""
    return np.ascontiguousarray(rows).view(np.dtype((np.void, rows.shape[1]))).reshape(len(rows))


def _changes(seen, keys: np.ndarray, values: np.ndarray):
    """Rows of ``keys`` new or changed since ``seen`` (the previous read), and rows of the
    previous read whose keys are gone."""
    old_keys, old_values = seen
    old, new = _scalars(old_keys), _scalars(keys)
    order = np.argsort(old, kind="stable")
    ordered = old[order]
    pos = np.searchsorted(ordered, new)
    found = pos < len(ordered)
    found[found] = ordered[pos[found]] == new[found]
    match = order[pos[found]]
    differs = np.ones(len(keys), bool)
    differs[found] = (values[found] != old_values[match]).any(axis=1)
    kept = np.zeros(len(old_keys), bool)
    kept[match] = True
    return np.flatnonzero(differs), np.flatnonzero(~kept)
