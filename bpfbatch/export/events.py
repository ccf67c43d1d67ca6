"""``mode = "record"``: metrics that count the events of a ring buffer or a perf event array
by their fields, as a drain counts a map's entries.

The metrics of one event map share one stream (:func:`bpfbatch.events.open_stream`), opened
when the exporter starts (or at the first scrape after a failure) and kept open: a perf event array's rings exist only while their reader
holds them, and a ring buffer's reader keeps its mapping. Each scrape takes every event
waiting (batch after batch, until the ring is empty, the scrape budget is spent or the
exporter is stopping), aggregates each batch with the drain's aggregator — the events made to
look like a keyless map whose value is ``event`` (:func:`bpfbatch.events.types.event_info`),
so labels, values and buckets are the event's fields — and adds it into *staged* counters.
The response reports them; then, as for a drain (:meth:`MapSource.settle`):

- delivered: the staged counters become the exporter's, and only now are the batches
  committed (the ring's space given back);
- not delivered: the staged counters are dropped and the stream rewound, so the next scrape
  counts the same events again.

Every scrape starts from the committed position, so an event is counted in exactly one
delivered response. A ring buffer keeps what was not committed for the next exporter too
(SIGKILL repeats at most the events of the scrape in hand); a perf event array's rings close
with the exporter. Lost events (perf: what the kernel reports dropped, per CPU), the lag and
the fill high-water mark are self-metrics.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from .._sys.abi import MapType
from ..api import Map
from ..delivery import PutBack
from ..errors import BpfBatchError, InputError
from ..records.codec import map_codecs
from .collect import Aggregator, BudgetSpent, MapSource, Series, _accumulate
from .fields import bind

#: The map types a record-mode metric reads.
EVENT_MAPS = (MapType.RINGBUF, MapType.PERF_EVENT_ARRAY)


@dataclasses.dataclass
class _Counted:
    """A batch the unsettled scrape counted (its ``count`` is what the exporter's settle
    tallies)."""

    batch: object
    count: int


class EventSource(MapSource):
    """The record-mode metrics of one event map, across scrapes (the interface of
    :class:`MapSource`; its counters accumulate as a drain's do)."""

    def __init__(self, ref, metrics, batch_size: int):
        super().__init__(ref, metrics, batch_size)
        self.drain = True  # reports what it accumulated, as a drain does
        self.stream = None
        self._map: Map | None = None
        self._width = 0

    def open(self) -> Map:
        return Map.open(id=self.ref.id, pinned=self.ref.pinned, name=self.ref.name)

    def start(self) -> None:
        """Open the stream before the exporter listens: a perf event array's events are
        kept only from the moment its rings are in the map."""
        if self.stream is None:
            self._open_stream()

    def aggregators(self, m: Map) -> list[Aggregator]:
        """The metrics bound to the events' type in ``m`` (cached per map)."""
        from ..events.types import event_info, event_type

        i = m.info
        if self._bound is None or self._bound[0] != i.id:
            metric = self.metrics[0]
            if i.type not in EVENT_MAPS:
                raise InputError(f"metric '{metric.name}': mode: record reads ringbuf and "
                                 f"perf_event_array maps ({i.label} is {i.type_name})",
                                 obj=metric.place("mode"))
            try:
                kind = event_type(i, metric.event, metric.btf)
            except BpfBatchError as exc:
                raise InputError(f"metric '{metric.name}': event: {exc}",
                                 obj=metric.place("event")) from None
            events = event_info(i, kind, None)
            self._width = events.value_size
            codecs = map_codecs(events)
            self._bound = (i.id, [Aggregator(bind(metric, events, codecs))
                                  for metric in self.metrics])
        return self._bound[1]

    def scrape(self, deadline: float, *, journal=None,
               stopping: Callable[[], bool] = lambda: False) -> list[Series]:
        """Every event waiting, counted into staged counters (see the module); the batches
        wait in :attr:`taken` for :meth:`settle`."""
        if time.monotonic() > deadline:
            raise BudgetSpent("the scrape budget was spent before this map was read",
                              obj=str(self.ref))
        start = time.perf_counter()
        try:
            events = self._count(deadline, stopping)
        except BpfBatchError:
            self._close()  # opened afresh at the next scrape (the map may have been replaced)
            raise
        self.stats.read_seconds = time.perf_counter() - start
        self.stats.entries = events
        return self.accumulated()

    def _count(self, deadline: float, stopping: Callable[[], bool]) -> int:
        if self.stream is None:
            self._open_stream()
        self.stream.rewind()  # what an earlier scrape took and did not settle: again
        aggregators = self._bound[1]
        self.staged = staged = self.counts.copy()
        refused: dict[str, set] = {metric.name: set() for metric in self.metrics}
        events = 0
        try:
            while not stopping() and time.monotonic() <= deadline:
                batch = self.stream.poll(0)
                if not len(batch):
                    break
                values = batch.rows(self._width)
                keys = np.zeros((len(values), 0), np.uint8)
                merged = [agg.merge([agg.part(keys, values)]) for agg in aggregators]
                self.taken.append(_Counted(batch, len(batch)))
                for agg, series in zip(aggregators, merged):  # nothing below can fail
                    _accumulate(staged, agg.b.metric, series, refused[agg.b.metric.name])
                events += len(batch)
        finally:
            self.overflow_series = {name: len(labels) for name, labels in refused.items()}
        return events

    def _open_stream(self) -> None:
        from ..events import open_stream

        m = self.open()
        try:
            self.aggregators(m)
            self.stream = open_stream(m)
        except BaseException:
            m.close()
            raise
        self._map = m
        self.stats.map_id = m.info.id

    def settle(self, delivered: bool) -> PutBack | None:
        """Delivered: the staged counts are the exporter's and the batches are committed.
        Not: both dropped, and the events are counted again by the next scrape (reported as
        put back: they stay in the ring)."""
        taken, self.taken = self.taken, []
        if delivered:
            self.counts = self.staged
            for counted in taken:
                counted.batch.commit()
            return None
        self.staged = self.counts
        return PutBack(sum(counted.count for counted in taken)) if taken else None

    @property
    def event_stats(self):
        """The stream's :class:`~bpfbatch.events.batch.StreamStats` (``None``: not open)."""
        return None if self.stream is None else self.stream.stats

    def lost(self) -> dict[int, int]:
        """Events the kernel reported lost, per CPU, as this scrape's response reports
        them: the committed batches' and those of the batches it counted (committed once
        the response is delivered)."""
        lost = dict(self.stream.stats.lost) if self.stream is not None else {}
        for counted in self.taken:
            for _, cpu, count in getattr(counted.batch, "losses", None) or ():
                lost[cpu] = lost.get(cpu, 0) + count
        return lost

    def _close(self) -> None:
        stream, self.stream = self.stream, None
        if stream is not None:
            stream.close()
        if self._map is not None:
            self._map.close()
            self._map = None
        self._bound = None
        self.taken, self.staged = [], self.counts  # nothing of the failed scrape counts
