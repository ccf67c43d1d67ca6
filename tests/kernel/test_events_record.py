"""``bpfbatch record`` and ``Ringbuf`` against the producer of progs/events.bpf.c.

The oracle is the producer: every event it hands over carries the next sequence number and it
counts what it could not reserve, so after any run (and any fault) the events recorded plus
those still in the ring must be exactly the ones produced, none twice (SIGKILL: at most one
batch twice, never one missing). Where the next reader starts says what was committed."""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import selectors
import signal
import struct
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from bpfbatch import Map, Ringbuf
from bpfbatch._sys.libbpf import check, lib
from bpfbatch.events import open_stream
from bpfbatch.events.ringbuf import HEADER_SIZE
from bpfbatch.labs.events import RINGBUF, EventProducer
from fault_helpers import bpfbatch_argv, communicate, every_ms, small_tmpfs, until_size

TYPE = ["--type", "struct event"]


#: The most events one run of the producer emits in these tests.
PER_RUN = 100


@pytest.fixture
def producer():
    with EventProducer(ring_bytes=1 << 22) as p:
        p.configure(outputs=RINGBUF, per_run=PER_RUN)
        yield p


@pytest.fixture
def ring(producer, pins):
    return pins(producer.ring, "evring")


@contextlib.contextmanager
def producing(p: EventProducer):
    """The producer running in a thread (a run every ms) until the block ends. A run waits
    until the ring has room for it, so the ring never overruns however far a loaded machine
    lets the reader fall behind: every event produced is delivered, which the oracle needs."""
    room = RingRoom(p)

    def step():
        if room.fits(PER_RUN):
            p.run()

    try:
        with every_ms(step):
            yield
    finally:
        room.close()


class RingRoom:
    """The free space of the producer's ring, from its two positions (the consumer's page and
    the producer's, mapped read-only: what any process may map of a ring buffer)."""

    def __init__(self, p: EventProducer):
        self.size = p.ring.info.max_entries
        self.record = HEADER_SIZE + p.event_dtype.itemsize  # a multiple of 8: no padding
        self._pages = mmap.mmap(p.ring.fd, 2 * mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ)

    def fits(self, events: int) -> bool:
        """Whether ``events`` more records fit now: the kernel keeps its producer position
        less than the size ahead of the consumer's. The space only grows until the next run
        (this thread is the ring's only producer)."""
        [consumer] = struct.unpack_from("Q", self._pages, 0)
        [producer] = struct.unpack_from("Q", self._pages, mmap.PAGESIZE)
        return producer - consumer + events * self.record < self.size

    def close(self) -> None:
        self._pages.close()


def seqs_of(data: bytes) -> list[int]:
    """The sequence numbers of a JSONL output's complete lines (a torn last one left out)."""
    lines = data.split(b"\n")[:-1]
    return [json.loads(line)["value"]["seq"] for line in lines]


def rest_in_ring(p: EventProducer) -> list[int]:
    """What the ring still holds (read and committed here)."""
    with open_stream(p.ring) as stream:
        out = []
        while len(batch := stream.poll(0)):
            out += batch.to_numpy(p.event_dtype)["seq"].tolist()
            batch.commit()
        return out


def produced(p: EventProducer) -> int:
    c = p.counters()
    assert c["ringbuf_failures"] == 0, c  # the ring never fills in these tests
    return c["next_seq"]


def record(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(bpfbatch_argv("record", *args), capture_output=True, timeout=60,
                          **kw)


def test_count_commits_only_what_it_wrote_and_the_next_record_continues(producer, ring):
    for _ in range(30):
        producer.run()
    first = record("pinned", ring, *TYPE, "--count", 1234)
    assert first.returncode == 0, first.stderr
    assert seqs_of(first.stdout) == list(range(1234))
    assert b"1234 events recorded" in first.stderr
    rest = record("pinned", ring, *TYPE, "-o", "csv")
    rows = rest.stdout.decode().splitlines()
    assert rows[0] == "key,value.ts,value.seq,value.pid,value.cpu,value.id,value.size"
    assert [int(r.split(",")[2]) for r in rows[1:]] == list(range(1234, 3000))
    assert rest_in_ring(producer) == []


def test_parquet_and_rotation_hold_every_event_once(producer, ring, tmp_path):
    for _ in range(20):
        producer.run()
    out = record("pinned", ring, *TYPE, "-o", "parquet", "-w", tmp_path / "ev.parquet",
                 "--count", 1500)
    assert out.returncode == 0, out.stderr
    assert pq.read_table(tmp_path / "ev.parquet")["value.seq"].to_pylist() == list(range(1500))
    out = record("pinned", ring, *TYPE, "-w", tmp_path / "ev.jsonl", "--rotate-size", "4K")
    assert out.returncode == 0, out.stderr
    names = ["ev.jsonl"] + [f"ev.{i}.jsonl" for i in range(1, len(os.listdir(tmp_path)) - 1)]
    assert sorted(names) == sorted(set(os.listdir(tmp_path)) - {"ev.parquet"})
    seqs = [s for name in names for s in seqs_of((tmp_path / name).read_bytes())]
    assert len(names) > 2 and seqs == list(range(1500, 2000))


def test_untyped_records_and_refusals(producer, ring, maps):
    producer.run()
    raw = record("pinned", ring, "-o", "jsonl", "--count", 1)
    value = json.loads(raw.stdout)["value"]
    assert len(value) == 32 and value[8:16] == ["0x00"] * 8  # seq 0, as dump shows raw bytes
    hashmap = maps(name="bb_not_events")
    refused = record("id", hashmap.info.id)
    assert refused.returncode == 2 and b"not an event map" in refused.stderr
    with producing(producer):  # --duration ends a stream that never pauses
        timed = record("pinned", ring, *TYPE, "--duration", "300ms")
    assert timed.returncode == 0 and len(seqs_of(timed.stdout)) > 0, timed.stderr
    stdout_parquet = record("pinned", ring, *TYPE, "-o", "parquet")
    assert stdout_parquet.returncode == 2 and b"-w FILE" in stdout_parquet.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=lambda s: signal.Signals(s).name)
def test_a_signal_writes_and_commits_the_batch_in_hand(producer, ring, tmp_path, sig):
    out_path = tmp_path / "out.jsonl"
    with producing(producer), open(out_path, "wb") as out:
        proc = subprocess.Popen(bpfbatch_argv("record", "pinned", ring, *TYPE, "--follow"),
                                stdout=out, stderr=subprocess.PIPE)
        until_size(out_path, 20_000)
        proc.send_signal(sig)
        _, err = communicate(proc, 60)
    err = err.decode()
    assert proc.returncode == 128 + sig, err
    lines = err.splitlines()
    said = [line for line in lines if "interrupted (" in line]
    assert len(said) == 1 and said[0] == lines[-1], err
    n = int(said[0].split("after ")[1].split(" events recorded")[0])
    seqs = seqs_of(out_path.read_bytes())
    assert out_path.read_bytes().endswith(b"\n") and len(seqs) == n
    assert seqs + rest_in_ring(producer) == list(range(produced(producer)))


#: ``bpfbatch ARGS`` whose SIGINT lands once where CI lost one: as :meth:`Batch.rows` makes
#: the records' dtype, numpy's C code calls its Python ``npy_ctypes_check``, and takes any
#: exception from it (the Interrupted the handler raised there) to mean "not a ctypes type".
SWALLOWED_IN_ROWS = """
import signal, sys
import numpy._core._internal as internal
check, landed = internal.npy_ctypes_check, []  # numpy keeps the function it first found
def landing(cls):
    if not landed and sys._getframe(1).f_code.co_name == "rows":
        landed.append(print("landed in rows", file=sys.stderr, flush=True))
        signal.raise_signal(signal.SIGINT)
    return check(cls)
internal.npy_ctypes_check = landing
from bpfbatch.cli import main
main()
"""


def test_a_signal_whose_interrupted_numpy_swallows_still_stops_record(producer, ring,
                                                                      tmp_path):
    """The SIGINT lands inside numpy, which swallows the Interrupted: record still stops,
    having written and committed the batch in hand (it recorded on, deaf to that SIGINT,
    until the test's timeout)."""
    out_path = tmp_path / "out.jsonl"
    with producing(producer), open(out_path, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", SWALLOWED_IN_ROWS, "record", "pinned",
                                 ring, *TYPE, "--follow"],
                                stdout=out, stderr=subprocess.PIPE)
        _, err = communicate(proc, 60)
    err = err.decode()
    assert proc.returncode == 130 and err.startswith("landed in rows\n"), err
    said = err.splitlines()[-1]
    assert "interrupted (SIGINT)" in said and err.count("interrupted (") == 1, err
    n = int(said.split("after ")[1].split(" events recorded")[0])
    seqs = seqs_of(out_path.read_bytes())
    assert len(seqs) == n
    assert seqs + rest_in_ring(producer) == list(range(produced(producer)))


def test_a_closed_pipe_is_141_and_leaves_the_rest_in_the_ring(producer, ring):
    for _ in range(400):  # 40 000 events: more than a pipe holds
        producer.run()
    proc = subprocess.Popen(bpfbatch_argv("record", "pinned", ring, *TYPE),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert err.count("\n") == 1 and "left in the ring" in err, err
    recorded = int(err.split("; ")[1].split(" events recorded")[0])
    rest = rest_in_ring(producer)
    assert rest == list(range(recorded, 40_000))  # the next reader starts at the commit


def test_a_full_disk_names_the_file_and_consumes_nothing_unwritten(producer, ring, tmp_path):
    for _ in range(100):
        producer.run()
    with small_tmpfs(tmp_path) as mnt:
        target = mnt / "out.jsonl"
        full = record("pinned", ring, *TYPE, "-w", target)
        err = full.stderr.decode()
        assert full.returncode == 1 and err.startswith(f"bpfbatch: error: {target}: "), err
        assert "(ENOSPC)" in err and err.count("\n") == 1, err
        written = seqs_of(target.read_bytes())
        recorded = int(err.split("; ")[1].split(" events recorded")[0])
        assert written == list(range(recorded)) and 0 < recorded < 10_000
        parquet = record("pinned", ring, *TYPE, "-o", "parquet", "-w", mnt / "p.parquet")
        assert parquet.returncode == 1 and not (mnt / "p.parquet").exists()
    again = record("pinned", ring, *TYPE, "-w", tmp_path / "rest.jsonl")
    assert again.returncode == 0, again.stderr
    assert written + seqs_of((tmp_path / "rest.jsonl").read_bytes()) == list(range(10_000))


def test_sigkill_repeats_at_most_one_batch_and_loses_none(producer, ring, tmp_path):
    outputs = []
    with producing(producer):
        for i in range(2):
            path = tmp_path / f"k{i}.jsonl"
            with open(path, "wb") as out:
                proc = subprocess.Popen(bpfbatch_argv("record", "pinned", ring, *TYPE,
                                                      "--follow"), stdout=out)
                until_size(path, 30_000 * (i + 1), poll=0.002)
                proc.kill()
                proc.wait()
            outputs.append(path)
    seqs = [s for path in outputs for s in seqs_of(path.read_bytes())] + rest_in_ring(producer)
    assert set(seqs) == set(range(produced(producer)))  # none lost
    twice = sorted(s for s, n in zip(*np.unique(seqs, return_counts=True)) if n > 1)
    # repeated: at most the uncommitted batch of each kill, each a run of consecutive events
    runs = np.split(twice, np.flatnonzero(np.diff(twice) != 1) + 1) if twice else []
    assert len(runs) <= 2, runs


def test_ringbuf_api_numpy_arrow_and_selectors(producer, ring):
    with Ringbuf.open(pinned=ring, type="struct event") as rb, \
            selectors.DefaultSelector() as sel:
        sel.register(rb, selectors.EVENT_READ)
        assert sel.select(0) == []
        producer.run()
        assert sel.select(5)
        events = rb.poll(0)
        assert events.dtype == producer.event_dtype and events["seq"].tolist() == \
            list(range(100))
        producer.run()
        table = rb.poll(0, format="arrow")  # the previous poll is committed now
        assert table.column("value.seq").to_pylist() == list(range(100, 200))
        producer.run()
        view = rb.poll(0, copy=False)  # typed, zero-copy: a view of the ring at the stride
        assert not view.flags.owndata and view.strides == (40,)
        assert view["seq"].tolist() == list(range(200, 300))
        producer.run()
        seen = [a["seq"] for a in rb.batches(idle=0.1)]
        assert np.concatenate(seen).tolist() == list(range(300, 400))
    assert rest_in_ring(producer) == []
    with pytest.raises(Exception, match="not ringbuf"):
        Ringbuf.open(producer.perf)


def test_one_reader_per_ring_and_the_claim_dies_with_its_process(producer, ring, tmp_path):
    """The kernel keeps one consumer position: a second reader (another record, or a second
    stream in one process) is refused in one line naming the map and the holder; SIGKILL of
    the holder frees the ring for the next reader, which reads what was left uncommitted."""
    for _ in range(10):
        producer.run()
    first = subprocess.Popen(bpfbatch_argv("record", "pinned", ring, *TYPE, "--follow"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first.stdout.readline()  # it holds the ring now
    second = record("pinned", ring, *TYPE, "--count", 1)
    err = second.stderr.decode()
    assert second.returncode == 1 and second.stdout == b"", err
    assert err.count("\n") == 1 and f"another reader (pid {first.pid})" in err, err
    assert err.startswith(f"bpfbatch: error: map {producer.ring.info.id} ") and "(EBUSY)" in err
    with pytest.raises(Exception, match="another reader"):
        Ringbuf.open(producer.ring)
    first.kill()
    first.wait()
    with open_stream(producer.ring):  # one stream at a time in one process too
        with pytest.raises(Exception, match="another reader"):
            open_stream(producer.ring)
    again = record("pinned", ring, *TYPE, "--count", 1)
    assert again.returncode == 0 and len(seqs_of(again.stdout)) == 1, again.stderr


def test_verbose_reports_loss_and_lag_while_recording(producer, ring):
    with producing(producer):
        out = subprocess.run(bpfbatch_argv("-v", "record", "pinned", ring, *TYPE, "--duration",
                                           "2500ms"), capture_output=True, timeout=60)
    lines = out.stderr.decode().splitlines()
    label = producer.ring.info.label
    assert out.returncode == 0 and len(lines) >= 3, lines
    *progress, last = lines
    assert all(line.startswith(f"{label}: ") and " events recorded so far; lag " in line
               and "fill high-water " in line for line in progress), lines
    counts = [int(line.split(": ")[1].split(" events")[0]) for line in progress]
    assert counts == sorted(counts) and counts[-1] > 0
    assert last.startswith(f"{label}: {len(seqs_of(out.stdout))} events recorded; lag ")


def test_count_is_exact_among_discarded_records(producer, ring):
    producer.configure(outputs=RINGBUF, per_run=100, discard_every=3)
    producer.run()
    kept = [s for s in range(100) if s % 3]
    got = []
    for n in (1, 2, 5, 20):
        out = record("pinned", ring, *TYPE, "--count", n)
        assert out.returncode == 0, out.stderr
        got.append(seqs_of(out.stdout))
    assert [len(g) for g in got] == [1, 2, 5, 20] and sum(got, []) == kept[:28]
    assert rest_in_ring(producer) == kept[28:]


def test_a_ring_made_by_bpftool_and_one_held_only_by_a_program(tmp_path):
    """A ring buffer that no program uses has no BTF to find --type in: one line naming the
    type and saying where it looked; a program that uses it (here the producer, writing into
    the bpftool ring) is found. A ring that only a pinned program holds is read by id."""
    pin = f"/sys/fs/bpf/bbtest_bpftool_rb_{os.getpid()}"
    prog_pin = f"/sys/fs/bpf/bbtest_bpftool_prog_{os.getpid()}"
    subprocess.run(["bpftool", "map", "create", pin, "type", "ringbuf", "key", "0", "value",
                    "0", "entries", "65536", "name", "bb_tool_rb"], check=True)
    try:
        lonely = record("pinned", pin, *TYPE)
        err = lonely.stderr.decode()
        assert lonely.returncode == 1 and err.count("\n") == 1, err
        assert "no program with BTF uses the map" in err and "'struct event'" in err
        with Map.open(pinned=pin) as m:
            ring_id = m.info.id
            with EventProducer(ring_fd=m.fd) as p:
                p.configure(outputs=RINGBUF, per_run=10)
                p.run()
                missing = record("pinned", pin, "--type", "struct nosuch")
                err = missing.stderr.decode()
                assert missing.returncode == 1 and err.count("\n") == 1, err
                assert "no 'struct nosuch' in the BTF of the programs using the map " \
                       "(sys_enter_btf)" in err, err  # one BTF, named by its first program
                check(lib.bpf_obj_pin(p.obj.program_fd("emit_run"), prog_pin.encode()),
                      "pin program", prog_pin)
        os.unlink(pin)  # now only the pinned program holds the ring
        by_id = record("id", ring_id, *TYPE)
        assert by_id.returncode == 0, by_id.stderr
        assert seqs_of(by_id.stdout) == list(range(10))
    finally:
        for path in (pin, prog_pin):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _file_seqs(path) -> list[int] | None:
    """A rotated file's sequence numbers (``None``: a Parquet file without its footer)."""
    if path.suffix == ".parquet":
        try:
            return pq.read_table(path)["value.seq"].to_pylist()
        except Exception:  # torn: no footer
            return None
    return seqs_of(path.read_bytes())


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_sigkill_during_rotation_repeats_at_most_the_uncommitted_and_loses_none(
        producer, ring, tmp_path, fmt):
    """SIGKILL twice while record --follow rotates 16 KiB files: every produced event is in a
    readable file or still in the ring; the events in two places are at most what each kill
    left uncommitted (JSONL: the batch in hand; Parquet: the file being written, committed
    with its footer), and a Parquet file without a footer is only ever the last of a run."""
    producer.configure(outputs=RINGBUF, per_run=20)  # the ring outlasts a slow start
    runs = []
    with producing(producer):
        for i in range(2):
            folder = tmp_path / f"run{i}"
            folder.mkdir()
            proc = subprocess.Popen(bpfbatch_argv("record", "pinned", ring, *TYPE, "--follow",
                                                  "-o", fmt, "-w", folder / f"ev.{fmt}",
                                                  "--rotate-size", "16K"))
            deadline = time.monotonic() + 30
            while len(os.listdir(folder)) < 4 + 2 * i and time.monotonic() < deadline:
                time.sleep(0.002)
            proc.kill()
            proc.wait()
            names = [f"ev.{fmt}"] + [f"ev.{n}.{fmt}" for n in range(1, len(os.listdir(folder)))]
            assert sorted(names) == sorted(os.listdir(folder))
            files = [_file_seqs(folder / name) for name in names]
            assert None not in files[:-1]  # only the file in hand can lack its footer
            runs.append([s for f in files if f for s in f])
    seqs = sum(runs, []) + rest_in_ring(producer)
    assert set(seqs) == set(range(produced(producer)))  # none lost
    twice = sorted(s for s, n in zip(*np.unique(seqs, return_counts=True)) if n > 1)
    blocks = np.split(twice, np.flatnonzero(np.diff(twice) != 1) + 1) if twice else []
    assert len(blocks) <= 2, blocks  # one run of consecutive events per kill at most


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_while_parquet_rotates_ends_every_file_whole(producer, ring, tmp_path, sig):
    """A signal at whatever moment record is in (a poll, a write, a footer, a rotation) ends
    with every file readable, each event once across the files and the ring."""
    producer.configure(outputs=RINGBUF, per_run=20)  # the ring outlasts a slow start
    with producing(producer):
        proc = subprocess.Popen(bpfbatch_argv("record", "pinned", ring, *TYPE, "--follow",
                                              "-o", "parquet", "-w", tmp_path / "ev.parquet",
                                              "--rotate-size", "16K"), stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while len(os.listdir(tmp_path)) < 3 and time.monotonic() < deadline:
            time.sleep(0.002)
        proc.send_signal(sig)
        _, err = communicate(proc, 60)
    assert proc.returncode == 128 + sig, err
    names = ["ev.parquet"] + [f"ev.{n}.parquet" for n in range(1, len(os.listdir(tmp_path)))]
    seqs = [s for name in names for s in _file_seqs(tmp_path / name)]
    n = int(err.decode().split("after ")[1].split(" events recorded")[0])
    assert len(seqs) == n
    assert seqs + rest_in_ring(producer) == list(range(produced(producer)))


def test_a_signal_before_any_event_leaves_a_readable_parquet_file(producer, ring, tmp_path):
    path = tmp_path / "none.parquet"
    proc = subprocess.Popen(bpfbatch_argv("record", "pinned", ring, *TYPE, "--follow", "-o",
                                          "parquet", "-w", path), stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)
    _, err = communicate(proc, 60)
    assert proc.returncode == 130 and b"after 0 events recorded" in err, err
    table = pq.read_table(path)  # a footer, no row (it was an empty file)
    assert table.num_rows == 0 and "value.seq" in table.column_names
