"""Event streams: BPF ring buffers and perf event arrays, read in batches.

A map's events are read by one :class:`~.batch.EventStream` per map, whichever the map type:
:func:`open_stream` picks the reader. Every reader hands out :class:`~.batch.Batch` objects
(everything that was waiting, taken in one pass) and moves the kernel's consumer position only
when the batch is committed, after the caller has written it: a fault before the commit leaves
the events in the ring for the next reader (see :mod:`.batch` for the whole contract).
"""

from __future__ import annotations

from .batch import Batch, EventStream, StreamStats

__all__ = ["Batch", "EventStream", "StreamStats", "open_stream"]


def open_stream(source, **options) -> EventStream:
    """The reader for the event map ``source`` (a :class:`~bpfbatch.Map`, which the stream
    does not own), by map type: ``ringbuf`` → :class:`.ringbuf.RingbufStream`,
    ``perf_event_array`` → :class:`.perf.PerfStream`. Anything else is refused with a line naming the
    map and its type."""
    from .._sys.abi import MapType
    from ..errors import InputError

    kind = source.info.type
    if kind == MapType.RINGBUF:
        from .ringbuf import RingbufStream

        return RingbufStream(source, **options)
    if kind == MapType.PERF_EVENT_ARRAY:
        from .perf import PerfStream

        return PerfStream(source, **options)
    raise InputError(f"{source.info.label} is a {source.info.type_name} map, not an event "
                     "map (ringbuf or perf_event_array)", obj="MAP")
