"""``Map``, the public Python API (``from bpfbatch import Map``): the raw handle of
:mod:`bpfbatch.map.handle` with the batch surface on top — ``count``, ``items``,
``to_numpy``, ``to_arrow``, ``update_items``, ``delete_keys``, ``drain``, ``batches`` — and the
map's view (:meth:`Map.codecs`): keys and values in the forms ``dump`` prints, typed per
element too (``lookup``, ``update``, ``inner``). Each method is a thin door onto the cursor
(:mod:`bpfbatch.map.cursor`), the writes (:mod:`bpfbatch.map.writes`), the whole-map policies
(:mod:`bpfbatch.map.whole`), the drain (:mod:`bpfbatch.map.draining`) and the codecs
(:mod:`bpfbatch.records`).

It sits above both map/ and records/, so that map/ works on bytes and never imports back:
the cursor and the policies take a :class:`~bpfbatch.map.handle.MapHandle`, which this
``Map`` is. What only some methods need — records/, the writes, the whole-map policies,
the drain — is imported in those methods, not to break a circle (there is none left) but for
start-up: ``bpfbatch count``, ``list`` and ``dump`` open a map through this class and must not
import numpy or build codecs, nor pay the ~6 ms the write and drain modules take to import.
"""

from __future__ import annotations

import dataclasses
import errno
import sys
from collections.abc import Iterable, Iterator

from ._sys import abi
from .errors import InputError, NotFoundError
from .map import cursor
from .map.handle import DEFAULT_BATCH, MapHandle

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at start-up
if TYPE_CHECKING:
    import numpy as np
    import pandas
    import pyarrow

    from .map.draining import Draining


class Map(MapHandle):
    """An open BPF map (see :class:`~bpfbatch.map.handle.MapHandle` for opening, lifetime and
    the per-element calls on bytes), with its view and the batch surface."""

    def __init__(self, fd: int, *, owned: bool = True, read_only: bool = False):
        super().__init__(fd, owned=owned, read_only=read_only)
        self._codecs = None

    @classmethod
    def open(cls, *, id: int | None = None, pinned: str | None = None, name: str | None = None,
             read_only: bool = False, key_type=None, value_type=None, btf=None) -> "Map":
        """The map named by exactly one of ``id``, ``pinned`` (a bpffs path) or ``name`` (the
        kernel's exact map name, which must be unambiguous) — bpftool's ``id | pinned |
        name``. ``read_only`` opens it so that the kernel refuses writes (EPERM).
        ``key_type``, ``value_type`` (and ``btf``) type a map without BTF: see
        :meth:`typed`."""
        m = super().open(id=id, pinned=pinned, name=name, read_only=read_only)
        if key_type is None and value_type is None and btf is None:
            return m
        try:
            return m.typed(key_type, value_type, btf=btf)
        except BaseException:
            m.close()
            raise

    def typed(self, key_type=None, value_type=None, *, btf=None) -> "Map":
        """This map with its keys and/or values read and written as the types given (a map
        without BTF hands out ``bytes`` otherwise; one with BTF is retyped): a ctypes type
        as bcc's tables carry it (``c_uint32``, a ``Structure``), a numpy dtype, or a C type
        name (``"u64"``, ``"char[16]"``, ``"struct flow_val"`` of ``btf``, an object file's
        path or a :class:`~bpfbatch.btf.Btf`). Each must be the size of the map's key or
        value. Returns the map itself."""
        from .records.typespec import given_types

        types = given_types(self.info, key_type, value_type, btf)
        self.info = dataclasses.replace(self.info, types=types)
        self._codecs = None
        return self

    def inner(self, key) -> "Map":
        """The map stored at ``key`` of a map of maps (``array_of_maps``, ``hash_of_maps``),
        opened by the id the kernel returns for it, read-only when this map is. ``key`` as
        :meth:`items` yields it, or ``bytes``. No map at ``key``: :class:`NotFoundError`."""
        if self.info.type not in abi.MAP_IN_MAP_TYPES:
            raise InputError(f"inner: {self.info.type_name} maps hold no maps",
                             obj=self.info.label)
        value = self.lookup(self._encode([key], 0, "key"))
        if value is None:
            raise NotFoundError("inner: no map at this key", obj=self.info.label,
                                errno=errno.ENOENT)
        return Map.open_id(int.from_bytes(value[:4], "little"), read_only=self.read_only)

    # -- per-element operations in the view's forms ----------------------------------------

    def lookup(self, key, *, flags: int = 0, decode=None):
        """The value of ``key`` (``value_stride`` bytes), or ``None`` when absent. Maps
        without keys (queue, stack) take ``None`` and peek at the next element. A key in
        the form :meth:`items` yields (not bytes) is encoded by the view ``decode`` chooses
        and the value comes back in that form too."""
        if not self._typed(key, 0, decode):
            return super().lookup(key, flags=flags)
        value = super().lookup(self._encode([key], 0, "key", decode), flags=flags)
        return None if value is None else self.codecs(decode)[1].decode(value)

    def update(self, key, value, flags: int = abi.BPF_ANY, *, decode=None) -> None:
        """Write one element (``value`` is ``value_stride`` bytes: every possible CPU's slot
        for a per-CPU map); for a queue, stack or bloom filter ``key`` is ``None`` and the
        value is pushed. A key or value in the form :meth:`items` yields (not bytes) is
        encoded by the view ``decode`` chooses."""
        if self._typed(key, 0, decode):
            key = self._encode([key], 0, "key", decode)
        if self._typed(value, 1, decode):
            value = self._encode([value], 1, "value", decode)
        super().update(key, value, flags)

    def delete(self, key, *, decode=None) -> bool:
        """Delete ``key``; ``False`` when it was not there (see
        :meth:`MapHandle.delete <bpfbatch.map.handle.MapHandle.delete>` for the map types
        that cannot say so). A key in the form :meth:`items` yields is encoded by the view
        ``decode`` chooses, as :meth:`lookup` does."""
        if self._typed(key, 0, decode):
            key = self._encode([key], 0, "key", decode)
        return super().delete(key)

    def lookup_and_delete(self, key, *, decode=None):
        """Take ``key``'s value out of the map, or ``None`` when absent (a queue or stack:
        ``None`` pops). A key in the form :meth:`items` yields gives the value back in that
        form too, as :meth:`lookup` does."""
        if not self._typed(key, 0, decode):
            return super().lookup_and_delete(key)
        value = super().lookup_and_delete(self._encode([key], 0, "key", decode))
        return None if value is None else self.codecs(decode)[1].decode(value)

    def next_key(self, key, *, decode=None):
        """The key after ``key`` (the first with ``None``), or ``None`` at the end: bytes,
        or, for a key in the form :meth:`items` yields, the next in that form.

        Given bytes the map does not hold, the kernel answers with its first key. A key in
        the view's form that the map does not hold is refused instead: a view does not show
        every byte (a struct's padding, a string's bytes after its NUL), so such a key may be
        one :meth:`items` yielded, and a walk from it would start over for ever."""
        if not self._typed(key, 0, decode):
            return super().next_key(key)
        raw = self._encode([key], 0, "key", decode)
        if super().lookup(raw) is None:
            raise NotFoundError(f"get next key: no element has the key {key!r} as the view "
                                "encodes it (bytes the view does not show, such as a struct's "
                                "padding, are not matched: walk with bytes)",
                                obj=self.info.label, errno=errno.ENOENT)
        after = super().next_key(raw)
        return None if after is None else self.codecs(decode)[0].decode(after)

    # -- the batch surface ----------------------------------------------------------------

    def codecs(self, decode=None):
        """``(key codec, value codec)``: the map's view as ``decode`` chooses it, built once
        per choice (:func:`bpfbatch.records.decoding.view`, the CLI's ``--decode``):
        ``None``, the default, decodes what the CLI decodes without asking (``__be16``
        ports, ``__be32 *addr`` addresses, ``struct in6_addr``); ``"none"`` gives the stored
        values; ``"FIELD=KIND"`` or a list of them decodes those fields too. Raw bytes
        without BTF."""
        from .records.decoding import decode_options, view

        options = decode_options(decode)
        if self._codecs is None:
            self._codecs = {}
        if options not in self._codecs:
            self._codecs[options] = view(self.info, options)
        return self._codecs[options]

    def batches(self, *, batch_size: int = DEFAULT_BATCH) -> cursor.BatchCursor:
        """One pass in raw batches: zero-copy views of ``count`` packed keys and values,
        valid until the next step (:class:`~bpfbatch.map.cursor.BatchCursor`). Not an atomic
        snapshot: each hash bucket is read atomically, the map as a whole is not."""
        return cursor.BatchCursor(self, batch_size=batch_size)

    def count(self, *, batch_size: int = DEFAULT_BATCH) -> int:
        """How many elements one batched pass sees."""
        return sum(batch.count for batch in self.batches(batch_size=batch_size))

    def items(self, *, batch_size: int = DEFAULT_BATCH, decode=None
              ) -> Iterator[tuple[object, object]]:
        """Every ``(key, value)``, decoded from BTF as ``dump -o json`` prints them: ints,
        strings for printable char arrays, enum names, dicts for structs, lists for arrays,
        a list of one value per possible CPU for per-CPU maps; ``bytes`` without BTF.
        ``decode`` as :meth:`codecs` takes it: by default fields are shown as ``dump`` shows
        them (``"10.0.0.1"``, port ``443``); ``decode="none"``: as stored."""
        key_codec, value_codec = self.codecs(decode)
        for batch in self.batches(batch_size=batch_size):
            yield from zip(key_codec.decode_batch(batch.keys, batch.count),
                           value_codec.decode_batch(batch.values, batch.count))

    def to_numpy(self, *, batch_size: int = DEFAULT_BATCH) -> tuple["np.ndarray", "np.ndarray"]:
        """``(keys, values)`` as numpy structured arrays whose fields are the BTF field names
        and hold the stored values (a ``__be16`` port in network order: the fast raw path;
        :meth:`to_arrow` and :meth:`items` decode). A field numpy cannot hold as stored
        (a bitfield, a 128-bit integer, a union) is its bytes, ``uint8 × size``, under its
        name; ``uint8 × size`` rows without BTF; per-CPU values have one ``value`` slot per
        possible CPU. One copy per batch."""
        keys, values = cursor.read_all(self, batch_size=batch_size)
        key_codec, value_codec = self.codecs("none")
        return key_codec.array(keys, len(keys)), value_codec.array(values, len(values))

    def to_arrow(self, *, batch_size: int = DEFAULT_BATCH, decode=None) -> pyarrow.Table:
        """The map as a ``pyarrow.Table``, one column per BTF leaf field with the types and
        dotted names of ``dump -o parquet`` (see :mod:`bpfbatch.formats.columnar`); one
        record batch per cursor batch. ``decode`` as :meth:`items` takes it: by default,
        as ``dump -o parquet``, the automatically decoded fields hold what the map stores
        and fields named ``FIELD=KIND`` their display values. Needs the ``arrow`` extra."""
        from .formats.columnar import Columns
        from .records.codec import rows
        columns = Columns(*self.codecs(decode))
        key_size, value_size = self.info.key_size, self.info.value_stride
        batches = [columns.record_batch(rows(b.keys, b.count, key_size),
                                        rows(b.values, b.count, value_size))
                   for b in cursor.BatchCursor(self, batch_size=batch_size)]
        return columns.pa.Table.from_batches(batches, schema=columns.schema)

    def to_pandas(self, *, batch_size: int = DEFAULT_BATCH, decode=None) -> pandas.DataFrame:
        """:meth:`to_arrow` as a pandas DataFrame (enums become categoricals)."""
        return self.to_arrow(batch_size=batch_size, decode=decode).to_pandas()

    def update_items(self, items: Iterable[tuple[object, object]], *,
                     batch_size: int = DEFAULT_BATCH, jobs: int | None = 1,
                     decode=None) -> int:
        """Write ``(key, value)`` pairs in the forms :meth:`items` yields with the same
        ``decode`` (a decoded field takes its stored form too, see
        :mod:`bpfbatch.records.decoding`), or ``bytes``, with batched updates; returns how
        many were written. Every pair is encoded before the first syscall, so a bad one
        (named by its index and field) writes nothing. ``jobs`` writers share a large write
        (``None``: one per CPU; see :func:`bpfbatch.map.writes.update`)."""
        pairs = list(items)
        keys = self._encode([key for key, _ in pairs], 0, "item {}: key", decode)
        values = self._encode([value for _, value in pairs], 1, "item {}: value", decode)
        from .map import whole

        return whole.load(self, keys, values, len(pairs), batch_size=batch_size,
                          jobs=jobs).applied

    def delete_keys(self, keys: Iterable[object], *, batch_size: int = DEFAULT_BATCH,
                    decode=None) -> int:
        """Delete ``keys`` (as :meth:`items` yields them with the same ``decode``, or
        ``bytes``) with batched deletes; returns how many were deleted. Keys not in the map
        are skipped."""
        keys = list(keys)
        packed = self._encode(keys, 0, "key {}", decode)
        from .map import writes

        return writes.delete(self, packed, len(keys), batch_size=batch_size).deleted

    def drain(self, *, batch_size: int = DEFAULT_BATCH, decode=None) -> Draining:
        """Every ``(key, value)``, deleted as read (``BPF_MAP_LOOKUP_AND_DELETE_BATCH``,
        atomic per bucket), decoded as :meth:`items` (``decode`` too): an iterator
        (:class:`~bpfbatch.map.draining.Draining`) that is also a context manager.

        Nothing is lost: a pair is delivered when it is handed to the caller, and the drained
        entries not yet handed out are put back into the map (a key a program re-created
        meanwhile keeps its newer value) whenever the iteration ends early — ``break``, an
        exception, a KeyboardInterrupt, ``close()``, the iterator dropped or still alive at
        interpreter exit, or SIGTERM/SIGHUP at their default disposition (put back, then the
        process dies of the signal). The iterator holds an fd of its own on the map, so it
        outlives this Map's ``with`` block. SIGKILL loses at most one batch
        (``batch_size``)."""
        from .map.draining import Draining

        return Draining(self, *self.codecs(decode), batch_size=batch_size)

    def _typed(self, data, side: int, decode) -> bool:
        """Whether ``data`` is a key (``side`` 0) or value (1) in the form :meth:`items`
        yields for a typed side, not raw bytes (which a side without types takes only)."""
        return data is not None and not _raw(data) and self.codecs(decode)[side].typed

    def _encode(self, values: list, side: int, where: str, decode=None) -> bytes:
        """``values`` packed by the key (``side`` 0) or value (1) codec of the view
        ``decode`` chooses; ``bytes`` pass through after a size check."""
        codec = self.codecs(decode)[side]
        if all(_raw(v) for v in values):
            raws = [memoryview(v).tobytes() for v in values]
            for i, raw in enumerate(raws):
                if len(raw) != codec.size:
                    raise InputError(f"{len(raw)} bytes, the map's are {codec.size}",
                                     obj=where.format(i))
            return b"".join(raws)
        return codec.encode_batch(values, where.format)


def _raw(data) -> bool:
    """Whether ``data`` is stored bytes: ``bytes`` or an object holding them (a ctypes
    instance, as bcc's tables give keys, a numpy array or record), not a value of a view (a
    number, a dict, a string, a list). A numpy scalar is a number: its bytes are not the
    field's."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return True
    if isinstance(data, (int, float, str, list, dict, tuple)) or _numpy_scalar(data):
        return False
    try:
        memoryview(data)
    except TypeError:
        return False
    return True


def _numpy_scalar(data) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(data, np.generic) and not isinstance(data, np.void)
