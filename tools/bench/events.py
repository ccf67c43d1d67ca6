"""``python -m tools.bench events [--events N] [--rounds R]``: a ring buffer's events read by
bpfbatch and by its peers, from the same producer, in the same run, interleaved.

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

Ratios are each case's time ÷ the C floor's; events/s from the median.
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
from bpfbatch.events import open_stream
from bpfbatch.events.recording import Recorder, run
from bpfbatch.labs.events import RINGBUF, EventProducer
from tools.bcc_setup import load_bcc

from . import harness

RING_BYTES = 1 << 26
FLOOR = "C libbpf ring_buffer__consume, empty callback"
BCC = "bcc ring_buffer_consume, Python callback per event"
NUMPY = "bpfbatch Ringbuf.poll() → numpy"
VIEWS = "bpfbatch Ringbuf.poll(copy=False) → numpy views"
JSONL = "bpfbatch record loop → JSONL file"
PARQUET = "bpfbatch record loop → Parquet file"


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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench events", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000,
                        help="events per round (the ring holds 1.6 million)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)
    events, bcc = args.events, load_bcc()

    with EventProducer(ring_bytes=RING_BYTES) as producer, tempfile.TemporaryDirectory() as tmp:
        producer.configure(outputs=RINGBUF, per_run=events)

        def produce():
            producer.run()

        floor = harness.build_c("ringbuf_floor.c", Path(tmp))
        rb = Ringbuf.open(producer.ring, type="struct event")
        stream = open_stream(producer.ring)
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
        program = None
        if bcc is not None:
            program, read = _bcc_reader(bcc, producer, events)
            cases[BCC] = harness.InProcess(read, setup=produce)
        try:
            rows = harness.summarize(harness.interleave(cases, rounds=args.rounds), FLOOR)
        finally:
            if program is not None:
                program.cleanup()
            rb.close()
            stream.close()
    harness.report(f"ring buffer, {events:,} events of 32 bytes", rows, FLOOR,
                   out_dir=args.out, params={"events": events})
    wall = {r["case"]: r["wall_s"] for r in rows}
    rates = [[r["case"], f"{events / r['wall_s'] / 1e6:.2f}"] for r in rows]
    print(tabulate(rates, headers=["case", "M events/s"], tablefmt="github") + "\n")
    targets = [[f"{name} ÷ {FLOOR}", f"{wall[name] / wall[FLOOR]:.2f}×", "≤ 2×"]
               for name in (VIEWS, NUMPY)]
    if BCC in wall:
        targets += [[f"{BCC} ÷ {name}", f"{wall[BCC] / wall[name]:.1f}×", "≥ 10×"]
                    for name in (VIEWS, NUMPY)]
    targets += [[f"{name} events/s", f"{events / wall[name] / 1e6:.2f} M", "≥ 1 M"]
                for name in (JSONL, PARQUET)]
    print(tabulate(targets, headers=["target", "measured", "goal"], tablefmt="github"))
    return 0
