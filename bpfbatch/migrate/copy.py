"""Copy FROM into TO, then catch up with what changed in FROM meanwhile.

The first copy reads FROM whole, converts every record (:mod:`.convert`: all of them before
the first write, so a record that cannot be converted writes nothing) and writes them with
the batch update. A catch-up pass reads FROM again and compares it with what the previous
read saw, key by key: keys that appeared, or whose value changed in what TO gets of it (a
change of a removed field, or of padding, is none: a writer that keeps touching only those
does not keep the passes going), are converted, all of them before the pass writes
anything, and written; keys that disappeared are deleted from TO (an array's elements,
which always exist, zeroed as ``clear`` does), first, so that a TO as
full as FROM has room for the new ones. Passes go on until one finds nothing, or ``limit``
passes ran: then ``moving`` says how many keys the last one still found changed. Updates
that land in FROM after the last pass *began reading* may be missing from TO: that read's
start (``last_read_ns``, CLOCK_MONOTONIC) opens the window that a pin swap closes.

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
from .._sys.abi import ELEMENTS_ALWAYS_EXIST
from ..map import keyjoin, whole, writes
from .convert import ConversionError, Layout, convert
from .plan import SidePlan
from .source import Source

__all__ = ["Counts", "Copier"]


@dataclasses.dataclass
class Counts:
    """What a migration did, counted as it goes: each write and delete is counted in the
    critical section of the syscall that made it (:class:`~bpfbatch.interrupts.Tally`), and
    the swap is marked in the section that made it, so an interrupted migration's
    :meth:`said` is exactly what TO holds and what the path names."""

    #: When the last read of FROM began (CLOCK_MONOTONIC ns): later updates may be missing.
    last_read_ns: int | None = None
    #: From then to the pin swap (``None``: no swap): the window of updates a swap can lose.
    window_ns: int | None = None
    #: Catch-up passes run, and the keys the last one still found changed (0: FROM was
    #: still).
    passes: int = 0
    moving: int = 0
    #: The path ``--swap-pin`` names (``None``: no swap asked), and whether it names TO now.
    swap_pin: str | None = None
    swapped: bool = False
    _copied: Tally = dataclasses.field(default_factory=Tally, repr=False)
    _updated: Tally = dataclasses.field(default_factory=Tally, repr=False)
    _deleted: Tally = dataclasses.field(default_factory=Tally, repr=False)

    @property
    def copied(self) -> int:
        """Entries written by the first copy."""
        return self._copied.applied

    @property
    def updated(self) -> int:
        """Entries the catch-up passes wrote into TO."""
        return self._updated.applied

    @property
    def deleted(self) -> int:
        """Entries the catch-up passes deleted from TO."""
        return self._deleted.applied

    @property
    def applied(self) -> int:
        """Everything written into or deleted from TO (non-zero: TO is no longer as it was;
        :func:`bpfbatch.interrupts.stopping` then says what was done before an error)."""
        return self.copied + self.updated + self.deleted

    def done(self) -> str:
        """What was written into TO, as an error that stopped the migration says it (an
        error leaves the swap undone: it is the last step, and a failed one is undone)."""
        text = f"{self.copied} entries copied"
        if self.passes:
            text += (f", {self.passes} catch-up pass{'es' if self.passes > 1 else ''} "
                     f"({self.updated} updated, {self.deleted} deleted, {self.moving} still "
                     "changing at the last)")
        return text

    def said(self) -> str:
        """:meth:`done` and what the swap path names: the summary, and the stop line of an
        interrupted migration."""
        if self.swap_pin is None:
            return self.done()
        if not self.swapped:
            return f"{self.done()}; not swapped: {self.swap_pin} still names FROM"
        window = "" if self.window_ns is None else \
            f" {self.window_ns / 1e6:.1f} ms after the last read"
        return f"{self.done()}; pinned at {self.swap_pin}{window}"


@dataclasses.dataclass
class Sides:
    """Both sides' plans, layouts and templates (zeros and ``--set`` values)."""

    key: SidePlan
    value: SidePlan
    layouts: tuple[Layout, Layout, Layout, Layout]  # key in, key out, value in, value out
    templates: tuple[bytes, bytes]
    summed: bool


class Copier:
    """Moves FROM's records into TO (``target``), converted by ``sides``; ``counts`` says
    what it did, as it goes."""

    def __init__(self, source: Source, target, sides: Sides, *, batch_size: int,
                 counts: Counts):
        self.source, self.target, self.sides = source, target, sides
        self.batch_size, self.counts = batch_size, counts
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
        if not s.key.whole_copy or not self.source.live:  # a file may give a key twice
            self._distinct(keys, out_keys)
        return out_keys, out_values

    def convert_keys(self, keys: np.ndarray) -> np.ndarray:
        """TO's keys of FROM's ``keys`` (an error names the first that cannot be)."""
        s = self.sides
        try:
            return convert(s.key, keys, s.layouts[0], s.layouts[1], s.templates[0])
        except ConversionError as exc:
            exc.obj = self.source.where(exc.row, bytes(keys[exc.row]))
            raise

    def _distinct(self, keys: np.ndarray, out_keys: np.ndarray) -> None:
        twice = keyjoin.repeated(out_keys)
        if twice is not None:
            a, b = twice
            first, second = (self.source.where(row, bytes(keys[row])) for row in (a, b))
            why = "the file gives it twice" if (keys[a] == keys[b]).all() else \
                f"they differ only in padding, {keys[a].tobytes().hex()} and " \
                f"{keys[b].tobytes().hex()}, which TO's key does not keep" \
                if first == second else "the key fields that told them apart are removed, cut or --set"
            raise InputError(f"becomes the same key as {second} in TO ({why})", obj=first)

    def _fit(self, keys: np.ndarray, out_keys: np.ndarray, total: int) -> None:
        """Refuse, before writing them, records TO has no room for: an array's index past
        its ``max_entries`` (the kernel's E2BIG), more keys (``total``: FROM's, which TO is
        to mirror) than a hash map holds (E2BIG for a hash; an LRU map would evict some of
        them without a word)."""
        info = self.target.info
        if info.type in ELEMENTS_ALWAYS_EXIST:
            past = np.flatnonzero(out_keys.view("<u4")[:, 0] >= info.max_entries)
            if len(past):
                raise InputError(f"index {int(out_keys[past[0]].view('<u4')[0])} is past TO's "
                                 f"last (max_entries {info.max_entries})",
                                 obj=self.source.where(int(past[0]), bytes(keys[past[0]])))
        elif total > info.max_entries:
            raise InputError(f"holds at most {info.max_entries} entries (max_entries), FROM "
                             f"has {total}", obj=info.label)

    def first(self, *, write: bool = True) -> None:
        """Read FROM, convert everything, write it into TO (``write`` false: stop before the
        write, having met every refusal the copy would meet: ``--plan``)."""
        self.counts.last_read_ns = time.monotonic_ns()
        keys, values = self.source.read(self.batch_size)
        out_keys, out_values = self.convert(keys, values)
        self._fit(keys, out_keys, len(keys))
        if write:
            self._write(out_keys, out_values, self.counts._copied)
        self._seen = (keys, values)

    def catch_up(self, limit: int) -> None:
        """Up to ``limit`` passes copying what changed in FROM (a map) since the previous
        read."""
        for _ in range(limit):
            started = time.monotonic_ns()
            keys, values = self.source.read(self.batch_size)
            (old_keys, old_values), self._seen = self._seen, (keys, values)
            changed, was, gone = _changes((old_keys, old_values), keys, values)
            out_keys, out_values = self.convert(keys[changed], values[changed])
            known = np.flatnonzero(was >= 0)
            if len(known):  # a change TO does not see (a removed field, padding) is none
                _, before = self.convert(old_keys[was[known]], old_values[was[known]])
                keep = np.ones(len(changed), bool)
                keep[known[(before == out_values[known]).all(axis=1)]] = False
                changed, out_keys, out_values = changed[keep], out_keys[keep], out_values[keep]
            self.counts.passes += 1
            self.counts.last_read_ns = started
            self.counts.moving = len(changed) + len(gone)
            if not self.counts.moving:
                return
            self._fit(keys[changed], out_keys, len(keys))
            if len(gone):  # before the writes: a full TO has room for the new keys then
                self._delete(self.convert_keys(old_keys[gone]))
            if len(changed):
                self._write(out_keys, out_values, self.counts._updated)

    def _delete(self, keys: np.ndarray) -> None:
        """Take ``keys`` (gone from FROM) out of TO; an array's elements always exist: they
        are zeroed, as ``clear`` does."""
        if self.target.info.type in ELEMENTS_ALWAYS_EXIST:
            zeros = np.zeros((len(keys), self.sides.layouts[3].width), np.uint8)
            self._write(keys, zeros, self.counts._deleted)
            return
        writes.delete(self.target, keys, len(keys), batch_size=self.batch_size,
                      tally=self.counts._deleted)

    def _write(self, keys: np.ndarray, values: np.ndarray, tally: Tally) -> None:
        whole.load(self.target, keys, values, len(keys), batch_size=self.batch_size,
                   tally=tally, jobs=None)


def _changes(seen, keys: np.ndarray, values: np.ndarray):
    """Rows of ``keys`` new or changed since ``seen`` (the previous read), in row order,
    with the row of the previous read each was (-1: new), and rows of the previous read
    whose keys are gone."""
    old_keys, old_values = seen
    joined = keyjoin.join(old_keys, keys)
    differ = keyjoin.rows_differ(old_values, values, joined.pairs_a, joined.pairs_b)
    changed = np.concatenate([joined.only_b, joined.pairs_b[differ]])
    was = np.concatenate([np.full(len(joined.only_b), -1, np.int64), joined.pairs_a[differ]])
    order = np.argsort(changed)
    return changed[order], was[order], np.sort(joined.only_a)
