"""The bcc event-loop drop-ins against bcc itself, on one bcc program: the same events (bcc's
own event objects, from ``table.event(data)``), in the same order per CPU, the same sizes,
and the same lost callbacks, whether bcc's poll or ours reads them."""

from __future__ import annotations

import ctypes
import itertools

import pytest

from bpfbatch import bcc as batched
from bpfbatch._sys import abi
from bpfbatch._sys.libbpf import lib
from bpfbatch.labs.events import TEST_RUN_ON_CPU
from tools.bcc_setup import load_bcc

bcc = load_bcc()
pytestmark = pytest.mark.skipif(bcc is None, reason="bcc or kernel headers not available")

#: Emits ``cfg[0]`` events per run (at most 64) to the perf buffer and the ring buffer; each
#: takes the next sequence number of ``seqs[0]``.
PROGRAM = b"""
struct event { u64 seq; u32 cpu; u32 tag; u64 square; };
BPF_PERF_OUTPUT(events);
BPF_RINGBUF_OUTPUT(ring, 16);
BPF_ARRAY(seqs, u64, 1);
BPF_ARRAY(cfg, u32, 1);

int emit(struct bpf_raw_tracepoint_args *ctx) {
    u32 zero = 0;
    u64 *seq = seqs.lookup(&zero);
    u32 *n = cfg.lookup(&zero);
    if (!seq || !n)
        return 0;
    for (int i = 0; i < 64; i++) {
        if (i >= *n)
            break;
        struct event e = {};
        e.seq = __sync_fetch_and_add(seq, 1);
        e.cpu = bpf_get_smp_processor_id();
        e.tag = 0xabcd;
        e.square = e.seq * e.seq;
        events.perf_submit(ctx, &e, sizeof(e));
        ring.ringbuf_output(&e, sizeof(e), 0);
    }
    return 0;
}
"""
CPUS = (0, 1)


@pytest.fixture(scope="module")
def program():
    b = bcc.BPF(text=PROGRAM)
    try:
        yield b, b.load_func(b"emit", bcc.BPF.RAW_TRACEPOINT).fd
    finally:
        b.cleanup()


def _produce(b, fd: int, per_cpu: int) -> None:
    """``per_cpu`` events on each CPU, from sequence number 0."""
    b[b"seqs"][ctypes.c_int(0)] = ctypes.c_uint64(0)
    for cpu in CPUS:
        left = per_cpu
        while left:
            b[b"cfg"][ctypes.c_int(0)] = ctypes.c_uint32(min(left, 64))
            _run(fd, cpu)
            left -= min(left, 64)


def _run(fd: int, cpu: int) -> None:
    opts = abi.opts(abi.BpfTestRunOpts, flags=TEST_RUN_ON_CPU, cpu=cpu)
    assert lib.bpf_prog_test_run_opts(fd, ctypes.byref(opts)) == 0


class _Seen:
    """What the callbacks saw: per CPU the events (fields of bcc's object, its size), the
    lost callbacks' counts, and the event objects' classes."""

    def __init__(self, table):
        self.table = table
        self.events = {cpu: [] for cpu in CPUS}
        self.lost: list[int] = []
        self.classes: set[type] = set()

    def perf(self, cpu, data, size):
        self._keep(cpu, data, size)

    def ring(self, ctx, data, size):
        assert ctx is None
        self._keep(self.table.event(data).cpu, data, size)
        return 0

    def on_lost(self, count):
        self.lost.append(count)

    def _keep(self, cpu, data, size):
        event = self.table.event(data)
        self.classes.add(type(event))
        self.events[cpu].append((event.seq, event.cpu, event.tag, event.square, size))


def _perf_round(b, fd, seen: _Seen, poll) -> None:
    """Overflow each CPU's one-page ring (300 events of 40-byte records in 4 KiB), read,
    then one more event per CPU, which carries the kernel's lost record, and read again."""
    _produce(b, fd, 300)
    poll()
    b[b"seqs"][ctypes.c_int(0)] = ctypes.c_uint64(1000)
    for cpu in CPUS:
        b[b"cfg"][ctypes.c_int(0)] = ctypes.c_uint32(1)
        _run(fd, cpu)
    poll()


def _until_quiet(seen: _Seen, poll) -> None:
    """Poll until a poll brings nothing new: bcc reads a ring only once its wake-up (an
    irq_work on the ring's CPU, a moment after the sample) has made its fd readable."""
    while True:
        before = sum(map(len, seen.events.values())) + len(seen.lost)
        poll()
        if sum(map(len, seen.events.values())) + len(seen.lost) == before:
            return


def test_perf_buffer_poll_hands_out_what_bcc_does(program):
    b, fd = program
    table = b[b"events"]
    theirs = _Seen(table)
    table.open_perf_buffer(theirs.perf, page_cnt=1, lost_cb=theirs.on_lost)
    _perf_round(b, fd, theirs, lambda: _until_quiet(theirs, lambda: b.perf_buffer_poll(50)))
    for cpu in CPUS:
        del table[cpu]  # bcc's way to close its reader of that CPU

    ours = _Seen(table)
    batched.open_perf_buffer(table, ours.perf, page_cnt=1, lost_cb=ours.on_lost)
    try:
        _perf_round(b, fd, ours, lambda: batched.perf_buffer_poll(b, timeout=0))
    finally:
        batched.close_buffer(table)

    assert ours.events == theirs.events
    assert ours.lost == theirs.lost and sum(ours.lost) > 0
    assert ours.classes == theirs.classes and len(ours.classes) == 1
    for cpu in CPUS:  # each CPU's ring order is the order the program wrote
        seqs = [e[0] for e in ours.events[cpu]]
        assert seqs == sorted(seqs) and seqs[-1] == 1000 + CPUS.index(cpu)
        assert {e[4] for e in ours.events[cpu]} == {28}  # bcc's size: the raw, padded


def test_ring_buffer_consume_hands_out_what_bcc_does(program):
    b, fd = program
    table = b[b"ring"]
    theirs = _Seen(table)
    table.open_ring_buffer(theirs.ring)
    b.ring_buffer_consume()  # what other tests left in the ring
    theirs.__init__(table)
    _produce(b, fd, 200)
    b.ring_buffer_consume()

    ours = _Seen(table)
    batched.open_ring_buffer(table, ours.ring)
    try:
        _produce(b, fd, 200)
        assert batched.ring_buffer_poll(b, timeout=100) == 400
        assert batched.ring_buffer_consume(b) == 0
    finally:
        batched.close_buffer(table)
    assert ours.events == theirs.events and len(ours.events[1]) == 200
    assert ours.classes == theirs.classes


def test_a_callback_that_stops_resumes_where_it_stopped(program):
    """A ring buffer callback returning a negative number stops the poll after that event
    (libbpf's rule), and one that raises stops it the same way; the next poll goes on with
    the next event: every event seen once, in order."""
    b, fd = program
    table = b[b"ring"]
    seen: list[int] = []
    calls = itertools.count(1)

    def callback(ctx, data, size):
        seen.append(table.event(data).seq)
        n = next(calls)
        if n == 10:
            raise KeyboardInterrupt
        return -1 if n % 7 == 0 else 0

    batched.open_ring_buffer(table, lambda *_: 0)
    batched.ring_buffer_consume(b)  # what other tests left in the ring
    batched.open_ring_buffer(table, callback)
    try:
        _produce(b, fd, 20)
        polls = 0
        while len(seen) < 40:
            polls += 1
            try:
                batched.ring_buffer_consume(b)
            except KeyboardInterrupt:
                assert len(seen) == 10
        assert batched.ring_buffer_consume(b) == 0
    finally:
        batched.close_buffer(table)
    assert sorted(seen) == seen == list(range(40)) and polls == 7
