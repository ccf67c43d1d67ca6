"""One scrape: each map of the configuration read (or drained) once with the batch cursor,
every metric on it aggregated from the same batches with numpy (event maps, ``mode =
"record"``: :mod:`.events`).

Aggregation. Each entry contributes its value (summed over every possible CPU for a per-CPU
map) to the series named by its label fields' bytes; entries whose labels are equal are summed,
so a metric labelled by ``dport`` only aggregates a flow table. Sums are exact: a value is
split into its high and low 32 bits, each summed in 64 bits per series, and joined as a Python
int (Prometheus then holds it as a float64, as every exporter does). Labels are decoded once
per distinct label bytes, not once per entry; two byte patterns a decoder prints alike are one
series.

Modes. ``read`` reports the map as it is, the kernel copying the next batch while the current
one is aggregated (:func:`~bpfbatch.map.cursor.read_ahead`). Read is not a snapshot (see the README): each bucket
is read atomically, the map as a whole is not. ``drain`` takes every entry out with
``LOOKUP_AND_DELETE_BATCH`` through the library's delivery step (:func:`bpfbatch.map.whole.
drain`: a batch the exporter did not take is put back) and adds it into counters the exporter
keeps, so the kernel map stays small and its LRU eviction never resets a series. Taking a
batch is journaling it (:mod:`.journal`) and adding it into a *staged* copy of the counters;
the scrape's response reports the staged counters, and the server settles the scrape
(:meth:`MapSource.settle`): delivered, the staged counters become the counters; not, the
batches taken are put back into the map and the staged counters dropped. A batch is
aggregated completely before anything is added, so it counts whole or not at all.

Guards. ``max_series`` per metric: in read mode the largest series are kept and the number
left out is reported; in drain mode a label set first seen when the metric already holds
``max_series`` series is not created, and its value goes to an overflow counter, so the total
still adds up. The scrape budget: once spent, no further batch is read; a map whose read was
cut short reports nothing this scrape (a partial sum would look like a counter reset), a
drain stops with what it has taken (the rest stays for the next scrape).
"""

from __future__ import annotations

import dataclasses
import errno
import time
from collections.abc import Callable, Iterable

import numpy as np

from .._sys import abi
from ..api import Map
from ..delivery import PutBack
from ..errors import BpfBatchError, InputError
from ..map import whole
from ..map.cursor import Batch, BatchCursor, read_ahead
from ..records.codec import map_codecs
from .config import Config, MapRef, Metric
from .fields import Binding, bind
from .journal import Journal


class BudgetSpent(BpfBatchError):
    """The scrape's time budget ran out before this map was read."""


class Stopping(BpfBatchError):
    """The exporter is stopping: a drain takes no further batch."""


@dataclasses.dataclass
class Series:
    """What one metric reports: label values → value (histograms: → {slot: count})."""

    metric: Metric
    values: dict[tuple[str, ...], object] = dataclasses.field(default_factory=dict)
    overflow_series: int = 0  # series not reported (max_series)


@dataclasses.dataclass
class MapStats:
    """Self-metrics of one map, kept across scrapes."""

    read_seconds: float = 0.0
    entries: int = 0
    errors: int = 0
    last_success: float = 0.0
    last_error: str = ""
    map_id: int = 0


@dataclasses.dataclass
class Counts:
    """Drain mode: what the exporter has accumulated per metric (label values → value), and
    the value drained into label sets over ``max_series``."""

    totals: dict[str, dict]
    overflow: dict[str, int]

    def copy(self) -> Counts:
        return Counts({name: {labels: dict(v) if isinstance(v, dict) else v
                              for labels, v in series.items()}
                       for name, series in self.totals.items()}, dict(self.overflow))


class _Part:
    """One batch's contribution to one metric: group keys and their sums."""

    __slots__ = ("groups", "sums")

    def __init__(self, groups: np.ndarray, sums: list[int]):
        self.groups = groups
        self.sums = sums


class Aggregator:
    """Turns batches of one map into per-metric sums, for one :class:`Binding`."""

    def __init__(self, binding: Binding):
        self.b = binding
        self.group_columns = binding.labels + ((binding.bucket,) if binding.bucket else ())
        widths = [c.width for c in self.group_columns]
        self.width = sum(widths)
        self.packed = self.width <= 8  # group keys as uint64: a fast integer sort

    def part(self, keys: np.ndarray, values: np.ndarray) -> _Part:
        """This metric over one batch (``keys`` ``count × key_size`` uint8, ``values``
        ``count × value_stride``)."""
        n = keys.shape[0]
        groups = self._group_keys(keys, values, n)
        if groups is None:  # no labels: one series
            unique, inverse = np.zeros(1, np.uint64), np.zeros(n, np.intp)
        else:
            unique, inverse = np.unique(groups, return_inverse=True)
            inverse = inverse.reshape(-1)
        if self.b.value is None:
            return _Part(unique, np.bincount(inverse, minlength=len(unique)).tolist())
        hi = np.zeros(len(unique), np.int64 if self.b.value.signed else np.uint64)
        lo = np.zeros(len(unique), np.uint64)
        for cpu in range(self.b.cpus):
            column = self.b.value.integers(keys, values, cpu * self.b.cpu_stride)
            np.add.at(hi, inverse, column >> 32)
            np.add.at(lo, inverse, column.astype(np.uint64) & np.uint64(0xFFFFFFFF))
        return _Part(unique, [(h << 32) + low for h, low in zip(hi.tolist(), lo.tolist())])

    def _group_keys(self, keys, values, n) -> np.ndarray | None:
        if not self.group_columns:
            return None
        raw = np.concatenate([c.slice(keys, values) for c in self.group_columns], axis=1) \
            if len(self.group_columns) > 1 else self.group_columns[0].slice(keys, values)
        if self.packed:
            padded = np.zeros((n, 8), np.uint8)
            padded[:, :self.width] = raw
            return padded.view(np.uint64).reshape(-1)
        return np.ascontiguousarray(raw).view(f"V{self.width}").reshape(-1)

    def merge(self, parts: Iterable[_Part]) -> dict[tuple[str, ...], object]:
        """Sum parts into series: label values → int (histograms: → {slot: int})."""
        parts = list(parts)
        if len(parts) == 1:
            groups, sums = parts[0].groups, parts[0].sums
        elif parts:
            groups = np.concatenate([p.groups for p in parts])
            unique, inverse = np.unique(groups, return_inverse=True)
            totals = [0] * len(unique)
            for i, s in zip(inverse.reshape(-1).tolist(),
                            (s for p in parts for s in p.sums)):
                totals[i] += s
            groups, sums = unique, totals
        elif self.b.labels:
            return {}
        else:  # a metric without labels reports its one series even when the map is empty
            return {(): {} if self.b.bucket else 0}
        return self._label(groups, sums)

    def _label(self, groups: np.ndarray, sums: list[int]) -> dict[tuple[str, ...], object]:
        """Group keys → label texts (each label decoded once per distinct group)."""
        rows = self._group_rows(groups)
        columns, at = [], 0
        for column, texts in zip(self.b.labels, self.b.formats):
            columns.append(texts(rows[:, at:at + column.width]))
            at += column.width
        out: dict = {}
        label_sets = list(zip(*columns)) if columns else [()] * len(sums)
        if self.b.bucket is None:
            for labels, total in zip(label_sets, sums):
                out[labels] = out.get(labels, 0) + total
            return out
        slots = self.b.bucket.decode(rows[:, at:]).tolist()
        for labels, slot, total in zip(label_sets, slots, sums):
            per_slot = out.setdefault(labels, {})
            per_slot[slot] = per_slot.get(slot, 0) + total
        return out

    def _group_rows(self, groups: np.ndarray) -> np.ndarray:
        """Group keys back to ``count × width`` uint8 rows of the group columns' bytes."""
        if not self.group_columns:
            return np.zeros((len(groups), 0), np.uint8)
        step = 8 if self.packed else self.width
        return np.frombuffer(groups.tobytes(), np.uint8).reshape(-1, step)[:, :self.width]


def _rows(batch: Batch, info) -> tuple[np.ndarray, np.ndarray]:
    keys = np.frombuffer(batch.keys, np.uint8, batch.count * info.key_size)
    values = np.frombuffer(batch.values, np.uint8, batch.count * info.value_stride)
    return keys.reshape(batch.count, info.key_size), values.reshape(batch.count,
                                                                     info.value_stride)


class MapSource:
    """One map of the configuration and the metrics on it, across scrapes.

    The map is opened at each scrape and closed after it: a program reloaded meanwhile
    (a new map under the same pin or name) is picked up, and the exporter never keeps a
    replaced map alive. Bindings are cached per map layout (BTF object and types), so an
    unchanged map costs no BTF parsing after the first scrape.
    """

    def __init__(self, ref: MapRef, metrics: list[Metric], batch_size: int):
        self.ref = ref
        self.metrics = metrics
        self.drain = metrics[0].mode == "drain"
        self.batch_size = batch_size
        self.stats = MapStats()
        self._bound: tuple[tuple, list[Aggregator]] | None = None
        # drain mode: the delivered counts, and those of the scrape not yet settled
        self.counts = Counts({m.name: {} for m in metrics}, {m.name: 0 for m in metrics})
        self.staged = self.counts
        self.taken: list[Batch] = []  # copies of the batches drained and not yet settled
        self.overflow_series: dict[str, int] = {}  # label sets left out, last scrape

    def open(self) -> Map:
        return Map.open(id=self.ref.id, pinned=self.ref.pinned, name=self.ref.name,
                        read_only=not self.drain)

    def start(self) -> None:
        """Before the exporter listens: nothing for a map, which each scrape opens."""

    def aggregators(self, m: Map) -> list[Aggregator]:
        """The metrics bound to ``m``'s layout (cached while the layout stays the same)."""
        i = m.info
        layout = (i.type, i.key_size, i.value_size, i.btf_id, i.btf_key_type_id,
                  i.btf_value_type_id)
        if self._bound is None or self._bound[0] != layout:
            if self.drain and i.type not in abi.HASH_TYPES:
                metric = self.metrics[0]
                raise InputError(f"metric '{metric.name}': mode: drain needs a hash-type map "
                                 f"({i.label} is {i.type_name}, whose elements cannot be "
                                 "deleted)", obj=metric.place("mode"))
            codecs = map_codecs(i)
            self._bound = (layout, [Aggregator(bind(metric, i, codecs))
                                    for metric in self.metrics])
        return self._bound[1]

    def scrape(self, deadline: float, *, journal: Journal | None = None,
               stopping: Callable[[], bool] = lambda: False) -> list[Series]:
        """Every metric on this map, read or drained now; raises on failure (the caller
        counts it), :class:`BudgetSpent` when the budget ran out. A drain journals each batch
        in ``journal`` and stops taking batches once ``stopping()``; what it took waits in
        :attr:`taken` for :meth:`settle`."""
        if time.monotonic() > deadline:
            raise BudgetSpent("the scrape budget was spent before this map was read",
                              obj=str(self.ref))
        start = time.perf_counter()
        with self.open() as m:
            self.stats.map_id = m.info.id
            aggregators = self.aggregators(m)
            if self.drain:
                entries = self._drain(m, aggregators, deadline, journal, stopping)
                result = self.accumulated()
            else:
                entries, result = self._read(m, aggregators, deadline)
        self.stats.read_seconds = time.perf_counter() - start
        self.stats.entries = entries
        return result

    def settle(self, delivered: bool) -> PutBack | None:
        """End the drain of the last scrape: ``delivered``, its counts are the exporter's;
        not, the entries it took go back into the map (``None``: it took nothing)."""
        taken, self.taken = self.taken, []
        if delivered:
            self.counts = self.staged
            return None
        self.staged = self.counts
        return restore(self.ref, taken) if taken else None

    def _read(self, m: Map, aggregators: list[Aggregator], deadline: float):
        parts: list[list[_Part]] = [[] for _ in aggregators]
        entries = 0
        for batch in read_ahead(BatchCursor(m, batch_size=self.batch_size)):
            keys, values = _rows(batch, m.info)
            for agg, acc in zip(aggregators, parts):
                acc.append(agg.part(keys, values))
            entries += batch.count
            if time.monotonic() > deadline:
                raise BudgetSpent(f"the scrape budget ran out after {entries} entries; this "
                                  "map is left out of this scrape", obj=m.info.label)
        result = []
        for agg, acc in zip(aggregators, parts):
            series = Series(agg.b.metric, agg.merge(acc))
            _limit(series, agg.b.metric.max_series)
            self.overflow_series[agg.b.metric.name] = series.overflow_series
            result.append(series)
        return entries, result

    def _drain(self, m: Map, aggregators: list[Aggregator], deadline: float,
               journal: Journal | None, stopping: Callable[[], bool]) -> int:
        i = m.info
        self.staged = staged = self.counts.copy()
        refused: dict[str, set] = {metric.name: set() for metric in self.metrics}

        def take(batch: Batch) -> None:
            if stopping():
                raise Stopping("the exporter is stopping", obj=i.label)  # batch put back
            if time.monotonic() > deadline:
                raise BudgetSpent("scrape budget spent", obj=i.label)  # batch put back
            keys, values = _rows(batch, i)
            merged = [agg.merge([agg.part(keys, values)]) for agg in aggregators]
            if journal is not None:
                journal.append(self.ref, i.key_size, i.value_stride, batch)
            self.taken.append(Batch(batch.count, bytes(batch.keys), bytes(batch.values)))
            for agg, series in zip(aggregators, merged):  # nothing below can fail
                _accumulate(staged, agg.b.metric, series, refused[agg.b.metric.name])

        try:
            whole.drain(m, take, batch_size=self.batch_size)
        except (BudgetSpent, Stopping):
            pass  # what was taken is counted; the rest waits for the next scrape
        finally:
            self.overflow_series = {name: len(labels) for name, labels in refused.items()}
        return sum(batch.count for batch in self.taken)

    def accumulated(self) -> list[Series]:
        """Drain mode: the series the exporter reports now (its counts and the drain of this
        scrape)."""
        return [Series(m, dict(self.staged.totals[m.name])) for m in self.metrics]


def _accumulate(counts: Counts, metric: Metric, series: dict, refused: set) -> None:
    """Add one batch's ``series`` of ``metric`` into ``counts``; label sets new beyond
    ``max_series`` go to the overflow counter (and into ``refused``)."""
    totals = counts.totals[metric.name]
    for labels, value in series.items():
        if labels not in totals and len(totals) >= metric.max_series:
            refused.add(labels)
            counts.overflow[metric.name] += value if isinstance(value, int) else \
                sum(value.values())
            continue
        if isinstance(value, dict):
            slots = totals.setdefault(labels, {})
            for slot, count in value.items():
                slots[slot] = slots.get(slot, 0) + count
        else:
            totals[labels] = totals.get(labels, 0) + value


def restore(ref: MapRef, batches: list[Batch]) -> PutBack:
    """Put drained ``batches`` back into the map ``ref`` names now (a program reloaded since
    gets them in its new map), through the library's put-back: a key a writer re-created
    keeps the writer's value and counts as superseded; what cannot be written (the map is
    gone, or its layout changed) counts as lost."""
    count = sum(b.count for b in batches)
    try:
        with Map.open(id=ref.id, pinned=ref.pinned, name=ref.name) as m:
            i = m.info
            if any(len(b.keys) != b.count * i.key_size or
                   len(b.values) != b.count * i.value_stride for b in batches):
                return PutBack(0, lost=count, errno=errno.EINVAL)
            return whole.put_back(m, Batch(count, b"".join(b.keys for b in batches),
                                           b"".join(b.values for b in batches)))
    except BpfBatchError as exc:
        return PutBack(0, lost=count, errno=exc.errno or errno.EIO)


def _limit(series: Series, max_series: int) -> None:
    """Keep the ``max_series`` largest series (ties by labels), count the others."""
    if len(series.values) <= max_series:
        return
    def size(item):
        value = item[1]
        return -(sum(value.values()) if isinstance(value, dict) else value), item[0]
    kept = sorted(series.values.items(), key=size)[:max_series]
    series.overflow_series = len(series.values) - max_series
    series.values = dict(kept)


def sources(config: Config) -> list[MapSource]:
    """One :class:`MapSource` per map of the configuration (metrics sharing a map share the
    read), in the order the maps first appear."""
    from .events import EventSource

    by_map: dict[MapRef, list[Metric]] = {}
    for metric in config.metrics:
        by_map.setdefault(metric.map, []).append(metric)
    return [(EventSource if metrics[0].mode == "record" else MapSource)(
        ref, metrics, config.batch_size) for ref, metrics in by_map.items()]
