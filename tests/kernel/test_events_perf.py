"""The perf event array reader against the real kernel, the producer's own counters as the
oracle: every event the kernel wrote is read exactly once (its sequence number), each CPU's in
the order it wrote them, and every drop is counted: events read + drops the kernel reported
(PERF_RECORD_LOST) = events the producer attempted, also with the producer running in other
processes faster than the reader."""

from __future__ import annotations

import multiprocessing
import os

import numpy as np
import pytest

from bpfbatch._sys.abi import MapType
from bpfbatch.errors import InputError
from bpfbatch.events import open_stream
from bpfbatch.events.perf import PerfBuffer, online_cpus
from bpfbatch.labs.events import PERF, EventProducer

CPUS = online_cpus()


@pytest.fixture
def producer():
    with EventProducer() as p:
        yield p


def read_all(stream, producer, timeout: float = 0) -> tuple[np.ndarray, np.ndarray]:
    """Every event waiting now, or within ``timeout`` when none is (and the CPU of each),
    committed."""
    events, cpus = [], []
    while len(batch := stream.poll(timeout)):
        events.append(batch.to_numpy(producer.event_dtype))
        cpus.append(batch.cpus)
        batch.commit()
        timeout = 0
    if not events:
        return np.zeros(0, producer.event_dtype), np.zeros(0, np.uint32)
    return np.concatenate(events), np.concatenate(cpus)


def flush(stream, producer) -> tuple[np.ndarray, np.ndarray]:
    """One more event per CPU, which carries the kernel's lost record of that CPU (the kernel
    writes it just before the next sample that fits), read with the rest."""
    producer.configure(outputs=PERF, per_run=1)
    for cpu in CPUS:
        producer.run(cpu)
    return read_all(stream, producer)


def assert_in_order_per_cpu(events, cpus):
    for cpu in CPUS:
        seqs = events["seq"][cpus == cpu].astype(np.int64)
        assert (np.diff(seqs) > 0).all()
        assert (events["cpu"][cpus == cpu] == cpu).all()


def test_every_event_once_at_a_rate_it_sustains(producer):
    """Bursts that fit the rings, read between them: no loss, no duplicate, no gap."""
    with open_stream(producer.perf, page_count=64) as stream:
        got, where = [], []
        for _ in range(8):
            producer.configure(outputs=PERF, per_run=2000)
            for cpu in CPUS:
                producer.run(cpu)
            events, cpus = read_all(stream, producer)
            got.append(events)
            where.append(cpus)
        events, cpus = np.concatenate(got), np.concatenate(where)
        produced = producer.counters()
        assert produced["perf_failures"] == 0 and stream.stats.lost_total == 0
        assert sorted(events["seq"].tolist()) == list(range(produced["next_seq"]))
        assert_in_order_per_cpu(events, cpus)
        assert stream.stats.lag_bytes == 0 and 0 < stream.stats.high_water < 1


def _blast(cpu: int, runs: int) -> None:
    """A producer process: ``runs`` runs of the producer's program on ``cpu``."""
    os.sched_setaffinity(0, {cpu})
    for _ in range(runs):
        _PRODUCER.run(cpu)


_PRODUCER: EventProducer | None = None


def test_loss_above_its_rate_is_counted_exactly(producer):
    """Producers in other processes, one per CPU, writing far faster than the 8-page rings
    are read: whatever was not read is reported lost, exactly (read + lost = attempted, and
    lost = the producer's own count of failed outputs), nothing read twice."""
    global _PRODUCER
    _PRODUCER = producer
    producer.configure(outputs=PERF, per_run=20000)
    ctx = multiprocessing.get_context("fork")
    with open_stream(producer.perf, page_count=8) as stream:
        children = [ctx.Process(target=_blast, args=(cpu, 5)) for cpu in CPUS]
        for child in children:
            child.start()
        got, where = [], []
        while any(child.is_alive() for child in children):
            events, cpus = read_all(stream, producer, 0.05)
            got.append(events)
            where.append(cpus)
        for child in children:
            child.join()
            assert child.exitcode == 0
        for events, cpus in (read_all(stream, producer), flush(stream, producer)):
            got.append(events)
            where.append(cpus)
        events, cpus = np.concatenate(got), np.concatenate(where)
        produced = producer.counters()
        seqs = events["seq"]
        assert len(np.unique(seqs)) == len(seqs)
        assert stream.stats.lost_total > 0
        assert stream.stats.lost_total == produced["perf_failures"]
        assert len(seqs) + stream.stats.lost_total == produced["next_seq"]
        assert sum(stream.stats.lost.values()) == stream.stats.lost_total
        assert_in_order_per_cpu(events, cpus)
    _PRODUCER = None


def test_polls_continue_rewind_offers_again_commit_upto(producer):
    producer.configure(outputs=PERF, per_run=100)
    with open_stream(producer.perf, page_count=8) as stream:
        producer.run(CPUS[0])
        first = stream.poll(0)
        assert len(first) == 100 and first.stride == 48 and first.size == 36  # in place
        producer.run(CPUS[0])
        second = stream.poll(0)  # continues after the first, uncommitted
        assert second.to_numpy(producer.event_dtype)["seq"].tolist() == list(range(100, 200))
        first.commit(upto=30)
        stream.rewind()
        again = stream.poll(0)
        assert again.to_numpy(producer.event_dtype)["seq"].tolist() == list(range(30, 200))
        again.commit()
        second.commit()  # older than what is committed: gives nothing back twice
        assert len(stream.poll(0)) == 0
        assert stream.stats.lag_bytes == 0


def test_order_by_merges_the_cpus_by_timestamp(producer):
    """Events of every CPU in one batch, sorted by ts; commit(upto=k) after a merge commits,
    per CPU, exactly the events among the first k (a rewind offers the rest)."""
    producer.configure(outputs=PERF, per_run=50)
    with open_stream(producer.perf, page_count=8, order_by="ts",
                     dtype=producer.event_dtype) as stream:
        for _ in range(3):
            for cpu in CPUS:
                producer.run(cpu)
        batch = stream.poll(0)
        events = batch.to_numpy(producer.event_dtype)
        assert len(events) == 150 * len(CPUS) and batch.losses is None
        assert (np.diff(events["ts"].astype(np.int64)) >= 0).all()
        assert (batch.cpus == events["cpu"]).all()
        batch.commit(upto=100)
        stream.rewind()
        rest = stream.poll(0).to_numpy(producer.event_dtype)
        assert sorted(rest["seq"].tolist()) == sorted(events["seq"][100:].tolist())


def test_refusals_name_the_map(producer, maps):
    with pytest.raises(InputError, match=r"--order-by: no field 'when' in the event "
                                         r"\(fields: ts, seq, pid, cpu, id, size\)"):
        open_stream(producer.perf, order_by="when", dtype=producer.event_dtype)
    with pytest.raises(InputError, match="page count must be a power of two, got 3"):
        open_stream(producer.perf, page_count=3)
    with pytest.raises(InputError, match=r"map \d+ 'bb_test': not a perf event array "
                                         r"\(it is hash\)"):
        PerfBuffer(maps(MapType.HASH))


def test_open_by_pin_and_close_clears_the_entries(producer, pins):
    """Opened by its pin, the reader stores one event fd per CPU; closed, it deletes them
    (the producer's outputs then fail instead of filling a ring nobody reads)."""
    path = pins(producer.perf, "perf")
    producer.configure(outputs=PERF, per_run=5)
    with PerfBuffer.open(pinned=path) as stream:
        assert sorted(ring.cpu for ring in stream.rings) == CPUS
        for cpu in CPUS:
            producer.run(cpu)
        assert len(stream.poll(0)) == 5 * len(CPUS)
    producer.run(CPUS[0])
    assert producer.counters()["perf_failures"] == 5
