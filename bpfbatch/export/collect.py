"""One scrape: each map of the configuration read (or drained) once with the batch cursor,
every metric on it aggregated from the same batches with numpy.

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
``LOOKUP_AND_DELETE_BATCH`` through the library's drain (:func:`bpfbatch.map.whole.drain`,
which puts back a batch the exporter did not take) and adds it into counters the exporter
keeps, so the kernel map stays small and its LRU eviction never resets a series. A batch is
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
import time
from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from .._sys import abi
from ..errors import BpfBatchError, InputError
from ..map import whole
from ..map.cursor import Batch, BatchCursor, read_ahead
from ..map.handle import Map
from ..records.codec import map_codecs
from .config import Config, MapRef, Metric
from .fields import Binding, bind


class BudgetSpent(BpfBatchError):
    """The scrape's time budget ran out before this map was read."""


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
        # drain mode: what the exporter has accumulated, per metric
        self.totals: dict[str, dict] = {m.name: {} for m in metrics}
        self.overflow: dict[str, int] = defaultdict(int)  # value kept out (drain)
        self.overflow_series: dict[str, int] = {}  # label sets left out, last scrape

    def open(self) -> Map:
        return Map.open(id=self.ref.id, pinned=self.ref.pinned, name=self.ref.name,
                        read_only=not self.drain)

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

    def scrape(self, deadline: float) -> list[Series]:
        """Every metric on this map, read or drained now; raises on failure (the caller
        counts it), :class:`BudgetSpent` when the budget ran out."""
        if time.monotonic() > deadline:
            raise BudgetSpent("the scrape budget was spent before this map was read",
                              obj=str(self.ref))
        start = time.perf_counter()
        with self.open() as m:
            self.stats.map_id = m.info.id
            aggregators = self.aggregators(m)
            if self.drain:
                entries = self._drain(m, aggregators, deadline)
                result = self.accumulated()
            else:
                entries, result = self._read(m, aggregators, deadline)
        self.stats.read_seconds = time.perf_counter() - start
        self.stats.entries = entries
        return result

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

    def _drain(self, m: Map, aggregators: list[Aggregator], deadline: float) -> int:
        drained = 0  # counted as batches are taken: a spent budget ends the drain by raising

        def take(batch: Batch) -> None:
            nonlocal drained
            if time.monotonic() > deadline:
                raise BudgetSpent("scrape budget spent", obj=m.info.label)  # batch put back
            keys, values = _rows(batch, m.info)
            merged = [agg.merge([agg.part(keys, values)]) for agg in aggregators]
            for agg, series in zip(aggregators, merged):  # nothing below can fail
                self._accumulate(agg.b.metric, series)
            drained += batch.count

        self._refused: dict[str, set] = {metric.name: set() for metric in self.metrics}
        try:
            whole.drain(m, take, batch_size=self.batch_size)
        except BudgetSpent:
            pass  # what was taken is counted; the rest waits for the next scrape
        finally:
            self.overflow_series = {name: len(refused) for name, refused in self._refused.items()}
        return drained

    def _accumulate(self, metric: Metric, series: dict) -> None:
        totals = self.totals[metric.name]
        for labels, value in series.items():
            if labels not in totals and len(totals) >= metric.max_series:
                self._refused[metric.name].add(labels)
                self.overflow[metric.name] += value if isinstance(value, int) else \
                    sum(value.values())
                continue
            if isinstance(value, dict):
                slots = totals.setdefault(labels, {})
                for slot, count in value.items():
                    slots[slot] = slots.get(slot, 0) + count
            else:
                totals[labels] = totals.get(labels, 0) + value

    def accumulated(self) -> list[Series]:
        """Drain mode: the series the exporter has accumulated so far."""
        return [Series(m, dict(self.totals[m.name])) for m in self.metrics]


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
    by_map: dict[MapRef, list[Metric]] = {}
    for metric in config.metrics:
        by_map.setdefault(metric.map, []).append(metric)
    return [MapSource(ref, metrics, config.batch_size) for ref, metrics in by_map.items()]
