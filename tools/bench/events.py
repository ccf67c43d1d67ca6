"""``python -m tools.bench events [--events N] [--perf-events N] [--rounds R]``: a ring
buffer's and a perf event array's events read by bpfbatch and by its peers, from the same
producer, in the same run, interleaved.

Before every round (untimed) the producer of ``progs/events.bpf.c`` puts ``--events`` 32-byte
``struct event`` records into a 64 MiB ring (one BPF_PROG_RUN of its ``emit_run``); each case
then reads all of them and gives the space back. The cases:

- the C floor: libbpf's ``ring_buffer__consume`` with an empty callback (it counts), timed
  inside the process around the consume loop (``c/ringbuf_floor.c``);
- bcc: ``ring_buffer_consume()`` with a Python callback per event that casts it to the event's
  ctypes struct and keeps its ``seq`` (what a bcc tool's callback does, at its least), bcc's
  ``RingBuf`` table opened over the same map;
- bpfbatch: ``Ringbuf.poll()`` → numpy structured arrays, copied out of the ring into new
  memory (whose first touch costs a page fault per 4 KiB); and ``poll(copy=False)``, the same
  typed arrays as views of the ring, valid until the next poll (the C floor's callback gets
  a pointer into the ring too);
- ``record``'s loop in this process (no interpreter start-up): to JSONL and to Parquet files.

Then a perf event array, on the same producer's perf output (``--perf-events`` per CPU,
each CPU's share written by BPF_PROG_RUN on that CPU into rings large enough that none is
lost; before every timed consume, untimed, the case's reader stores its rings in the map):

- the C floor: libbpf's ``perf_buffer__consume`` with an empty sample callback, the producer
  run and the rings read in one C process, only the consume loop timed (``c/perf_floor.c``);
- bpfbatch: :class:`~bpfbatch.events.perf.PerfStream` polls, each batch a structured array of
  ``struct event`` (copied out of the rings), then committed;
- bcc: ``perf_buffer_poll`` calling a Python callback per event that makes the event object
  as bcc's ``table.event(data)`` does (a ctypes cast) and keeps its ``seq``; and
  ``bpfbatch.bcc.perf_buffer_poll``, the drop-in, with the same callback.

One table: each row's ratio is its time ÷ the C floor of its map type; events/s from the
median. Every perf case checks it got every event once.
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from tabulate import tabulate

from bpfbatch import Ringbuf
from bpfbatch import bcc as batched
from bpfbatch._sys import abi, libbpf
from bpfbatch.events.perf import PerfStream, online_cpus
from bpfbatch.events.recording import Recorder, run
from bpfbatch.labs.events import PERF, RINGBUF, EventProducer
from tools.bcc_setup import load_bcc

from . import harness

RING_BYTES = 1 << 26
FLOOR = "C libbpf ring_buffer__consume, empty callback"
BCC = "bcc ring_buffer_consume, Python callback per event"
NUMPY = "bpfbatch Ringbuf.poll() → numpy"
VIEWS = "bpfbatch Ringbuf.poll(copy=False) → numpy views"
JSONL = "bpfbatch record loop → JSONL file"
PARQUET = "bpfbatch record loop → Parquet file"
PERF_FLOOR = "perf: C libbpf perf_buffer__consume, empty callback"
PERF_NUMPY = "perf: bpfbatch PerfStream.poll() → numpy"
PERF_BCC = "perf: bcc perf_buffer_poll, Python callback per event"
PERF_DROPIN = "perf: bpfbatch.bcc.perf_buffer_poll, same callback"
#: A bcc object to host bcc's perf readers (bcc keeps them per BPF object).
_HOST = b"BPF_ARRAY(unused, u32, 1);"


class SelfTimed:
    """An external program that times its own work and prints ``COUNT NANOSECONDS``."""

    def __init__(self, argv: list[str], setup, events: int):
        self.argv, self.setup, self.events = argv, setup, events

    def run(self) -> harness.Sample:
        self.setup()
        out = subprocess.run(self.argv, capture_output=True, text=True, check=True).stdout
        seen, ns = (int(x) for x in out.split())
        assert seen >= self.events, out
        return harness.Sample(ns / 1e9, 0.0, 0.0)


def _numpy_reader(rb: Ringbuf, events: int, copy: bool):
    def read():
        seen = 0
        while seen < events:
            seen += len(rb.poll(0, copy=copy))
        rb.commit()
    return read


def _bcc_reader(bcc, producer: EventProducer, events: int):
    """bcc's RingBuf table over the producer's ring, and a function consuming ``events``."""
    program = bcc.BPF(text=b"BPF_RINGBUF_OUTPUT(unused, 1);")
    ring = producer.ring
    table = bcc.table.RingBuf(program, ring.info.id, ring.fd, ctypes.c_int, ctypes.c_int,
                              name=b"events_rb")
    event_type = np.ctypeslib.as_ctypes_type(producer.event_dtype)
    pointer = ctypes.POINTER(event_type)
    seqs: list[int] = []

    def callback(ctx, data, size):
        seqs.append(ctypes.cast(data, pointer).contents.seq)

    table.open_ring_buffer(callback)

    def read():
        seqs.clear()
        while len(seqs) < events:
            program.ring_buffer_consume()
    read.table = table  # bcc keeps the C callback alive only as long as its table object
    return program, read


def _recorder(stream, producer: EventProducer, fmt: str, path: Path, events: int):
    record_type = (producer.obj.btf, producer.obj.struct("event").id)

    def write():
        recorder = Recorder(stream, producer.ring.info, fmt, record_type=record_type,
                            path=str(path))
        run(recorder, count=events)
    return write


def _ctype(dtype: np.dtype) -> type[ctypes.Structure]:
    """``struct event`` as a ctypes structure (what bcc's ``table.event`` casts to), from the
    object's BTF dtype: every field a little-endian unsigned integer."""
    sizes = {1: ctypes.c_uint8, 2: ctypes.c_uint16, 4: ctypes.c_uint32, 8: ctypes.c_uint64}
    return type("Event", (ctypes.Structure,), {
        "_fields_": [(name, sizes[dtype[name].itemsize]) for name in dtype.names]})


class _Bench:
    def __init__(self, producer: EventProducer, bcc, events: int, pages: int):
        self.producer, self.events, self.pages = producer, events, pages
        self.cpus = online_cpus()
        self.expected = events * len(self.cpus)
        self.host = bcc.BPF(text=_HOST)
        perf = producer.perf
        self.table = bcc.table.PerfEventArray(self.host, perf.info.id, perf.fd, ctypes.c_int,
                                              ctypes.c_int, b"events_perf")
        self.table.max_entries = perf.info.max_entries  # bcc knows it only for its own maps
        event = ctypes.POINTER(_ctype(producer.event_dtype))
        self.seen: list[int] = []

        def callback(cpu, data, size):  # what a bcc tool's callback does with each event
            self.seen.append(ctypes.cast(data, event).contents.seq)
        self.callback = callback
        self.stream: PerfStream | None = None
        self.bcc_open = self.dropin_open = False

    def _produce(self) -> None:
        self.seen = []
        self.producer.configure(outputs=PERF, per_run=self.events)
        for cpu in self.cpus:
            self.producer.run(cpu)

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        if self.bcc_open:
            for cpu in self.cpus:
                del self.table[cpu]
            self.bcc_open = False
        if self.dropin_open:
            batched.close_buffer(self.table)
            self.dropin_open = False

    # -- bpfbatch → numpy

    def setup_numpy(self) -> None:
        self.close()
        self.stream = PerfStream(self.producer.perf, page_count=self.pages)
        self._produce()

    def numpy(self) -> None:
        parts = []
        while len(batch := self.stream.poll(0)):
            parts.append(batch.to_numpy(self.producer.event_dtype))
            batch.commit()
        self.seen = np.concatenate(parts)["seq"].tolist()
        self._check()

    # -- bcc

    def setup_bcc(self) -> None:
        self.close()
        self.table.open_perf_buffer(self.callback, page_cnt=self.pages)
        self.bcc_open = True
        self._produce()

    def bcc(self) -> None:
        while len(self.seen) < self.expected:
            self.host.perf_buffer_poll(timeout=100)
        self._check()

    # -- the drop-in

    def setup_dropin(self) -> None:
        self.close()
        batched.open_perf_buffer(self.table, self.callback, page_cnt=self.pages)
        self.dropin_open = True
        self._produce()

    def dropin(self) -> None:
        while len(self.seen) < self.expected:
            batched.perf_buffer_poll(self.host, timeout=100)
        self._check()

    # -- the C floor (its own process stores its rings and runs the producer)

    def floor(self, binary: str) -> SelfTimed:
        fd = self.producer.obj.program_fd("emit_run")
        info = abi.BpfProgInfo()
        libbpf.obj_info(fd, info, "emit_run")
        argv = [binary, str(self.producer.perf.info.id), str(info.id), str(self.events),
                str(self.pages)]
        return SelfTimed(argv, self.setup_floor, self.expected)

    def setup_floor(self) -> None:
        self.close()
        self.producer.configure(outputs=PERF, per_run=self.events)

    def _check(self) -> None:
        if len(self.seen) != self.expected or len(set(self.seen)) != self.expected:
            raise RuntimeError(f"read {len(self.seen)} events ({len(set(self.seen))} distinct) "
                               f"of {self.expected}")


def _perf_cases(bench: _Bench, floor: str) -> dict[str, harness.Case]:
    return {
        PERF_FLOOR: bench.floor(floor),
        PERF_NUMPY: harness.InProcess(bench.numpy, setup=bench.setup_numpy),
        PERF_BCC: harness.InProcess(bench.bcc, setup=bench.setup_bcc),
        PERF_DROPIN: harness.InProcess(bench.dropin, setup=bench.setup_dropin),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench events", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000,
                        help="ring buffer events per round (the ring holds 1.6 million)")
    parser.add_argument("--perf-events", type=int, default=100_000,
                        help="perf events per CPU per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)
    events, bcc = args.events, load_bcc()
    if bcc is None:
        raise SystemExit("bcc (python3-bpfcc) and kernel headers are needed for this suite")
    # perf rings that hold a round: 48 bytes a record (a 32-byte event), a power of two of pages
    pages = 1 << max(0, (args.perf_events * 48 // 4096 + 1) - 1).bit_length()
    perf_total = args.perf_events * len(online_cpus())

    with EventProducer(ring_bytes=RING_BYTES) as producer, tempfile.TemporaryDirectory() as tmp:
        def produce():
            producer.configure(outputs=RINGBUF, per_run=events)
            producer.run()

        floor = harness.build_c("ringbuf_floor.c", Path(tmp))
        rb = Ringbuf.open(producer.ring, type="struct event")
        stream = rb.stream  # one reader per map: the recorder reads through rb's stream
        cases: dict[str, harness.Case] = {
            FLOOR: SelfTimed([floor, str(producer.ring.info.id), str(events)], produce, events),
            NUMPY: harness.InProcess(_numpy_reader(rb, events, True), setup=produce),
            VIEWS: harness.InProcess(_numpy_reader(rb, events, False), setup=produce),
            JSONL: harness.InProcess(_recorder(stream, producer, "jsonl",
                                               Path(tmp) / "ev.jsonl", events), setup=produce),
            PARQUET: harness.InProcess(_recorder(stream, producer, "parquet",
                                                 Path(tmp) / "ev.parquet", events),
                                       setup=produce),
        }
        program, read = _bcc_reader(bcc, producer, events)
        cases[BCC] = harness.InProcess(read, setup=produce)
        bench = _Bench(producer, bcc, args.perf_events, pages)
        perf_cases = _perf_cases(bench, harness.build_c("perf_floor.c", Path(tmp)))
        try:
            samples = harness.interleave(cases, rounds=args.rounds)
            perf_samples = harness.interleave(perf_cases, rounds=args.rounds)
        finally:
            bench.close()
            bench.host.cleanup()
            program.cleanup()
            rb.close()
    rows = harness.summarize(samples, FLOOR) + harness.summarize(perf_samples, PERF_FLOOR)
    count = {name: events for name in cases} | {name: perf_total for name in perf_cases}
    harness.report(f"event streams: ring buffer {events:,} events, perf event array "
                   f"{perf_total:,} ({args.perf_events:,} per CPU, {pages}-page rings), "
                   "32 bytes each", rows, "the C floor of its map type", out_dir=args.out,
                   params={"events": events, "perf_events_per_cpu": args.perf_events,
                           "pages": pages})
    wall = {r["case"]: r["wall_s"] for r in rows}
    rates = [[r["case"], f"{count[r['case']] / r['wall_s'] / 1e6:.2f}",
              f"{r['ratio']:.2f}×"] for r in rows]
    print(tabulate(rates, headers=["case", "M events/s", "÷ its C floor"],
                   tablefmt="github") + "\n")
    targets = [[f"{name} ÷ its C floor", f"{wall[name] / wall[base]:.2f}×", "≤ 2×"]
               for name, base in ((VIEWS, FLOOR), (NUMPY, FLOOR), (PERF_NUMPY, PERF_FLOOR))]
    targets += [[f"{slow} ÷ {name}", f"{wall[slow] / wall[name]:.1f}×", "≥ 10×"]
                for slow, name in ((BCC, VIEWS), (BCC, NUMPY), (PERF_BCC, PERF_NUMPY))]
    targets += [[f"{name} events/s", f"{events / wall[name] / 1e6:.2f} M", "≥ 1 M"]
                for name in (JSONL, PARQUET)]
    print(tabulate(targets, headers=["target", "measured", "goal"], tablefmt="github"))
    return 0
