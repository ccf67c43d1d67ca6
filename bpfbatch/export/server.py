"""The Prometheus side: a collector that runs one scrape per ``/metrics`` request and settles
its drains, its self-metrics, ``--check``, and :func:`serve` (start-up checks, the journal's
recovery, signals; the HTTP side is :mod:`.response`).

Scrapes are serialised (a drain must not run twice at once), and each runs within the
configured budget. A map that fails (gone, ambiguous name, fields that no longer fit its BTF)
is left out of that scrape, counted in ``bpfbatch_export_map_errors_total`` and logged when
its error changes; the other maps are reported. A drain-mode metric always reports what the
exporter has accumulated, whatever its map did this scrape.

Self-metrics, labelled by ``map`` (the pin path, the name, or ``id:N``) or ``metric``::

    bpfbatch_export_map_read_seconds        time of the last read or drain of the map
    bpfbatch_export_map_entries             entries it returned
    bpfbatch_export_map_id                  kernel id of the map last read (changes on reload)
    bpfbatch_export_map_errors_total        scrapes in which the map failed
    bpfbatch_export_map_last_success_timestamp_seconds
    bpfbatch_export_series_overflow         series over max_series left out of this scrape
    bpfbatch_export_overflow_total          (drain) value drained into series over max_series
    bpfbatch_export_events_lost_total       (record) events the kernel reported lost, per CPU
    bpfbatch_export_events_lag_bytes        (record) bytes not yet consumed
    bpfbatch_export_events_fill_high_water  (record) the ring's fullest, as a fraction
    bpfbatch_export_budget_exceeded_total   scrapes that ran out of budget
    bpfbatch_export_scrape_seconds          time this scrape spent reading maps
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric as Family,
)
from prometheus_client.utils import floatToGoString

from .. import interrupts
from ..errors import BpfBatchError, Interrupted, errno_name
from . import collect, response
from .collect import BudgetSpent, MapSource, Series
from .config import Config, Metric
from .journal import Journal, default_path


class Exporter:
    """A prometheus-client collector over the maps of ``config``.

    A scrape (:meth:`collect`) reads or drains every map; :meth:`settle` then says whether
    its response was delivered, which decides what becomes of the entries its drains took.
    The caller holds :attr:`lock` across the two: scrapes are serialised (a drain must not run
    twice at once, and the next scrape reports the counts the last one settled).
    """

    def __init__(self, config: Config, *, log: Callable[[str], None] | None = None,
                 journal: Journal | None = None):
        self.config = config
        self.sources = collect.sources(config)
        self.journal = journal
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.budget_exceeded = 0
        self.scrapes = 0
        self.delivered = 0  # drained entries delivered in responses, since start-up
        self.put_back = 0   # drained entries put back into their maps
        self.log = log or (lambda line: print(f"bpfbatch export: {line}", file=sys.stderr,
                                              flush=True))

    def describe(self) -> list:
        return []  # registering must not run a scrape

    def collect(self) -> Iterator[Family]:
        yield from self._scrape()

    def taken(self) -> int:
        """Entries the scrape not yet settled has drained."""
        return sum(batch.count for source in self.sources for batch in source.taken)

    def settle(self, delivered: bool, why: str = "") -> None:
        """End the last scrape: its response was ``delivered`` (its drained entries are the
        client's), or not (``why``), and what its drains took is put back into the maps."""
        taken = self.taken()
        if delivered:
            self.delivered += taken
        for source in self.sources:
            put_back = source.settle(delivered)
            if put_back is not None:
                self.put_back += put_back.restored
                self.log(f"{source.ref}: the scrape's response was not delivered ({why}): "
                         f"{put_back}")
        if self.journal is not None and taken:
            self.journal.clear()
        self.scrapes += 1

    def recover(self) -> None:
        """Put back what a killed predecessor journaled and never settled; refuses to go on
        (keeping the journal) when a map cannot take its entries back."""
        records, torn = self.journal.records()
        by_map: dict = {}
        for record in records:
            by_map.setdefault(record.ref, []).append(record.batch)
        for ref, batches in by_map.items():
            count = sum(b.count for b in batches)
            put_back = collect.restore(ref, batches)
            self.log(f"{ref}: {count} entries drained and not delivered before the last exit: "
                     f"{put_back}")
            if put_back.lost:
                raise BpfBatchError(f"{put_back.lost} drained entries of {ref} could not be "
                                    f"put back ({errno_name(put_back.errno or 0)}); remove "
                                    "the journal to drop them", obj=self.journal.path)
        if torn:
            self.log(f"{self.journal.path}: the last batch journaled was torn by the death of "
                     "the exporter (the one batch SIGKILL may lose)")
        self.journal.clear()

    def _scrape(self) -> Iterator[Family]:
        start = time.monotonic()
        deadline = start + self.config.budget_s
        spent = False
        families = []
        for source in self.sources:
            try:
                result = source.scrape(deadline, journal=self.journal,
                                       stopping=self.stopping.is_set)
            except BudgetSpent as exc:
                spent = True
                result = self._failed(source, exc, count=False)
            except BpfBatchError as exc:
                result = self._failed(source, exc, count=True)
            else:
                source.stats.last_success = time.time()
                if source.stats.last_error:
                    self.log(f"{source.ref}: read again")
                    source.stats.last_error = ""
            families.extend(family(series) for series in result)
        if self.config.inventory is not None:
            from . import inventory

            families.extend(inventory.families(self.config.inventory))
        self.budget_exceeded += spent
        yield from families
        yield from self._self_metrics(time.monotonic() - start)

    def _failed(self, source: MapSource, exc: BpfBatchError, *, count: bool) -> list[Series]:
        if count:
            source.stats.errors += 1
        if str(exc) != source.stats.last_error:
            self.log(str(exc))
            source.stats.last_error = str(exc)
        return source.accumulated() if source.drain else []

    def _self_metrics(self, seconds: float) -> Iterator[Family]:
        gauges = {
            "map_read_seconds": "Time of the last read or drain of the map.",
            "map_entries": "Entries the last read or drain of the map returned.",
            "map_id": "Kernel id of the map last read (it changes when a program is reloaded).",
            "map_last_success_timestamp_seconds": "When the map was last read successfully.",
        }
        values = {
            "map_read_seconds": lambda s: s.read_seconds, "map_entries": lambda s: s.entries,
            "map_id": lambda s: s.map_id,
            "map_last_success_timestamp_seconds": lambda s: s.last_success,
        }
        for name, text in gauges.items():
            g = GaugeMetricFamily(f"bpfbatch_export_{name}", text, labels=["map"])
            for source in self.sources:
                g.add_metric([str(source.ref)], values[name](source.stats))
            yield g
        errors = CounterMetricFamily("bpfbatch_export_map_errors",
                                     "Scrapes in which reading the map failed.", labels=["map"])
        for source in self.sources:
            errors.add_metric([str(source.ref)], source.stats.errors)
        yield errors
        overflow = GaugeMetricFamily("bpfbatch_export_series_overflow",
                                     "Series over max_series left out of this scrape.",
                                     labels=["metric"])
        drained = CounterMetricFamily("bpfbatch_export_overflow",
                                      "Drain mode: value drained into label sets over "
                                      "max_series, kept out of the metric.", labels=["metric"])
        for source in self.sources:
            for metric in source.metrics:
                overflow.add_metric([metric.name], source.overflow_series.get(metric.name, 0))
                if source.drain:
                    drained.add_metric([metric.name], source.staged.overflow[metric.name])
        yield overflow
        if any(source.drain for source in self.sources):
            yield drained
        yield from _event_metrics(self.sources)
        yield CounterMetricFamily("bpfbatch_export_budget_exceeded",
                                  "Scrapes that ran out of their time budget.",
                                  value=self.budget_exceeded)
        yield GaugeMetricFamily("bpfbatch_export_scrape_seconds",
                                "Time this scrape spent reading maps.", value=seconds)


def _event_metrics(sources) -> Iterator[Family]:
    """Record mode: per event map, the events the producer could not hand over as the
    kernel reports them (perf: ``PERF_RECORD_LOST``, per CPU), the consumer's lag and the
    ring's fill high-water mark (a ring buffer's producer counts its own failures)."""
    streams = [(str(source.ref), source.event_stats, source.lost()) for source in sources
               if getattr(source, "event_stats", None) is not None]
    if not streams:
        return
    lost = CounterMetricFamily("bpfbatch_export_events_lost",
                               "Record mode: events the kernel reported lost (perf event "
                               "arrays: PERF_RECORD_LOST), per CPU.", labels=["map", "cpu"])
    lag = GaugeMetricFamily("bpfbatch_export_events_lag_bytes",
                            "Record mode: bytes written to the ring(s) and not yet consumed, "
                            "at the last scrape.", labels=["map"])
    high = GaugeMetricFamily("bpfbatch_export_events_fill_high_water",
                             "Record mode: the fullest the ring (the fullest CPU's) was seen, "
                             "as a fraction of its size.", labels=["map"])
    for ref, stats, lost_per_cpu in streams:
        for cpu, count in sorted(lost_per_cpu.items()):
            lost.add_metric([ref, str(cpu)], count)
        lag.add_metric([ref], stats.lag_bytes)
        high.add_metric([ref], stats.high_water)
    yield from (lost, lag, high)


def family(series: Series) -> Family:
    """The Prometheus metric family of one metric's series."""
    m = series.metric
    names = [label.name for label in m.labels]
    if m.type == "histogram":
        return _histogram(m, names, series.values)
    cls = CounterMetricFamily if m.type == "counter" else GaugeMetricFamily
    fam = cls(m.name, m.help, labels=names)
    for labels, value in series.values.items():
        fam.add_metric(list(labels), value)
    return fam


def _histogram(m: Metric, names: list[str], values: dict) -> Family:
    """Cumulative ``_bucket`` series over the configured slots, ``+Inf`` and ``_count``. No
    ``_sum``: a slot histogram does not know the sum of what it counted."""
    fam = Family(m.name, m.help, "histogram")
    bounds = [floatToGoString(m.bucket.upper_bound(slot)) for slot in range(m.bucket.max + 1)]
    for labels, slots in values.items():
        base = dict(zip(names, labels))
        ordered = sorted(slots.items())
        total, at = 0, 0
        for slot, bound in enumerate(bounds):
            while at < len(ordered) and ordered[at][0] <= slot:
                total += ordered[at][1]
                at += 1
            fam.add_sample(f"{m.name}_bucket", {**base, "le": bound}, total)
        count = sum(slots.values())
        fam.add_sample(f"{m.name}_bucket", {**base, "le": "+Inf"}, count)
        fam.add_sample(f"{m.name}_count", base, count)
    return fam


def check(config: Config) -> list[str]:
    """Bind every metric to its live map (nothing is read or drained); one line per metric.
    Raises the first error, naming ``file:line``. The exporter runs it before it listens, so
    no error of the configuration is first found by a scrape."""
    lines = []
    for source in collect.sources(config):
        with source.open() as m:
            for agg in source.aggregators(m):
                b, i = agg.b, m.info
                parts = [f"value {b.value.path}" if b.value else "count of entries"]
                if b.labels:
                    parts.append("labels " + ", ".join(label.name for label in b.metric.labels))
                if b.bucket:
                    parts.append(f"bucket {b.bucket.path} ({b.metric.bucket.type})")
                lines.append(f"{b.metric.name}: {b.metric.type}, {b.metric.mode} {i.label} "
                             f"({i.type_name}, {i.max_entries} max entries): "
                             + "; ".join(parts))
    if config.inventory is not None:
        from . import inventory

        lines.append(inventory.describe(config.inventory))
    return lines


def serve(config: Config, *, announce: Callable[[str], None]) -> None:
    """Check the configuration against the live maps, put back what a killed predecessor
    left in the drain journal, then serve ``/metrics`` until SIGINT, SIGTERM or SIGHUP, which
    raise :class:`~bpfbatch.errors.Interrupted` once the scrape in progress is settled
    (its response delivered, or its drained entries put back). During start-up a signal
    raises it at once (a recovery cut short leaves the journal for the next start).
    ``announce`` receives the address actually bound (``--listen`` port 0 picks a free one)."""
    signals: list[int] = []
    exporter: Exporter | None = None  # set once serving: a signal then only stops the loop

    def on_signal(signum, _frame):
        # Once serving, only noted: the handler runs in the main thread, which it may find
        # inside a lock its call would need (Event.set() while Event.wait() held the
        # condition's lock deadlocked the exporter); the serving loop sees the note.
        signals.append(signum)
        if exporter is None:
            raise Interrupted(signum, message="while starting: nothing was served")

    previous = {sig: signal.signal(sig, on_signal) for sig in interrupts.TERMINATING}
    journal = None
    try:
        check(config)
        if any(metric.mode == "drain" for metric in config.metrics):
            journal = Journal(config.journal or default_path(config.path))
        starting = Exporter(config, journal=journal)
        if journal is not None:
            starting.recover()
        for source in starting.sources:
            source.start()
        server = _listen(config.listen, starting)
        exporter = starting
        _run(server, exporter, announce, lambda: bool(signals))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if journal is not None:
            journal.close()
    drained = f"; {exporter.delivered} drained entries delivered, {exporter.put_back} put " \
              "back" if journal is not None else ""
    raise Interrupted(signals[0], message=f"after {exporter.scrapes} scrapes{drained}")


def _listen(address: tuple[str, int], exporter: Exporter) -> response.MetricsServer:
    host, port = address
    try:
        return response.MetricsServer((host, port), exporter)
    except OSError as exc:
        raise BpfBatchError(f"cannot listen: {exc.strerror or exc}", obj=f"{host}:{port}",
                            errno=exc.errno) from None


#: How often the serving loop looks for a signal its handler noted (seconds).
_SIGNAL_POLL = 0.05


def _run(server: response.MetricsServer, exporter: Exporter,
         announce: Callable[[str], None], signalled: Callable[[], bool]) -> None:
    """Serve until ``signalled()``; then set :attr:`Exporter.stopping`, accept nothing more
    and return once the scrape in progress is settled (the lock is kept: no other starts)."""
    thread = threading.Thread(target=server.serve_forever, name="bpfbatch-export",
                              daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        announce(f"http://{host}:{port}/metrics")
        while not signalled():
            time.sleep(_SIGNAL_POLL)
    finally:
        exporter.stopping.set()
        server.shutdown()
        exporter.lock.acquire()
        server.server_close()
