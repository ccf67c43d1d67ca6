"""Which fields of a value changed: the judge of a diff, and the changes it reports.

Rows whose bytes differ are candidates; a field has changed when its values — as the map's
view shows them, decoders included — differ (so bytes no view shows, a struct's padding or a
``char[N]``'s bytes after its string, change nothing). Fields are the leaves of the layout:
struct members by name through nested structs (``value.stats.packets``), array elements by
index (``value.hist[3]``), each union member as ``dump`` prints them all; a per-CPU value's
fields per CPU. A value without BTF is one field, its bytes.

Each leaf is read for all candidate rows at once (:func:`~bpfbatch.records.values.values`);
only the rows where it differs are walked in Python.
"""

from __future__ import annotations

import dataclasses
import math

from .._numpy import np
from ..records.codec import BtfCodec, Codec, PerCpuCodec
from ..records.layout import leaf_columns
from ..records.values import values as layout_values


@dataclasses.dataclass(frozen=True)
class Field:
    """One changed leaf: its path (``value.packets``, ``value.hist[3]``), the CPU for a
    per-CPU value (else ``None``), and its old and new values as the view shows them."""

    path: str
    cpu: int | None
    old: object
    new: object


def changed_fields(codec: Codec, rows_a: np.ndarray, rows_b: np.ndarray) -> list[list[Field]]:
    """For each pair of value rows (``(n, stride)`` uint8, the same ``n``), its changed
    fields in layout order (an empty list: the two show the same)."""
    found: list[list[Field]] = [[] for _ in range(len(rows_a))]
    if isinstance(codec, PerCpuCodec):
        size = codec.base.size
        for cpu in range(codec.ncpus):
            at = cpu * codec.stride
            _leaves(codec.base, np.ascontiguousarray(rows_a[:, at:at + size]),
                    np.ascontiguousarray(rows_b[:, at:at + size]), cpu, found)
    else:
        _leaves(codec, rows_a, rows_b, None, found)
    return found


def _leaves(codec: Codec, rows_a, rows_b, cpu: int | None, found: list[list[Field]]) -> None:
    if isinstance(codec, BtfCodec):
        columns = [(path, lambda rows, node=node: layout_values(node, rows))
                   for path, node in leaf_columns(codec.node, "value")]
    else:
        columns = [("value", codec.values)]
    for path, read in columns:
        old, new = read(rows_a), read(rows_b)
        for i, (a, b) in enumerate(zip(old, new)):
            if type(a) in _PLAIN and type(a) is type(b) and a == b:
                continue  # the common case, without a call
            if not same(a, b):
                _walk(path, a, b, cpu, found[i])


#: Types whose ``==`` is :func:`same`'s.
_PLAIN = frozenset({int, str, bool, bytes, type(None)})


def same(a, b) -> bool:
    """Whether two values of a view are shown alike: equal and of one type (``1`` is not
    ``True``), a float by its text (NaN is NaN, -0.0 is not 0.0), containers by element."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b) or a != a and b != b
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    return a == b


def _walk(path: str, a, b, cpu: int | None, out: list[Field]) -> None:
    """The leaves under ``path`` where ``a`` and ``b`` differ: dicts by key, lists of one
    length by index; anything else (a string against a list, arrays of other lengths) is
    one change."""
    if type(a) is type(b) and isinstance(a, dict) and a.keys() == b.keys():
        for key in a:
            if not same(a[key], b[key]):
                _walk(f"{path}.{key}", a[key], b[key], cpu, out)
    elif type(a) is type(b) and isinstance(a, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if not same(x, y):
                _walk(f"{path}[{i}]", x, y, cpu, out)
    else:
        out.append(Field(path, cpu, a, b))
