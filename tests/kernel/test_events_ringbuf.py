"""The ring buffer reader against the real kernel, the producer's own counters as the oracle:
every event it handed over is read exactly once (its sequence number), none is invented, and
nothing is consumed before the commit."""

from __future__ import annotations

import multiprocessing
import selectors

import numpy as np
import pytest

from bpfbatch.events import open_stream
from bpfbatch.labs.events import RINGBUF, EventProducer


@pytest.fixture
def producer():
    with EventProducer(ring_bytes=1 << 16) as p:
        yield p


def delivered(p: EventProducer) -> int:
    c = p.counters()
    return c["next_seq"] - c["ringbuf_failures"] - c["ringbuf_discarded"]


def read_all(stream, dtype, *, commit=True) -> np.ndarray:
    """Every record waiting now, as ``dtype``, over as many passes as it takes."""
    parts = []
    while len(batch := stream.poll(0)):
        parts.append(batch.to_numpy(dtype))
        if not commit:
            break
        batch.commit()
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def test_fixed_events_one_pass_exact(producer):
    producer.configure(outputs=RINGBUF, per_run=1000)
    with open_stream(producer.ring) as stream:
        producer.run()
        batch = stream.poll(0)
        assert len(batch) == 1000 and batch.stride == 40 and batch.size == 32
        events = batch.to_numpy(producer.event_dtype)
        assert events["seq"].tolist() == list(range(1000))
        assert (events["size"] == 32).all()
        assert np.array_equal(batch.fixed()[:, 8:16].copy().view(np.uint64).ravel(),
                              events["seq"])


def test_nothing_consumed_before_commit(producer):
    producer.configure(outputs=RINGBUF, per_run=100)
    with open_stream(producer.ring) as stream:
        producer.run()
        first = stream.poll(0)
        producer.run()
        second = stream.poll(0)  # polls continue after the last batch, committed or not
        assert first.to_numpy(producer.event_dtype)["seq"].tolist() == list(range(100))
        assert second.to_numpy(producer.event_dtype)["seq"].tolist() == list(range(100, 200))
        stream.rewind()  # nothing committed: everything is offered again
        again = stream.poll(0)
        assert again.to_numpy(producer.event_dtype)["seq"].tolist() == list(range(200))
        again.commit(upto=150)
    with open_stream(producer.ring) as stream:  # a second reader starts at the commit
        producer.run()
        batch = stream.poll(0)
        assert batch.to_numpy(producer.event_dtype)["seq"].tolist() == list(range(150, 300))
        batch.commit()
        assert stream.poll(0.01).to_numpy(producer.event_dtype).size == 0


def test_discarded_skipped_variable_sizes_padded(producer):
    producer.configure(outputs=RINGBUF, per_run=500, discard_every=3)
    with open_stream(producer.ring) as stream:
        producer.run()
        seqs = read_all(stream, producer.event_dtype)["seq"].tolist()
        assert seqs == [s for s in range(500) if s % 3]
        assert producer.counters()["ringbuf_discarded"] == len(range(0, 500, 3))
        producer.configure(outputs=RINGBUF, per_run=500, data_max=40)
        producer.run()
        batch = stream.poll(0)
        events = batch.to_numpy(producer.event_var_dtype)
        head = events["head"]
        assert head["seq"].tolist() == list(range(500, 1000))
        assert (batch.sizes == head["size"]).all() and set(batch.sizes.tolist()) == \
            set(range(32, 73))
        for event, raw in zip(events, batch.records()):
            n = len(raw) - 32
            assert raw[32:] == bytes([event["head"]["seq"] & 0xFF]) * n
            assert not event["data"][n:].any()  # the tail a short record lacks reads 0


def test_full_ring_counts_producer_failures_and_wraps(producer):
    """A 64 KiB ring overrun: the producer counts what it could not reserve, the reader gets
    exactly the rest, across many wraps of the data area."""
    producer.configure(outputs=RINGBUF, per_run=3000)  # 120 000 bytes: more than the ring
    seen = []
    with open_stream(producer.ring) as stream:
        for _ in range(20):
            producer.run()
            seen.append(read_all(stream, producer.event_dtype)["seq"])
        assert stream.stats.high_water > 0.99  # full but for less than one record
    seqs = np.concatenate(seen)
    assert producer.counters()["ringbuf_failures"] > 0
    assert len(seqs) == delivered(producer) and len(np.unique(seqs)) == len(seqs)
    assert (np.diff(seqs) > 0).all()




def test_variable_sizes_across_many_wraps():
    """Records of 32 to 72 bytes in a one-page ring: every wrap falls somewhere inside or
    between records of another size, and each is read whole (its bytes are its seq), once,
    in order."""
    with EventProducer(ring_bytes=1 << 12) as p, open_stream(p.ring) as stream:
        p.configure(outputs=RINGBUF, per_run=37, data_max=40)
        seqs = []
        for _ in range(200):  # ~3 KB a run: the ring wraps most runs
            p.run()
            batch = stream.poll(0)
            head = batch.to_numpy(p.event_var_dtype)["head"]
            assert (batch.sizes == head["size"]).all()
            for seq, raw in zip(head["seq"].tolist(), batch.records()):
                assert raw[32:] == bytes([seq & 0xFF]) * (len(raw) - 32)
            seqs += head["seq"].tolist()
            batch.commit()
        assert seqs == list(range(p.counters()["next_seq"]))


def test_concurrent_producer_busy_records(producer):
    """The producer runs on the other CPU while the reader reads and commits: records still
    being written (busy) end a pass and are read once submitted; nothing lost, none twice."""
    producer.configure(outputs=RINGBUF, per_run=2000)
    ctx = multiprocessing.get_context("fork")
    runs = 150
    with open_stream(producer.ring) as stream:
        child = ctx.Process(target=_run_many, args=(producer, runs))
        child.start()
        seen = []
        while True:  # every batch polled is kept: a poll reads on from the last one
            alive = child.is_alive()
            batch = stream.poll(0.05 if alive else 0)
            if len(batch):
                seen.append(batch.to_numpy(producer.event_dtype)["seq"])
                batch.commit()
            elif not alive:
                break
        child.join()
        assert child.exitcode == 0
        seen.append(read_all(stream, producer.event_dtype)["seq"])
    seqs = np.concatenate(seen)
    assert len(seqs) == delivered(producer) and len(np.unique(seqs)) == len(seqs)


def _run_many(producer: EventProducer, runs: int) -> None:
    import os

    cpu = 1 if os.cpu_count() > 1 else 0
    for _ in range(runs):
        producer.run(cpu=cpu)


def test_fileno_readable_in_a_selector(producer):
    producer.configure(outputs=RINGBUF, per_run=10)
    with open_stream(producer.ring) as stream, selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        assert sel.select(0) == []
        producer.run()
        assert len(sel.select(1)) == 1
        batch = stream.poll(0)
        assert len(batch) == 10
        batch.commit()
        assert sel.select(0) == []


def test_the_syscall_tracepoint_emits_one_event_per_call_of_the_target(producer):
    """The demo's trigger: sys_enter (tp_btf, raw_tp where that is refused), filtered to one
    process and one syscall number (getppid) in the kernel."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import os, sys\nsys.stdin.readline()\n"
                              "for _ in range(500): os.getppid()\nprint('done', flush=True)"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    getppid = 110  # x86-64
    producer.configure(outputs=RINGBUF, target_pid=child.pid, target_nr=getppid)
    producer.attach()
    with open_stream(producer.ring) as stream:
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "done\n"
        child.wait()
        events = read_all(stream, producer.event_dtype)
    assert len(events) == 500 and (events["pid"] == child.pid).all()
    assert (events["id"] == getppid).all() and events["seq"].tolist() == list(range(500))
