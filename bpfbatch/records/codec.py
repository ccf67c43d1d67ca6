"""Codecs: a map's key and value bytes <-> Python values, numpy dtypes and JSON text, from BTF.

A :class:`Codec` is compiled once per map from its BTF type into a layout tree (plain data with
absolute byte offsets, :mod:`~bpfbatch.records.layout`), and serves four uses, each done by
the tree's module for that job:

* :meth:`Codec.decode` / :meth:`Codec.encode` — one record <-> Python values (ints, bools,
  strings for printable char arrays, enum names, dicts for structs and unions, lists for
  arrays). ``encode`` also accepts what the JSON output prints (``"0x.."`` strings for 128-bit
  ints and bitfields), so a dump can be loaded back. :meth:`Codec.encode_batch` encodes a
  whole batch with one numpy column per leaf field, to the same bytes and errors.
* :attr:`Codec.dtype` — a numpy structured dtype when the layout is representable (no
  bitfields), for zero-copy ``np.frombuffer`` views over a batch.
* :meth:`Codec.template` — JSON text as bpftool's ``btf_dumper.c`` prints it, as a
  :class:`RecordText`: a ``%``-format plus :class:`Leaf` columns read vectorised from a whole
  batch, so a 1M-record dump never walks the type per record (one ``%`` per batch).

bpftool's rules (``btf_dumper.c``) are the base: integers of 8/16/32/64 bits in decimal;
128-bit integers, bitfields and integers of other widths as ``"0x.."`` hex strings of the raw
bits; enums print the first matching name, else the number; pointers print as unsigned
decimal; unions print every member.

The typed mode (the ``json`` outputs, :meth:`Codec.decode`/:meth:`Codec.encode`) follows the
value rule (see the README): whatever it prints, ``encode`` takes back unchanged, and a value
that does not fit its field is refused. Integers and enums keep their BTF signedness; a char
array is a string when its bytes before the first NUL (all of them without one) are printable
ASCII, tab, LF or CR; anonymous members' fields belong to the record holding them; a record
must give every struct field (one per union) unless the codec was built with
``default_zero``; one-byte bools, standard escapes, floats as numbers (non-finite ones as
``"NaN"``/``"Infinity"`` strings) and ``null`` for kinds it cannot print.

``exact`` mode (the ``bpftool-json`` output) is bpftool 7.1 byte for byte instead: enums read
signed, ``"":`` keys for anonymous members, a char array a string only when a NUL ends
printable ASCII, a backslash in a string written ``\\n``, a ``BTF_INT_CHAR`` char not
escaped, and ``float`` and other kinds it cannot print give its error text and end the
enclosing aggregates.

No BTF: :class:`RawCodec` (bytes, printed as bpftool's ``["0x01",...]`` byte lists).
Per-CPU values: :class:`PerCpuCodec` over a base codec — ``ncpus`` slots of
``round_up(size, 8)`` bytes; a pure function of ``ncpus`` so it is testable anywhere.

Its siblings: :mod:`~bpfbatch.records.layout` (the layout tree built from BTF), the jobs over
it (:mod:`~bpfbatch.records.values`, :mod:`~bpfbatch.records.encode`,
:mod:`~bpfbatch.records.fill`, :mod:`~bpfbatch.records.template`),
:mod:`~bpfbatch.records.jsontext` (templates and leaves, the JSON text of a batch) and, here,
the codecs over them.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from itertools import chain

from ..btf import Btf
from ..errors import BpfBatchError, InputError
from .._numpy import np
from .columns import batch_rows, raw_bytes, rows
from .encode import Encoder, check_range, encoder, parse_int
from .fill import can_fill, fill, int_column
from .jsontext import HexBytesLeaf, RecordText
from .layout import build_node, field_range
from .template import record_text
from .values import dtype as layout_dtype
from .values import values as layout_values

__all__ = ["BtfCodec", "Codec", "PerCpuCodec", "RawCodec", "codec_for", "map_codecs", "rows"]


class Codec:
    """Bytes <-> values for one key or value type."""

    size: int

    def values(self, rows) -> list:
        """Python values of every row of a ``count × size`` uint8 array (see :func:`rows`)
        or :class:`~.columns.ByteRows`, built field by field with vectorised reads."""
        raise NotImplementedError

    def decode(self, data) -> object:
        """Python value of the record at the start of ``data``."""
        return self.values(batch_rows(data, 1, self.size))[0]

    def decode_batch(self, data, count: int) -> list:
        """Python values of ``count`` consecutive records in ``data``."""
        return self.values(batch_rows(data, count, self.size))

    def encode(self, value, path: str = "value") -> bytes:
        raise NotImplementedError

    def encode_batch(self, values: Sequence, where: Callable[[int], str]) -> bytes:
        """Every record of ``values`` encoded and packed back to back.

        The same bytes as ``b"".join(self.encode(v, where(i)) for i, v in
        enumerate(values))``, and the same error (the first failing record's, its path from
        ``where(i)``), but vectorised over the layout: one numpy column per leaf field for
        the whole batch. Records the vectorised path does not take as they are, and layouts
        it cannot write (bitfields, 128-bit ints, unions, ...), go through :meth:`encode`.
        """
        rows = np.zeros((len(values), self.size), dtype=np.uint8)
        bad = np.zeros(len(values), dtype=bool)
        if not self._fill(rows, values, bad):
            bad[:] = True
        for i in np.flatnonzero(bad).tolist():
            rows[i] = np.frombuffer(self.encode(values[i], where(i)), dtype=np.uint8)
        return rows.tobytes()

    def _fill(self, rows: np.ndarray, values: Sequence, bad: np.ndarray) -> bool:
        """Write ``values`` into ``rows`` (``count × size`` uint8) at once, flagging in
        ``bad`` the records to encode one by one; ``False`` when the layout is not
        vectorised (every record is then encoded on its own)."""
        return False

    def template(self, exact: bool = False) -> RecordText:
        """JSON text of one record (bpftool rules; ``exact`` keeps bpftool's quirks)."""
        raise NotImplementedError

    @property
    def dtype(self) -> np.dtype | None:
        """numpy dtype of one record, ``None`` when the layout has bitfields."""
        raise NotImplementedError

    @property
    def typed(self) -> bool:
        """Whether values are typed from BTF (``False``: raw bytes)."""
        return True

    def array(self, data, count: int) -> np.ndarray:
        """``count`` records of ``data`` as a zero-copy numpy array of :attr:`dtype`; when
        the layout has none (bitfields), a copy with the same field names
        (:mod:`~bpfbatch.records.unpacked`); raw bytes, ``uint8 × size``, without BTF."""
        if self.dtype is None:
            return self._unpacked(rows(data, count, self.size))
        return np.frombuffer(data, dtype=self.dtype, count=count)

    def _unpacked(self, rows: np.ndarray) -> np.ndarray:
        """The records of ``rows`` (``count × size`` uint8) copied into named fields; raw
        rows where there are no names."""
        return rows

    def render_batch(self, data, count: int, exact: bool = False) -> list[bytes]:
        """JSON text of ``count`` consecutive records in ``data``."""
        return self.template(exact).render([batch_rows(data, count, self.size)])



class BtfCodec(Codec):
    """A codec compiled from a BTF type."""

    def __init__(self, btf: Btf, type_id: int, *, default_zero: bool = False):
        self.type_id = type_id
        self.type_name = btf.name_of(type_id)
        self.size = btf.size_of(type_id)
        self._bind(build_node(btf, type_id, default_zero=default_zero))

    def _bind(self, node) -> None:
        """Take ``node`` as the layout tree; what is derived from it is derived again."""
        self.node = node
        self._templates: dict[bool, RecordText] = {}
        # Made on first use: both need numpy, which a small dump does without.
        self._dtype: np.dtype | None | bool = False  # False: not made yet
        self._fills: bool | None = None
        self._encoder: Encoder | None = None  # compiled on the first encode

    def with_node(self, node, size: int | None = None) -> BtfCodec:
        """This codec over another tree for the same type (a decoded or summed view of its
        fields), records of ``size`` bytes when given."""
        out = copy.copy(self)
        if size is not None:
            out.size = size
        out._bind(node)
        return out

    def values(self, rows):
        return layout_values(self.node, rows)

    def encode(self, value, path="value"):
        if self._encoder is None:
            self._encoder = encoder(self.node)
        buf = bytearray(self.size)
        self._encoder(buf, value, path)
        return bytes(buf)

    def _fill(self, rows, values, bad):
        if self._fills is None:
            self._fills = can_fill(self.node)
        if self._fills:
            fill(self.node, rows, values, bad)
        return self._fills

    def template(self, exact=False):
        if exact not in self._templates:
            self._templates[exact] = record_text(self.node, exact)
        return self._templates[exact]

    def _unpacked(self, rows):
        from .unpacked import unpacked

        return unpacked(self.node, rows)

    def _make_dtype(self):
        dt = layout_dtype(self.node)
        if dt is None:
            return None
        if dt.itemsize != self.size:  # e.g. a scalar typedef: pad to the record size
            dt = np.dtype({"names": ["value"], "formats": [dt], "offsets": [0],
                           "itemsize": self.size})
        return dt

    @property
    def dtype(self):
        if self._dtype is False:
            self._dtype = self._make_dtype()
        return self._dtype

    def __repr__(self) -> str:
        return f"<BtfCodec {self.type_name} size {self.size}>"


class RawCodec(Codec):
    """No BTF: values are ``bytes``; JSON is bpftool's ``["0x01",...]`` byte list."""

    def __init__(self, size: int):
        self.size = size
        self._template = RecordText().text(b"[")
        if size:
            self._template.leaf(HexBytesLeaf(0, size))
        self._template.text(b"]")

    @property
    def typed(self):
        return False

    def values(self, rows):
        return raw_bytes(rows, 0, self.size)

    def encode(self, value, path="value"):
        if isinstance(value, str):
            text = value[2:] if value[:2].lower() == "0x" else value
            try:
                raw = bytes.fromhex(text)
            except ValueError:
                raise InputError(f"not a hex string: {value!r}", obj=path) from None
        elif isinstance(value, (bytes, bytearray, memoryview)):
            raw = bytes(value)
        elif isinstance(value, list):
            raw = bytes(check_range(parse_int(v, f"{path}[{i}]"), 8, f"{path}[{i}]", False)
                        for i, v in enumerate(value))
        else:
            raise InputError(f"expected bytes, a hex string or a list of bytes, got {value!r}",
                             obj=path)
        if len(raw) != self.size:
            raise InputError(f"expected {self.size} bytes, got {len(raw)}", obj=path)
        return raw

    def _fill(self, rows, values, bad):
        """Hex strings, or lists of bytes as ints or ``"0x.."`` strings (bpftool's dump)."""
        size, count = self.size, len(values)
        kinds = set(map(type, values))
        if kinds == {str}:
            digits = [v[2:] if v[:2] in ("0x", "0X") else v for v in values]
            raw = None
            if set(map(len, digits)) == {2 * size}:
                try:
                    raw = bytes.fromhex("".join(digits))
                except ValueError:
                    pass
            if raw is None or len(raw) != count * size:  # odd input (e.g. spaces): one by one
                return False
            rows[:] = np.frombuffer(raw, dtype=np.uint8).reshape(count, size)
            return True
        if kinds != {list} or set(map(len, values)) != {size}:
            return bool(count == 0)
        flat = list(chain.from_iterable(values))
        flat_bad = np.zeros(len(flat), dtype=bool)
        if set(map(type, flat)) == {str}:
            column = _hex_byte_column(flat, flat_bad)
        else:
            column = int_column(flat, *field_range(8, False), flat_bad)
        rows[:] = column.astype(np.uint8).reshape(count, size)
        bad |= flat_bad.reshape(count, size).any(axis=1)
        return True

    def template(self, exact=False):
        return self._template

    @property
    def dtype(self):
        return np.dtype((np.uint8, (self.size,)))

    def __repr__(self) -> str:
        return f"<RawCodec size {self.size}>"


@functools.cache
def _hex_values() -> np.ndarray:
    """Each ASCII byte's value as a hex digit, 255 for a byte that is not one."""
    values = np.full(256, 255, dtype=np.uint8)
    values[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16)
    values[np.frombuffer(b"ABCDEF", dtype=np.uint8)] = np.arange(10, 16)
    return values


def _hex_byte_column(texts: list[str], bad: np.ndarray) -> np.ndarray:
    """Strings of the form ``"0x07"`` (as bpftool prints bytes) as a uint8 column; any other
    string is flagged."""
    joined = "".join(texts)
    if set(map(len, texts)) != {4} or not joined.isascii():
        bad |= np.array([not (len(t) == 4 and t.isascii()) for t in texts], dtype=bool)
        texts = [t if len(t) == 4 and t.isascii() else "0x00" for t in texts]
        joined = "".join(texts)
    chars = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).reshape(-1, 4)
    high, low = _hex_values()[chars[:, 2]], _hex_values()[chars[:, 3]]
    bad |= (chars[:, 0] != ord("0")) | ((chars[:, 1] | 0x20) != ord("x")) | (high > 15) | (low > 15)
    return (high << 4) | (low & 15)


class PerCpuCodec(Codec):
    """A per-CPU value: ``ncpus`` slots of ``round_up(base.size, 8)`` bytes, one per possible
    CPU (CPU ``c`` at ``c × stride``; the pad bytes carry no meaning)."""

    def __init__(self, base: Codec, ncpus: int):
        if ncpus < 1:
            raise BpfBatchError(f"per-CPU codec needs at least one CPU, got {ncpus}")
        self.base = base
        self.ncpus = ncpus
        self.stride = (base.size + 7) & ~7
        self.size = self.stride * ncpus

    @property
    def typed(self):
        return self.base.typed

    def values(self, rows):
        size = self.base.size
        columns = [self.base.values(rows[:, c * self.stride:c * self.stride + size])
                   for c in range(self.ncpus)]
        return [list(cpus) for cpus in zip(*columns)]

    def encode(self, value, path="value"):
        """A list of one value per CPU, or one value copied to every CPU (like bpftool).

        A list of ``ncpus`` items is read per CPU when each item encodes as a value; else
        (e.g. an array type whose length happens to be ``ncpus``) as one value.
        """
        if isinstance(value, list) and len(value) == self.ncpus:
            try:
                return self.encode_cpus(value, path)
            except InputError as per_cpu:
                try:
                    return self.encode_cpus([value] * self.ncpus, path)
                except InputError:
                    raise per_cpu from None
        return self.encode_cpus([value] * self.ncpus, path)

    def encode_cpus(self, values: list, path: str = "value") -> bytes:
        """Exactly one value per CPU."""
        if len(values) != self.ncpus:
            raise InputError(f"expected {self.ncpus} per-CPU values, got {len(values)}",
                             obj=path)
        pad = bytes(self.stride - self.base.size)
        return b"".join(self.base.encode(v, f"{path}[cpu {c}]") + pad
                        for c, v in enumerate(values))

    def _fill(self, rows, values, bad):
        """Records giving one value per CPU fill each slot from their own column; the others
        fill one column copied to every slot. A record the base flags in either reading goes
        through :meth:`encode`, which settles which reading applies."""
        ncpus, size = self.ncpus, self.base.size
        per_cpu = [i for i, v in enumerate(values) if type(v) is list and len(v) == ncpus]
        taken = set(per_cpu)
        shared = [i for i, v in enumerate(values) if i not in taken]
        for i in shared:
            if isinstance(values[i], list):  # a list subclass: encode decides
                bad[i] = True
        slots = [(c * self.stride, c * self.stride + size) for c in range(ncpus)]
        if shared:
            base_rows, base_bad = self._base_fill([values[i] for i in shared])
            if base_rows is None:
                return False
            for start, end in slots:
                rows[shared, start:end] = base_rows
            bad[shared] |= base_bad
        for c, (start, end) in enumerate(slots if per_cpu else ()):
            base_rows, base_bad = self._base_fill([values[i][c] for i in per_cpu])
            if base_rows is None:
                return False
            rows[per_cpu, start:end] = base_rows
            bad[per_cpu] |= base_bad
        return True

    def _base_fill(self, values: list) -> tuple[np.ndarray | None, np.ndarray]:
        rows = np.zeros((len(values), self.base.size), dtype=np.uint8)
        bad = np.zeros(len(values), dtype=bool)
        return (rows if self.base._fill(rows, values, bad) else None), bad

    def _unpacked(self, rows):
        """Each CPU's slot unpacked by the base codec: ``count × ncpus`` of ``value``."""
        count = len(rows)
        slots = self.base._unpacked(
            np.ascontiguousarray(rows).reshape(count * self.ncpus, self.stride)[:, :self.base.size])
        if slots.dtype.names is None:  # no BTF: the raw rows
            return rows
        slot = np.dtype([("value", slots.dtype)])
        return slots.view(slot).reshape(count, self.ncpus)

    def template(self, exact=False):
        """``[{"cpu":0,"value":…},…]`` as in bpftool's ``formatted``."""
        base = self.base.template(exact)
        out = RecordText().text(b"[")
        for c in range(self.ncpus):
            out.text(b'%s{"cpu":%d,"value":' % (b"," if c else b"", c))
            out.extend(base.shifted(c * self.stride))
            out.text(b"}")
            if not base.complete:  # bpftool stops after the first CPU that failed
                break
        out.complete = base.complete
        return out.text(b"]")

    @property
    def dtype(self):
        base = self.base.dtype
        if base is None:
            return None
        slot = np.dtype({"names": ["value"], "formats": [base], "offsets": [0],
                         "itemsize": self.stride})
        return np.dtype((slot, (self.ncpus,)))

    def __repr__(self) -> str:
        return f"<PerCpuCodec {self.base!r} × {self.ncpus}>"


def codec_for(btf: Btf | None, type_id: int, size: int, *,
              default_zero: bool = False) -> Codec:
    """A typed codec for ``type_id`` of ``btf``, or raw bytes when there is no type."""
    if btf is None or not type_id:
        return RawCodec(size)
    codec = BtfCodec(btf, type_id, default_zero=default_zero)
    if codec.size != size:
        raise BpfBatchError(f"BTF type {codec.type_name} is {codec.size} bytes, "
                            f"the map says {size}", obj="BTF")
    return codec


def map_codecs(info, btf: Btf | None = None, ncpus: int | None = None, *,
               default_zero: bool = False) -> tuple[Codec, Codec]:
    """``(key codec, value codec)`` of a map (:class:`bpfbatch.map.handle.MapInfo`).

    The BTF is loaded from the kernel when the map has one and ``btf`` is not given. Like
    bpftool, types are used only when the map has a value type. Types given for the map
    (``info.types``, :mod:`~bpfbatch.records.typespec`) come before its own. Per-CPU maps get a
    :class:`PerCpuCodec` for ``ncpus`` (default: the possible CPUs).
    """
    given = getattr(info, "types", None)  # given for a map without BTF: they come first
    key_type, value_type = (given.key, given.value) if given is not None else (None, None)
    if btf is None and info.btf_id and info.btf_value_type_id and not (key_type and value_type):
        btf = Btf.from_kernel(info.btf_id)
    own = btf if btf is not None and info.btf_value_type_id else None
    key = codec_for(*(key_type or (own, info.btf_key_type_id)), info.key_size,
                    default_zero=default_zero)
    value = codec_for(*(value_type or (own, info.btf_value_type_id)), info.value_size,
                      default_zero=default_zero)
    if info.percpu:
        if ncpus is None:
            from .._sys.libbpf import num_possible_cpus
            ncpus = num_possible_cpus()
        value = PerCpuCodec(value, ncpus)
    return key, value
