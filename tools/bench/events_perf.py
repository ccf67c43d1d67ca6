"""``python -m tools.bench events_perf [--events N] [--rounds R]``: a perf event array read
by bpfbatch and by bcc, on one producer (``progs/events.bpf.c``'s perf output, 32-byte
events), in the same run, interleaved.

Before every timed consume, untimed: the case's reader stores its rings in the map, and the
producer writes ``--events`` events on each CPU (BPF_PROG_RUN on that CPU), into rings large
enough that none is lost. Timed: taking every event out of the rings.

- ``bpfbatch → numpy``: :class:`bpfbatch.events.perf.PerfStream` polls, each batch made a
  structured array of ``struct event`` (copied out of the ring), then committed;
- ``bcc perf_buffer_poll``: bcc's reader calling a Python callback per event that makes the
  event object as bcc's ``table.event(data)`` does (a ctypes cast) and counts it;
- ``bpfbatch.bcc.perf_buffer_poll``: the drop-in, the same callback, the rings read in one pass
  each underneath.

Every case checks it got every event (the sequence numbers, once each).
"""

from __future__ import annotations

import argparse
import ctypes
from pathlib import Path

import numpy as np

from bpfbatch import bcc as batched
from bpfbatch.events.perf import PerfStream, online_cpus
from bpfbatch.labs.events import PERF, EventProducer
from tools.bcc_setup import load_bcc

from . import harness

#: A bcc object to host bcc's perf readers (bcc keeps them per BPF object).
_HOST = b"BPF_ARRAY(unused, u32, 1);"


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

    def _check(self) -> None:
        if len(self.seen) != self.expected or len(set(self.seen)) != self.expected:
            raise RuntimeError(f"read {len(self.seen)} events ({len(set(self.seen))} distinct) "
                               f"of {self.expected}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench events_perf")
    parser.add_argument("--events", type=int, default=100_000, help="events per CPU per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)
    bcc = load_bcc()
    if bcc is None:
        raise SystemExit("bcc (python3-bpfcc) and kernel headers are needed for this suite")
    # rings that hold a round: 48 bytes a record (a 32-byte event), in a power of two of pages
    pages = 1 << max(0, (args.events * 48 // 4096 + 1) - 1).bit_length()
    with EventProducer() as producer:
        bench = _Bench(producer, bcc, args.events, pages)
        try:
            cases = {
                "bpfbatch → numpy": harness.InProcess(bench.numpy, setup=bench.setup_numpy),
                "bcc perf_buffer_poll (Python callback)": harness.InProcess(
                    bench.bcc, setup=bench.setup_bcc),
                "bpfbatch.bcc.perf_buffer_poll (same callback)": harness.InProcess(
                    bench.dropin, setup=bench.setup_dropin),
            }
            samples = harness.interleave(cases, rounds=args.rounds)
        finally:
            bench.close()
            bench.host.cleanup()
    rows = harness.summarize(samples, "bpfbatch → numpy")
    total = args.events * len(online_cpus())
    for row in rows:
        row["events_per_s"] = total / row["wall_s"]
    title = (f"perf event array: {total:,} events of 32 bytes ({args.events:,} per CPU), "
             f"{pages}-page rings")
    harness.report(title, rows, "bpfbatch → numpy", out_dir=args.out,
                   params={"events_per_cpu": args.events, "pages": pages})
    for row in rows:
        print(f"{row['case']}: {row['events_per_s'] / 1e6:.2f} M events/s")
    return 0
