"""A plan (:mod:`.plan`) run over whole batches: source rows in, target rows out, with numpy.

Rows are a batch's packed records as a ``count × size`` uint8 array
(:func:`bpfbatch.records.columns.rows`); every operation of the plan reads one column (or an
array's block of columns) of every row at once and writes it into the target rows — no
record is ever built in Python. A check (a narrowing, an enum's name, cut bytes) flags the
rows it refuses; the conversion then fails on the first of them in the batch's order, and
nothing of the batch is written: :class:`ConversionError` says which row and why, the caller
names the key.

Per-CPU values are converted slot by slot (``ncpus`` slots of ``round_up(size, 8)`` bytes);
with ``--sum`` each integer of a plain target is the sum of the source's slots (checked to
fit, as any narrowing).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import InputError
from ..records.layout import field_range
from .plan import Bytes, Empty, Enums, Field, Floats, IntAt, Ints, SidePlan

__all__ = ["ConversionError", "Layout", "convert"]


class ConversionError(InputError):
    """Row ``row`` of the batch cannot be converted: ``message`` says which field and why."""

    def __init__(self, message: str, *, row: int):
        super().__init__(message)
        self.row = row


@dataclasses.dataclass(frozen=True)
class Layout:
    """How one side's records are laid out: ``size`` bytes each, or ``ncpus`` slots of
    ``stride`` bytes (per-CPU values; ``ncpus`` 1 for a plain record)."""

    size: int
    ncpus: int = 1
    stride: int = 0

    @property
    def width(self) -> int:
        """The bytes of one whole record (every slot)."""
        return self.stride * self.ncpus if self.ncpus > 1 or self.stride else self.size

    def slots(self, rows: np.ndarray) -> list[np.ndarray]:
        step = self.stride or self.size
        return [rows[:, c * step:c * step + self.size] for c in range(self.ncpus)]


def convert(plan: SidePlan, src: np.ndarray, src_layout: Layout, dst_layout: Layout,
            template: bytes, *, summed: bool = False) -> np.ndarray:
    """The target rows of ``src`` (``count × src_layout.width`` uint8): each record starts
    as ``template`` (zeros and the ``--set`` values, ``dst_layout.size`` bytes) and the
    plan's operations write the rest. ``summed``: a per-CPU source into a plain target, its
    integers added up over the slots. Raises :class:`ConversionError` for the first row
    refused."""
    count = len(src)
    dst = np.zeros((count, dst_layout.width), np.uint8)
    slots_in, slots_out = src_layout.slots(src), dst_layout.slots(dst)
    fill = np.frombuffer(template, np.uint8)
    for slot in slots_out:
        slot[:] = fill
    if plan.whole_copy and not summed and src_layout.width == dst_layout.width:
        dst[:] = src
        return dst
    bad: list[tuple[int, str]] = []
    pairs = [(slots_in, slots_out[0])] if summed else \
        [([s], d) for s, d in zip(slots_in, slots_out)]
    for field, op in _coalesced(plan.ops):
        for sources, out in pairs:
            refused = _run(op, field, sources, out)
            if refused is not None:
                bad.append(refused)
    if bad:
        row, message = min(bad)
        raise ConversionError(message, row=row)
    return dst


def _run(op, field: Field, sources: list[np.ndarray], out: np.ndarray):
    """Apply ``op`` to ``out`` from ``sources`` (one, or the per-CPU slots to add up);
    ``(row, message)`` of the first row it refuses, else ``None``."""
    if isinstance(op, Bytes):
        out[:, op.dst:op.dst + op.size] = sources[0][:, op.src:op.src + op.size]
        return None
    if isinstance(op, Ints):
        column, overflow = _read_sum(sources, op.src, op.count, op.src_stride)
        refused = _first(overflow, lambda r: f"{field.path}: the sum over CPUs does not fit "
                                             "64 bits")
        lo, hi = field_range(op.dst.bits, op.dst.signed)
        outside = _outside(column, lo, hi)
        refused = refused or _first(outside.any(axis=1), lambda r: (
            f"{field.path}{_element(op, outside[r])}: "
            f"{column[r][outside[r]][0]} does not fit {_int_text(op.dst)}"))
        _write(out, op.dst, column, op.count, op.dst_stride)
        return refused
    if isinstance(op, Enums):
        return _enums(op, field, sources[0], out)
    if isinstance(op, Floats):
        values = sources[0][:, op.src:op.src + np.dtype(op.src_code).itemsize].view(op.src_code)
        converted = values.astype(op.dst_code)
        lost = ~((converted.astype(op.src_code) == values) | np.isnan(values))
        width = converted.dtype.itemsize
        out[:, op.dst:op.dst + width] = converted.view(np.uint8)
        return _first(lost[:, 0], lambda r: f"{field.path}: {values[r, 0]} does not survive "
                                            f"as {op.dst_code[1:]}-float")
    if isinstance(op, Empty):  # on every CPU's slot, when they are added up
        held = np.logical_or.reduce([rows[:, op.src:op.src + op.size].any(axis=1)
                                     for rows in sources])
        return _first(held, lambda r: f"{field.source}: would be cut (bytes past the new "
                                      f"length are not zero: {_cut(sources, r, op)})")
    raise TypeError(f"no conversion for {op!r}")


def _coalesced(ops: list[tuple[Field, object]]) -> list[tuple[Field, object]]:
    """``ops`` with each run of byte copies that follow one another on both sides made one
    copy (the unchanged fields of a record: one pass over the rows instead of one each)."""
    out: list[tuple[Field, object]] = []
    for field, op in ops:
        last = out[-1][1] if out else None
        if isinstance(op, Bytes) and isinstance(last, Bytes) and \
                last.src + last.size == op.src and last.dst + last.size == op.dst:
            out[-1] = (out[-1][0], Bytes(last.src, last.dst, last.size + op.size))
        else:
            out.append((field, op))
    return out


def _first(flags: np.ndarray, message) -> tuple[int, str] | None:
    if not flags.any():
        return None
    row = int(np.flatnonzero(flags)[0])
    return row, message(row)


def _element(op: Ints, outside: np.ndarray) -> str:
    return f"[{int(np.flatnonzero(outside)[0])}]" if op.count > 1 else ""


def _int_text(at: IntAt) -> str:
    return f"{'s' if at.signed else 'u'}{at.bits}"


def _cut(sources: list[np.ndarray], row: int, op: Empty) -> str:
    """The bytes a cut would lose in ``row`` (the first slot holding any), as text."""
    held = next(rows[row, op.src:op.src + op.size] for rows in sources
                if rows[row, op.src:op.src + op.size].any())
    return repr(held.tobytes().rstrip(b"\0").decode("latin-1"))


def _holding(at: IntAt) -> np.dtype:
    """The numpy type every value of ``at`` fits: uint64 for a 64-bit unsigned, else int64."""
    return np.dtype(np.uint64) if at.bits == 64 and not at.signed else np.dtype(np.int64)


def _read(rows: np.ndarray, at: IntAt, count: int, stride: int) -> np.ndarray:
    """``count`` integers of every row (``count × 1`` for one), as int64 or uint64."""
    if at.nbits is None:
        code = f"<{'i' if at.signed else 'u'}{at.size}"
        block = rows[:, at.offset:at.offset + (count - 1) * stride + at.size]
        if stride in (0, at.size):
            return block.view(code).astype(_holding(at), copy=False)
        return np.stack([rows[:, at.offset + i * stride:at.offset + i * stride + at.size]
                         .view(code)[:, 0] for i in range(count)], axis=1).astype(_holding(at))
    raw = np.zeros((len(rows), 8), np.uint8)
    raw[:, :at.size] = rows[:, at.offset:at.offset + at.size]
    word = raw.view("<u8") >> np.uint64(at.shift)
    if at.nbits < 64:
        word &= np.uint64((1 << at.nbits) - 1)
    if not at.signed:
        return word.astype(_holding(at), copy=False)
    value = word.view(np.int64)
    if at.nbits < 64:
        sign = np.int64(1 << (at.nbits - 1))
        value = (value ^ sign) - sign
    return value


def _read_sum(sources: list[np.ndarray], at: IntAt, count: int, stride: int):
    """The integers of ``at`` added up over ``sources`` (one: as read), and which rows'
    sums left 64 bits."""
    total = _read(sources[0], at, count, stride)
    overflow = np.zeros(len(total), bool)
    for rows in sources[1:]:
        more = _read(rows, at, count, stride)
        added = total + more
        if total.dtype == np.uint64:
            overflow |= (added < total).any(axis=1)
        else:
            overflow |= (((total ^ added) & (more ^ added)) < 0).any(axis=1)
        total = added
    return total, overflow


def _outside(column: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Which values of ``column`` (int64 or uint64) are not in ``[lo, hi)``."""
    info = np.iinfo(column.dtype)
    outside = np.zeros(column.shape, bool)
    if lo > info.min:  # an int64 column into an unsigned field (lo is never above 0)
        outside |= column < column.dtype.type(lo)
    if hi - 1 < info.max:
        outside |= column > column.dtype.type(hi - 1)
    return outside


def _write(rows: np.ndarray, at: IntAt, column: np.ndarray, count: int, stride: int) -> None:
    """Write ``column`` (``n × count``, every value fitting) as ``at``'s integers."""
    if at.nbits is None:
        code = f"<{'i' if at.signed else 'u'}{at.size}"
        words = column.astype(code)
        if stride in (0, at.size):
            rows[:, at.offset:at.offset + count * at.size] = \
                words.view(np.uint8).reshape(len(rows), count * at.size)
            return
        for i in range(count):
            start = at.offset + i * stride
            rows[:, start:start + at.size] = words[:, i:i + 1].view(np.uint8)
        return
    raw = np.zeros((len(rows), 8), np.uint8)
    raw[:, :at.size] = rows[:, at.offset:at.offset + at.size]
    word = raw.view("<u8")
    mask = np.uint64(((1 << at.nbits) - 1) << at.shift)
    bits = column.astype(np.int64).view(np.uint64) << np.uint64(at.shift)
    word[:] = (word & ~mask) | (bits & mask)
    rows[:, at.offset:at.offset + at.size] = raw[:, :at.size]


def _enums(op: Enums, field: Field, rows: np.ndarray, out: np.ndarray):
    values = _read(rows, op.src, 1, 0)[:, 0]
    unique, inverse = np.unique(values, return_inverse=True)
    mapped, reasons = [], []
    for value in unique.tolist():
        name = op.src_enum.names.get(value)
        target = None if name is None else op.dst_enum.by_name.get(name)
        mapped.append(0 if target is None else target)
        reasons.append(None if target is not None else
                       f"{value} names no enumerator of {field.source}" if name is None else
                       f"enumerator {name} is not in the target's enum")
    _write(out, op.dst, np.array(mapped, dtype=_holding(op.dst))[inverse][:, None], 1, 0)
    refused = np.array([r is not None for r in reasons], bool)[inverse]
    return _first(refused, lambda r: f"{field.path}: {reasons[inverse[r]]}")
