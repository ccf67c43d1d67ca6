"""The perf event array reader against the real kernel, the producer's own counters as the
oracle: every event the kernel wrote is read exactly once (its sequence number), each CPU's in
the order it wrote them, and every drop is counted: events read + drops the kernel reported
(PERF_RECORD_LOST) = events the producer attempted, also with the producer running in other
processes faster than the reader."""

from __future__ import annotations

import contextlib
import itertools
import json
import multiprocessing
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from bpfbatch import PerfBuffer
from bpfbatch._sys.abi import MapType
from bpfbatch.errors import InputError
from bpfbatch.events import open_stream
from bpfbatch.events.perf import PerfStream, online_cpus
from bpfbatch.labs.events import PERF, RINGBUF, EventProducer
from fault_helpers import bpfbatch_argv, communicate, every_ms, said, until_size

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
    with pytest.raises(InputError, match=r"'events_perf': order_by: no field 'when' in the "
                                         r"events' type \(fields: ts, seq, pid, cpu, id, "
                                         r"size\)"):
        open_stream(producer.perf, order_by="when", dtype=producer.event_dtype)
    with pytest.raises(InputError, match="page count must be a power of two, got 3"):
        open_stream(producer.perf, page_count=3)
    with pytest.raises(InputError, match=r"map \d+ 'bb_test': not a perf event array "
                                         r"\(it is hash\)"):
        PerfStream(maps(MapType.HASH))


def test_api_by_pin_typed_ordered_and_close_clears_the_entries(producer, pins):
    """``PerfBuffer.open`` by the pin, typed from the programs' BTF and merged by ts: numpy
    arrays of the events, one event fd stored per CPU; closed, the entries are deleted (the
    producer's outputs then fail instead of filling a ring nobody reads)."""
    path = pins(producer.perf, "perf")
    producer.configure(outputs=PERF, per_run=5)
    with PerfBuffer.open(pinned=path, type="struct event", order_by="ts",
                         page_count=4) as perf:
        assert sorted(ring.cpu for ring in perf.stream.rings) == CPUS
        for cpu in CPUS:
            producer.run(cpu)
        events = perf.poll(0)
        assert events.dtype == producer.event_dtype and len(events) == 5 * len(CPUS)
        assert (np.diff(events["ts"].astype(np.int64)) >= 0).all()
    producer.run(CPUS[0])
    assert producer.counters()["perf_failures"] == 5


# -- record on a perf event array ---------------------------------------------------------------


@contextlib.contextmanager
def producing(p: EventProducer):
    """The producer running in a thread (100 events a run on each CPU in turn, a run every
    ms) until the block ends."""
    cpus = itertools.cycle(CPUS)
    p.configure(outputs=PERF, per_run=100)
    with every_ms(lambda: p.run(next(cpus))):
        yield


def wait_for_reader(p: EventProducer, timeout: float = 30) -> None:
    """Until a reader has stored its rings in the map: an event per CPU no longer fails."""
    p.configure(outputs=PERF, per_run=1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = p.counters()["perf_failures"]
        for cpu in CPUS:
            p.run(cpu)
        if p.counters()["perf_failures"] == before:
            return
        time.sleep(0.01)
    raise AssertionError("the reader never stored its rings")


def jsonl_events(data: bytes) -> list[dict]:
    return [json.loads(line)["value"] for line in data.split(b"\n")[:-1]]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=lambda s: signal.Signals(s).name)
def test_record_stops_on_a_signal_with_the_batch_in_hand_written(producer, pins, tmp_path,
                                                                 sig):
    """record --follow --order-by ts on a perf map, the producer running: the signal is said
    in one last line with the count, which is exactly the complete records in the output,
    none twice, each CPU's in order, each batch merged by ts."""
    path = pins(producer.perf, "perfrec")
    out_path = tmp_path / "out.jsonl"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(bpfbatch_argv("record", "pinned", path, "--type",
                                              "struct event", "--follow", "--order-by", "ts"),
                                stdout=out, stderr=subprocess.PIPE)
        wait_for_reader(producer)
        with producing(producer):
            until_size(out_path, 40_000)
            proc.send_signal(sig)
            _, err = communicate(proc, 60)
    err = err.decode()
    assert proc.returncode == 128 + sig and err.count("interrupted (") == 1, err
    n = said(err.splitlines()[-1], r"interrupted \(SIG\w+\) after (\d+) events recorded$")
    data = out_path.read_bytes()
    events = jsonl_events(data)
    assert data.endswith(b"\n") and len(events) == n > 0
    seqs = [e["seq"] for e in events]
    assert len(set(seqs)) == len(seqs)
    for cpu in CPUS:
        mine = [e["seq"] for e in events if e["cpu"] == cpu]
        assert mine == sorted(mine)


def test_record_into_a_closed_pipe_is_141_and_says_what_is_dropped(producer, pins):
    path = pins(producer.perf, "perfpipe")
    proc = subprocess.Popen(bpfbatch_argv("record", "pinned", path, "--type", "struct event",
                                          "--follow", "--pages", "512"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for_reader(producer)
    producer.configure(outputs=PERF, per_run=20_000)  # more than a pipe holds
    for cpu in CPUS:
        producer.run(cpu)
    first = json.loads(proc.stdout.readline())["value"]
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert err.count("\n") == 1 and "dropped with the perf rings" in err, err
    recorded = int(err.split("; ")[1].split(" events recorded")[0])
    assert 0 < recorded < 40_000 + 2 * len(CPUS) and first["cpu"] in CPUS


def test_record_perf_options_are_usage_errors(producer, pins):
    perf, ring = pins(producer.perf, "perfopt"), pins(producer.ring, "ringopt")
    cases = {
        ("pinned", perf, "--pages", 3): "--pages: must be a power of two, got 3",
        ("pinned", perf, "--order-by", "ts"): "--order-by: orders by a field of the events' "
                                              "type; give --type",
        ("pinned", perf, "--type", "struct event", "--order-by", "tss"):
            "--order-by: no field 'tss' in the events' type (fields: ts, seq, pid, cpu, id, "
            "size)",
        ("pinned", ring, "--pages", 4): "--pages: is for perf_event_array maps; map",
    }
    for args, said_line in cases.items():
        proc = subprocess.run(bpfbatch_argv("record", *args), capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2 and proc.stderr.startswith(f"bpfbatch: error: {said_line}"), \
            proc.stderr


@pytest.mark.parametrize("output", [PERF, RINGBUF], ids=["perf", "ringbuf"])
def test_a_one_record_batch_is_copied_out_of_the_ring(producer, output):
    """``to_numpy`` of a batch of one record is a copy like any other (a one-row view of the
    ring is contiguous, so a contiguity check alone would hand out the ring's memory, which
    the producer overwrites once the batch is committed)."""
    with open_stream(producer.perf if output == PERF else producer.ring) as stream:
        producer.configure(outputs=output, per_run=1)
        producer.run(CPUS[0])
        batch = stream.poll(0)
        kept = batch.to_numpy(producer.event_dtype)
        batch.commit()
        producer.configure(outputs=output, per_run=3000)
        for _ in range(12):  # past the end of the ring, several times
            producer.run(CPUS[0])
            while len(batch := stream.poll(0)):
                batch.commit()
        assert kept["seq"].tolist() == [0]


def test_a_second_perf_reader_is_refused_and_the_first_keeps_its_rings(producer):
    """A second reader would put its rings in the map's CPU slots and the first would go
    silent: it is refused (EBUSY), and the first still gets every event."""
    with open_stream(producer.perf, page_count=8) as first:
        with pytest.raises(Exception, match=r"another reader \(pid \d+\).*\(EBUSY\)"):
            PerfStream(producer.perf, page_count=8)
        with pytest.raises(Exception, match="another reader"):
            PerfBuffer.open(producer.perf)
        producer.configure(outputs=PERF, per_run=100)
        producer.run(online_cpus()[0])
        assert first.poll(0).to_numpy(producer.event_dtype)["seq"].tolist() == \
            list(range(100))
    with open_stream(producer.perf, page_count=8):  # the claim went with the first
        pass
