"""The Python API of event maps: ``Ringbuf`` (``from bpfbatch import Ringbuf``).

    with Ringbuf.open(pinned="/sys/fs/bpf/events", type="struct event") as rb:
        for events in rb.batches(idle=1.0):      # numpy structured arrays, typed from BTF
            print(events["seq"].max())

Every array (or Arrow record batch) holds the records of one pass, copied out of the ring,
and is committed (the ring's space given back) when the next one is asked for — by
:meth:`EventReader.poll` or the ``batches()`` loop — or by :meth:`EventReader.commit`: a
process that dies with an array in hand leaves its records in the ring for the next reader.
The type is found as ``record --type`` finds it (:mod:`.types`); without one, records come
as an ``(n, size)`` uint8 array (they must share a size) and as one ``value`` binary column.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .._sys.abi import MapType
from ..errors import InputError
from . import open_stream
from .batch import Batch, StreamStats

FORMATS = ("numpy", "arrow")


class EventReader:
    """An event map's records as numpy arrays or Arrow record batches (see the module).
    Built by :meth:`open`; the reader owns the map it opened (not one it was given)."""

    #: The map type the class reads (``None``: whichever :func:`open_stream` reads).
    map_type = None

    def __init__(self, source, *, owned: bool, type=None, btf=None, decode=None, **options):
        from .types import event_type

        self.map, self._owned = source, owned
        info = source.info
        if self.map_type is not None and info.type != self.map_type:
            raise InputError(f"is a {info.type_name} map, not {self.map_type.label}",
                             obj=info.label)
        self.record_type = None if type is None else event_type(info, type, btf)
        self._decode = decode
        self.stream = open_stream(source, **self._stream_options(options))
        self._last: Batch | None = None
        self._columns = None

    @classmethod
    def open(cls, source=None, *, pinned: str | None = None, id: int | None = None,
             name: str | None = None, type: str | None = None, btf: str | None = None,
             decode=None, **options) -> "EventReader":
        """The reader of a :class:`~bpfbatch.Map` given as ``source`` (not owned), or of the
        map named by exactly one of ``pinned``, ``id``, ``name`` (opened and owned).
        ``type`` names the records' type (``"struct event"``), found in ``btf`` (an object
        file) or the BTF of the programs using the map; ``decode`` as ``Map.items`` takes
        it (Arrow columns only); ``options`` go to the map type's stream (a perf buffer's
        ``page_count``, ``order_by``...)."""
        from ..api import Map

        owned = source is None
        m = Map.open(id=id, pinned=pinned, name=name) if owned else source
        try:
            return cls(m, owned=owned, type=type, btf=btf, decode=decode, **options)
        except BaseException:
            if owned:
                m.close()
            raise

    def _stream_options(self, options: dict) -> dict:
        """The options the map type's stream is opened with (a subclass adds what it knows
        once the type is found)."""
        return options

    @property
    def dtype(self) -> np.dtype | None:
        """The records' numpy dtype (``None`` without a type)."""
        if self.record_type is None:
            return None
        from ..records.codec import codec_for

        btf, type_id = self.record_type
        return codec_for(btf, type_id, btf.size_of(type_id)).dtype

    @property
    def stats(self) -> StreamStats:
        return self.stream.stats

    def fileno(self) -> int:
        """Readable while records wait: for ``selectors``, ``asyncio``'s ``add_reader``."""
        return self.stream.fileno()

    def poll(self, timeout: float | None = None, *, format: str = "numpy", copy: bool = True):
        """Commit the previous poll's records, then every record waiting (waiting up to
        ``timeout`` seconds for the first; ``None``: until one comes) as one array or record
        batch, possibly empty. ``copy=False``: a typed numpy array that is a view of the ring,
        no copy, valid until the next poll or commit (records of one size; others copied)."""
        _check_format(format)
        self.commit()
        self._last = self.stream.poll(timeout)
        return self._convert(self._last, format, copy)

    def commit(self) -> None:
        """Give the records of the last poll back to the producer (done by the next poll)."""
        if self._last is not None:
            self._last.commit()
            self._last = None

    def batches(self, *, format: str = "numpy", idle: float | None = None,
                copy: bool = True) -> Iterator:
        """Non-empty arrays (or record batches) as they come, each committed when the next
        is asked for; ends after ``idle`` seconds without a record (``None``: never).
        ``copy=False`` as for :meth:`poll`: each array is valid until the next."""
        _check_format(format)
        self.commit()
        for batch in self.stream.batches(idle=idle):
            yield self._convert(batch, format, copy)

    def close(self) -> None:
        """Close the stream (uncommitted records stay in the ring) and an owned map."""
        self.stream.close()
        if self._owned:
            self.map.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _convert(self, batch: Batch, format: str, copy: bool):
        if format == "numpy":
            view = None if copy or self.dtype is None else batch.view(self.dtype)
            return batch.to_numpy(self.dtype) if view is None else view
        columns = self._arrow_columns(batch)
        values = batch.rows(columns.value_size)
        return columns.record_batch(np.zeros((len(values), 0), np.uint8), values)

    def _arrow_columns(self, batch: Batch):
        """The Arrow columns of the records' view, built once (untyped: by the first
        batch's record size)."""
        if self._columns is None:
            from ..formats.columnar import Columns
            from ..records.decoding import view
            from .types import event_info

            size = batch.size if self.record_type is None else None
            if self.record_type is None and size is None:
                raise InputError("records of different sizes: give their type (type=) to "
                                 "read them as one", obj=self.map.info.label)
            self._columns = Columns(*view(event_info(self.map.info, self.record_type, size),
                                          self._decode))
        return self._columns


class Ringbuf(EventReader):
    """A ring buffer map's records (:class:`EventReader`, for ``BPF_MAP_TYPE_RINGBUF``)."""

    map_type = MapType.RINGBUF


def _check_format(format: str) -> None:
    if format not in FORMATS:
        raise InputError(f"unknown format '{format}' (use {' or '.join(FORMATS)})",
                         obj="format")
