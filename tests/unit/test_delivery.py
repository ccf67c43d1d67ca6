"""The delivery core on real file descriptors (pipes, /dev/full, a closed fd, a non-blocking
pipe) and the record boundaries every renderer reports."""

import csv
import errno
import fcntl
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from bpfbatch import interrupts
from bpfbatch._sys.abi import MapType
from bpfbatch.delivery import Delivery, DeliveryError, PutBack, Undelivered
from bpfbatch.errors import BpfBatchError, OutputError
from bpfbatch.records.codec import map_codecs
from bpfbatch.formats.render import RENDERERS, make_renderer
from bpfbatch.formats.writer import FdWriter, RecordSink
from test_formats import BTF, batch, entries, info


def renderer(fmt, map_info=None, ncpus=2):
    map_info = map_info or info()
    key, value = map_codecs(map_info, BTF if map_info.btf_id else None, ncpus=ncpus)
    return make_renderer(fmt, map_info, key, value, None)


# -- record boundaries ---------------------------------------------------------------------

MAP_INFOS = pytest.mark.parametrize("map_info", [info(), info(typed=False),
                                                 info(MapType.PERCPU_HASH, value_size=16)],
                                     ids=["typed", "raw", "percpu"])
COLUMNAR = ("arrow", "parquet")


@pytest.mark.parametrize("fmt", sorted(set(RENDERERS) - set(COLUMNAR)))
@MAP_INFOS
def test_record_ends_fall_on_record_boundaries(fmt, map_info):
    r = renderer(fmt, map_info)
    stride = map_info.value_stride
    keys, values = entries(5)
    values = [v.ljust(stride, b"\0") for v in values]
    for first, rendered in enumerate([r.render(batch(keys[:2], values[:2])),
                                      r.render(batch(keys[2:], values[2:]))]):
        data, ends = rendered.data, rendered.ends
        assert len(ends) == (2 if first == 0 else 3)
        assert (np.diff(ends) > 0).all() and ends[-1] == len(data)
        last = {"json": b"}", "bpftool-json": b"}"}.get(fmt, b"\n")
        assert all(data[e - 1:e] == last for e in ends)


@MAP_INFOS
def test_an_arrow_record_batch_is_delivered_whole_or_not_at_all(map_info):
    """Every record of an Arrow batch ends where the batch ends: a cut anywhere inside the
    second batch delivers the first batch's records, and a stream reader reads exactly them."""
    pa = pytest.importorskip("pyarrow")
    r = renderer("arrow", map_info)
    keys, values = entries(5)
    values = [v.ljust(map_info.value_stride, b"\0") for v in values]
    first, second = r.render(batch(keys[:2], values[:2])), r.render(batch(keys[2:], values[2:]))
    assert list(first.ends) == [len(first.data)] * 2
    assert list(second.ends) == [len(second.data)] * 3
    whole = first.data + second.data + r.trailer()
    assert pa.ipc.open_stream(whole).read_all().num_rows == 5
    for cut in (0, 1, len(second.data) // 2, len(second.data) - 1):
        delivered = int(np.searchsorted(second.ends, cut, side="right"))
        assert delivered == 0
        reader = pa.ipc.open_stream(first.data + second.data[:cut])
        assert reader.read_next_batch().num_rows == 2
        with pytest.raises((StopIteration, OSError, pa.ArrowInvalid)):
            reader.read_next_batch()


def test_parquet_cannot_be_delivered_batch_by_batch(tmp_path):
    pytest.importorskip("pyarrow")
    r = renderer("parquet")
    first = r.render(batch(*entries(2)))
    assert not r.delivers_prefix and first.data  # the row group is out, unreadable until the end
    with open(tmp_path / "out", "wb") as f, pytest.raises(BpfBatchError) as refused:
        RecordSink(renderer("parquet"), FdWriter(f.fileno()))
    assert str(refused.value).startswith("-o parquet: a parquet file is readable only once")
    assert "\n" not in str(refused.value)


def test_a_record_holding_a_newline_is_one_record_in_csv_and_jsonl():
    keys, values = entries(3)
    values[1] = values[1][:8] + b"a\nb\0\0\0\0\0"
    for fmt in ("csv", "jsonl"):
        rendered = renderer(fmt).render(batch(keys, values))
        for n, end in enumerate(rendered.ends, 1):
            text = rendered.data[:end].decode()
            parsed = list(csv.reader(io.StringIO(text)))[1:] if fmt == "csv" else \
                [json.loads(line) for line in text.splitlines()]
            assert len(parsed) == n


def test_render_is_what_write_batch_writes():
    for fmt in RENDERERS:
        out = io.BytesIO()
        key, value = map_codecs(info(), BTF)
        r = make_renderer(fmt, info(), key, value, out)
        r.write_batch(batch(*entries(4)))
        assert out.getvalue() == renderer(fmt).render(batch(*entries(4))).data


# -- FdWriter on real fds ---------------------------------------------------------------------

def _reader(fd, into, delay=0.0):
    def run():
        while True:
            time.sleep(delay)
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            into.extend(chunk)
    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize("nonblocking", [False, True])
def test_every_byte_reaches_a_slow_pipe(nonblocking):
    r, w = os.pipe()
    if nonblocking:
        fcntl.fcntl(w, fcntl.F_SETFL, fcntl.fcntl(w, fcntl.F_GETFL) | os.O_NONBLOCK)
    got = bytearray()
    thread = _reader(r, got, delay=0.001)
    data = bytes(range(256)) * 4096  # 1 MiB: 16 pipe buffers
    try:
        FdWriter(w).write(data)
    finally:
        os.close(w)
        thread.join()
        os.close(r)
    assert bytes(got) == data


def test_a_pipe_without_reader_refuses_with_epipe():
    r, w = os.pipe()
    os.close(r)
    with pytest.raises(OutputError) as exc:
        FdWriter(w).write(b"x" * 10)
    os.close(w)
    assert exc.value.errno == errno.EPIPE and exc.value.written == 0


def test_dev_full_refuses_with_enospc():
    with open("/dev/full", "wb") as f:
        with pytest.raises(OutputError) as exc:
            FdWriter(f.fileno(), fsync=True).write(b"record\n")
    assert exc.value.errno == errno.ENOSPC and exc.value.written == 0


def test_a_closed_fd_fails_before_anything_is_taken():
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(BpfBatchError, match="cannot be written"):
        FdWriter(w, name="stdout")


def test_a_signal_pending_while_the_reader_takes_nothing_ends_the_write():
    """A stuck reader does not hold a held-back signal forever: the write stops, saying how
    many bytes went, and the signal lands after the section."""
    r, w = os.pipe()
    got = []
    previous = signal.signal(signal.SIGHUP, lambda *_: got.append("HUP"))
    try:
        with pytest.raises(OutputError) as exc, interrupts.deferred():
            threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGHUP)).start()
            FdWriter(w).write(b"y" * (1 << 20))
        assert got == ["HUP"]
    finally:
        signal.signal(signal.SIGHUP, previous)
        os.close(r)
        os.close(w)
    assert 0 < exc.value.written < 1 << 20 and "interrupted" in exc.value.reason


# -- Delivery: exactly the records not written go back ----------------------------------

class Returns:
    """A put-back that records what it was given (the map side is tested in tests/kernel)."""

    def __init__(self):
        self.keys: list[bytes] = []

    def __call__(self, batch):
        self.keys.append(bytes(batch.keys))
        return PutBack(batch.count)


def test_only_the_records_not_written_are_put_back():
    returns = Returns()
    keys, values = entries(5)

    def sink(b):
        raise Undelivered(3, "No space left on device", errno.ENOSPC)

    delivery = Delivery(sink, returns, label="map 1 't'")
    with pytest.raises(DeliveryError) as exc:
        delivery.take(batch(keys, values))
    assert returns.keys == [b"".join(keys[3:])]
    assert delivery.delivered == 3 and exc.value.restored == 2
    assert str(exc.value) == ("map 1 't': output failed: No space left on device; 3 entries "
                              "delivered, 2 put back into the map (ENOSPC)")


def test_a_sink_that_raises_anything_else_gets_its_batch_put_back_and_the_error_kept():
    returns = Returns()

    def sink(b):
        raise KeyError("boom")

    with pytest.raises(KeyError):
        Delivery(sink, returns).take(batch(*entries(2)))
    assert len(returns.keys) == 1 and Delivery(sink, returns).delivered == 0


def test_record_sink_counts_the_complete_records_of_a_torn_write():
    r, w = os.pipe()
    os.close(r)
    sink = RecordSink(renderer("jsonl"), FdWriter(w))
    with pytest.raises(Undelivered) as exc:
        sink(batch(*entries(3)))
    os.close(w)
    assert exc.value.complete == 0 and exc.value.errno == errno.EPIPE


# -- a whole output: pop's one element with its trailer ------------------------------------


class ShortOutput:
    """An output that takes all but the last ``short`` bytes of a write, then refuses."""

    def __init__(self, short: int):
        self.short, self.data = short, b""

    def write(self, data: bytes) -> None:
        self.data = data[:len(data) - self.short]
        raise OutputError("refused", written=len(self.data), errno=errno.EIO, obj="output")

    def sync(self) -> None:
        pass


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_a_whole_output_is_delivered_with_its_trailer_or_not_at_all(fmt, tmp_path):
    """A JSON array without its ``]``, a Parquet file without its footer: the record is not
    delivered (it goes back); with it, the output is whole (Parquet: a file pyarrow reads)."""
    if fmt == "parquet":
        pq = pytest.importorskip("pyarrow.parquet")
    short = ShortOutput(1)
    with pytest.raises(Undelivered) as exc:
        RecordSink(renderer(fmt), short, whole=True)(batch(*entries(1)))
    assert exc.value.complete == 0 and short.data
    path = tmp_path / f"one.{fmt}"
    with open(path, "wb") as f:
        sink = RecordSink(renderer(fmt), FdWriter(f.fileno()), whole=True)
        sink(batch(*entries(1)))
        sink.finish()  # the trailer went with the batch: nothing more
    rows = json.loads(path.read_text()) if fmt == "json" else pq.read_table(path).to_pylist()
    assert len(rows) == 1


# -- held: put back before a default-disposition signal kills, and at exit -----------------

HOLDER = r"""
import os, signal, sys
from bpfbatch import delivery

class Holder:
    def put_back(self):
        os.write(1, b"put back\n")

holder = Holder()
delivery.hold(holder)
assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
if sys.argv[1] == "signal":
    os.kill(os.getpid(), signal.SIGTERM)
    os.write(1, b"survived\n")
elif sys.argv[1] == "release":
    delivery.release(holder)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
"""


@pytest.mark.parametrize("end, out, rc", [("signal", b"put back\n", -signal.SIGTERM),
                                          ("exit", b"put back\n", 0),
                                          ("release", b"", 0)])
def test_what_is_held_is_put_back_before_a_default_sigterm_and_at_exit(end, out, rc):
    proc = subprocess.run([sys.executable, "-c", HOLDER, end], capture_output=True, timeout=60)
    assert (proc.stdout, proc.returncode, proc.stderr) == (out, rc, b"")
