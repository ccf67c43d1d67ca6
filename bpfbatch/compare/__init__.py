"""``diff``: two maps, a map and a file, or two files, compared by key.

Both sides become key and value rows (``(n, size)`` uint8): a map through batch lookups
(:func:`~bpfbatch.map.cursor.read_all`; two maps side by side when the process may use two
CPUs), a file through the readers ``load`` uses (:func:`~bpfbatch.formats.read.read_records`:
JSONL, JSON, CSV, bpftool's JSON, Parquet, Arrow, the format from the name or the content),
encoded by the view of the map that gives the layout (:func:`~bpfbatch.records.decoding.view`,
decoders included). So a key compares equal whatever form each side wrote it in — a file's
``"10.0.0.1"`` and the map's stored bytes — and the records of a file are what ``load`` would
write (a key given twice: its last record).

Keys are matched by their bytes (:mod:`bpfbatch.map.keyjoin`), as the kernel matches them;
the value rows of each matched key are compared as bytes, and only the rows that differ are decoded, field by
field (:mod:`.fields`): a key whose fields all show the same is the same. Only what is
reported is decoded for output (:class:`Diff` iterates its changes in key order).

A map is read as ``dump`` reads it: not an atomic snapshot, and two maps are read one after
the other's first batch, not at one instant.

``sum_cpus`` compares per-CPU values by their sums over the CPUs, as ``dump --sum`` shows
them: each side's values become records of the exact sums (:class:`~bpfbatch.records.cpusum.
Totals`) — a map's by adding up its CPUs, a file's read as the sums ``dump --sum`` writes or,
when it holds per-CPU values (a plain dump, bpftool's JSON), read again as those and added
up — and those are compared as above.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterator

from .._numpy import np
from ..errors import InputError
from ..map.handle import DEFAULT_BATCH, MapHandle, require
from ..records.plain import key_text
from .fields import Field, changed_fields
from ..map.keyjoin import join, rows_differ, take, words

__all__ = ["Change", "Diff", "Field", "diff"]

#: Changes decoded at a time while a :class:`Diff` is iterated.
_CHUNK = 4096


@dataclasses.dataclass(frozen=True)
class Change:
    """One key that differs. ``op``: ``"added"`` (only in B: ``new`` is its value),
    ``"removed"`` (only in A: ``old`` is its value) or ``"changed"`` (``fields``, each
    leaf whose value differs). Keys and values in the view's forms (``Map.items``'s)."""

    op: str
    key: object
    old: object = None
    new: object = None
    fields: tuple[Field, ...] = ()


@dataclasses.dataclass
class _Side:
    name: str
    keys: np.ndarray
    values: np.ndarray
    #: Summed only once both sides are read (``sum_cpus``), so that a refusal names A first:
    #: whether ``values`` are per-CPU values still, and how row ``i`` is named in an error.
    per_cpu: bool = False
    where: object = None


class Diff:
    """What differs from A to B: the counts (``added``, ``removed``, ``changed``, ``same``;
    true when anything differs) and the changes, iterated in key order (integer keys
    numerically, others by their bytes)."""

    def __init__(self, a: _Side, b: _Side, codecs):
        self.a_name, self.b_name = a.name, b.name
        self.key_codec, self.value_codec = codecs
        joined = join(a.keys, b.keys)
        pa, pb = joined.pairs_a, joined.pairs_b
        differ = rows_differ(a.values, b.values, pa, pb)
        pa, pb = pa[differ], pb[differ]
        fields = changed_fields(self.value_codec, take(a.values, pa), take(b.values, pb))
        shown = np.fromiter(map(bool, fields), bool, len(fields))
        self._fields = [f for f, keep in zip(fields, shown) if keep]
        pa, pb = pa[shown], pb[shown]
        self.added, self.removed, self.changed = len(joined.only_b), len(joined.only_a), len(pa)
        self.same = len(joined.pairs_a) - self.changed
        # What is reported, in key order: op (0 removed, 1 added, 2 changed), its row.
        ops = np.repeat(np.arange(3, dtype=np.int8), [self.removed, self.added, self.changed])
        rows = np.concatenate([joined.only_a, joined.only_b, pa]).astype(np.int64)
        keys = np.concatenate([take(a.keys, joined.only_a), take(b.keys, joined.only_b),
                               take(a.keys, pa)])
        order = _key_order(self.key_codec, keys)
        self._ops, self._rows, self._keys = ops[order], rows[order], take(keys, order)
        self._field_of = order - self.removed - self.added  # index into _fields if changed
        self._a, self._b = a, b

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def __len__(self) -> int:
        """How many keys differ."""
        return self.added + self.removed + self.changed

    def __iter__(self) -> Iterator[Change]:
        for start in range(0, len(self), _CHUNK):
            yield from self._changes(slice(start, start + _CHUNK))

    def _changes(self, at: slice) -> list[Change]:
        ops, rows = self._ops[at], self._rows[at]
        keys = self.key_codec.values(np.ascontiguousarray(self._keys[at]))
        removed, added = ops == 0, ops == 1
        old = iter(self.value_codec.values(take(self._a.values, rows[removed])))
        new = iter(self.value_codec.values(take(self._b.values, rows[added])))
        out = []
        for key, op, field in zip(keys, ops.tolist(), self._field_of[at].tolist()):
            if op == 0:
                out.append(Change("removed", key, old=next(old)))
            elif op == 1:
                out.append(Change("added", key, new=next(new)))
            else:
                out.append(Change("changed", key, fields=tuple(self._fields[field])))
        return out

    def __repr__(self) -> str:
        return (f"<Diff {self.a_name} → {self.b_name}: {self.added} added, {self.removed} "
                f"removed, {self.changed} changed, {self.same} same>")


def diff(a, b, *, decode=None, fmt: str | None = None, like: MapHandle | None = None,
         batch_size: int = DEFAULT_BATCH, sum_cpus: bool = False) -> Diff:
    """What differs from ``a`` to ``b``, each an open map (:class:`~bpfbatch.Map`) or a file's
    path (``"-"``: stdin; ``fmt`` its format, else from the name or the content). The layout
    is the first map's (two maps must have the same one), else ``like``'s, a map whose
    records the files hold; ``decode`` chooses the view as :meth:`~bpfbatch.Map.codecs` does
    (it reads the files and shows the changes); ``sum_cpus`` compares a per-CPU map's values
    summed over the CPUs (module docs). A file's bad record is an
    :class:`~bpfbatch.errors.InputError` naming ``file:line``."""
    maps = [side for side in (a, b) if isinstance(side, MapHandle)]
    info = (maps[0] if maps else like).info if maps or like is not None else None
    if info is None:
        raise InputError("two files need a map whose layout they hold (like=, --like MAP)",
                         obj="--like")
    from ..records.decoding import view

    codecs = view(info, decode)
    for m in maps:
        require(m.info, "dump")
    if len(maps) == 2:
        _check_same_layout(a.info, b.info, codecs, view(b.info, decode))
    per_cpu_codec, totals = codecs[1], None
    if sum_cpus:
        from ..records.cpusum import Totals

        totals = Totals(codecs[1])
        codecs = (codecs[0], totals.codec)
    if len(maps) == 2 and len(os.sched_getaffinity(0)) > 1:  # the two reads side by side
        first = _in_thread(lambda: _map_side(a, batch_size, codecs[0], totals))
        second = _map_side(b, batch_size, codecs[0], totals)
        sides = (first(), second)
    else:
        sides = tuple(_map_side(side, batch_size, codecs[0], totals)
                      if isinstance(side, MapHandle)
                      else _file_side(side, info, codecs, per_cpu_codec, fmt, totals)
                      for side in (a, b))
    if totals is not None:
        sides = tuple(dataclasses.replace(side, values=totals.rows(side.values, side.where))
                      if side.per_cpu else side for side in sides)
    return Diff(sides[0], sides[1], codecs)


def _map_side(m: MapHandle, batch_size: int, key_codec, totals) -> _Side:
    from ..map.cursor import read_all

    keys, values = read_all(m, batch_size=batch_size)
    return _Side(m.info.label, keys, values, per_cpu=totals is not None,
                 where=lambda row: f"{m.info.label}: {key_text(key_codec, keys, row)}")


def _file_side(path, info, codecs, per_cpu_codec, fmt: str | None, totals) -> _Side:
    """A file's records; with ``totals``, the sums it holds (``dump --sum``'s), or its
    per-CPU values (bpftool's JSON, a plain dump: read again as such with
    ``per_cpu_codec``, a pipe's bytes kept for that) to be summed."""
    from ..formats.read import PerCpuGiven, read_bytes, read_records

    path = os.fspath(path)
    data = None
    if totals is not None and (path == "-" or not os.path.isfile(path)):
        data = read_bytes(path, "<stdin>" if path == "-" else path)
    try:
        records = read_records(path, info, fmt=fmt, codecs=codecs, data=data)
        per_cpu = totals is not None and records.fmt == "bpftool-json"  # read per-CPU
    except PerCpuGiven:
        if totals is None:
            raise
        records = read_records(path, info, fmt=fmt, codecs=(codecs[0], per_cpu_codec),
                               data=data)
        per_cpu = True
    keys = np.frombuffer(records.keys, np.uint8).reshape(records.count, info.key_size)
    values = np.frombuffer(records.values, np.uint8).reshape(records.count, -1) \
        if records.count else np.empty((0, info.value_stride), np.uint8)
    return _Side(records.source, keys, values, per_cpu=per_cpu, where=records.where)


def _in_thread(call):
    """``call()`` started in a thread; the returned function waits for its result (or
    raises its exception)."""
    result: list = []

    def run():
        try:
            result.append((True, call()))
        except BaseException as exc:  # handed to the waiting thread
            result.append((False, exc))

    thread = threading.Thread(target=run, name="bpfbatch-diff-read", daemon=True)
    thread.start()

    def wait():
        thread.join()
        ok, value = result[0]
        if not ok:
            raise value
        return value
    return wait


def _check_same_layout(a, b, codecs_a, codecs_b) -> None:
    """Two maps compare only when their records are laid out alike (``bpfbatch migrate``
    converts between layouts)."""
    sizes = lambda info: (info.key_size, info.value_size, info.percpu)  # noqa: E731
    if sizes(a) != sizes(b) or [_layout(c) for c in codecs_a] != [_layout(c) for c in codecs_b]:
        raise InputError(f"{a.label} and {b.label} lay out their records differently "
                         f"(keys {a.key_size}/{b.key_size} B, values {a.value_size}/"
                         f"{b.value_size} B): nothing to compare field by field", obj=b.label)


def _layout(codec):
    codec = getattr(codec, "base", codec)
    return getattr(codec, "node", codec.size)


def _key_order(codec, keys: np.ndarray) -> np.ndarray:
    """The order of ``keys`` rows: numeric for a key that is one integer, else the order of
    their bytes."""
    dtype = getattr(codec, "dtype", None)
    if dtype is not None and dtype.kind in "iu" and dtype.itemsize == keys.shape[1]:
        return np.argsort(keys.view(dtype).ravel(), kind="stable")
    if not len(keys):
        return np.empty(0, np.int64)
    as_words = words(keys).byteswap()  # big-endian words: their order is the bytes' order
    return np.lexsort(as_words.T[::-1])
