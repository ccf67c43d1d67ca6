"""The event producer (``progs/events.bpf.c``) loaded and driven from Python: for the record
command's tests, its benches and the demo.

    with EventProducer(ring_bytes=1 << 20) as producer:
        producer.configure(outputs=RINGBUF, per_run=1000)
        producer.run()                        # 1000 events now, on this CPU (BPF_PROG_RUN)
        producer.attach()                     # or: one event per syscall of target_pid
        producer.counters()                   # {'next_seq': 1000, 'ringbuf_failures': 0, ...}

The layouts (``struct event``, ``struct event_var``, ``struct event_config``) come from the
object's BTF, never retyped here.

As a program, it fills a ring buffer pinned in a folder, for the README and the demo::

    python -m bpfbatch.labs.events /sys/fs/bpf/events --events 1000

loads the producer (into the ring already pinned there, if any), produces the events, pins
the ring (``events_rb``) and the producing program (``emit_run``: it keeps the ring listed
as used by a program with BTF, where ``record --type`` finds ``struct event``), and exits;
the ring and its events stay until the pins are removed.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os

import numpy as np

from .._sys import abi
from .._sys.libbpf import check, lib
from ..errors import from_errno
from ..loader import BpfObject

#: ``event_config.outputs`` bits (``progs/events.h``).
RINGBUF, PERF = 1, 2
#: The producer's own counters, in ``.bss`` (see ``progs/events.bpf.c``).
COUNTERS = ("next_seq", "ringbuf_failures", "ringbuf_discarded", "perf_failures")
RING_MAP, PERF_MAP = "events_rb", "events_perf"
#: ``BPF_F_TEST_RUN_ON_CPU`` (uapi bpf.h): run on ``opts.cpu`` instead of this CPU.
TEST_RUN_ON_CPU = 1 << 0


class EventProducer:
    """``events.bpf.o`` loaded (not attached: :meth:`attach` hooks the syscall tracepoint).
    ``ring_bytes`` sizes the ring buffer (a power of two, at least a page)."""

    def __init__(self, *, ring_bytes: int | None = None, ring_fd: int | None = None):
        self.obj = BpfObject.package("events")
        try:
            if ring_bytes is not None:
                self.obj.configure_map(RING_MAP, max_entries=ring_bytes)
            if ring_fd is not None:  # produce into an existing ring (libbpf dups the fd)
                self.obj.configure_map(RING_MAP, reuse_fd=ring_fd)
            self.obj.load()
        except BaseException:
            self.obj.close()
            raise
        self._config = self.obj.map("events_config")
        self.config_dtype = self.obj.dtype("event_config")
        self.event_dtype = self.obj.dtype("event")
        self.event_var_dtype = self.obj.dtype("event_var")
        self._run_fd = self.obj.program_fd("emit_run")

    @property
    def ring(self):
        """The ring buffer map (a :class:`~bpfbatch.Map` owned by the producer)."""
        return self.obj.map(RING_MAP)

    @property
    def perf(self):
        """The perf event array map (owned by the producer)."""
        return self.obj.map(PERF_MAP)

    def configure(self, *, outputs: int = RINGBUF, target_pid: int = 0, target_nr: int = 0,
                  data_max: int = 0, discard_every: int = 0, per_run: int = 0) -> None:
        """Write ``struct event_config`` (events.h says what each field does); the programs
        read it per event, so it takes effect at once."""
        cfg = np.zeros(1, self.config_dtype)
        for field, value in dict(outputs=outputs, target_pid=target_pid, target_nr=target_nr,
                                 data_max=data_max, discard_every=discard_every,
                                 per_run=per_run).items():
            cfg[field] = value
        self._config.update(b"\0\0\0\0", cfg.tobytes())

    def run(self, cpu: int | None = None) -> None:
        """Run ``emit_run`` once (``per_run`` events), on ``cpu`` or on this one."""
        opts = abi.opts(abi.BpfTestRunOpts)
        if cpu is not None:
            opts.flags, opts.cpu = TEST_RUN_ON_CPU, cpu
        ret = lib.bpf_prog_test_run_opts(self._run_fd, ctypes.byref(opts))
        if ret < 0:
            raise from_errno("run the event producer", -ret, obj=self.obj.label)

    def attach(self) -> None:
        """Hook the syscall tracepoint (events for ``target_pid``'s syscalls)."""
        self.obj.attach()

    def counters(self) -> dict[str, int]:
        """The producer's counters (:data:`COUNTERS`), read now."""
        return {name: self.obj.global_value(".bss", name) for name in COUNTERS}

    def pin(self, directory: str) -> None:
        """Pin the ring (``events_rb``, unless it is pinned there already) and the run
        program (``emit_run``, replacing an earlier one) into ``directory`` (created)."""
        os.makedirs(directory, exist_ok=True)
        ring = os.path.join(directory, RING_MAP)
        if not os.path.exists(ring):
            self.ring.pin(ring)
        program = os.path.join(directory, "emit_run")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(program)
        check(lib.bpf_obj_pin(self._run_fd, program.encode()), "pin program", program)

    def close(self) -> None:
        self.obj.close()

    def __enter__(self) -> "EventProducer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main(argv: list[str] | None = None) -> None:
    """``python -m bpfbatch.labs.events DIR [--events N] [--data-max N]`` (see the module)."""
    parser = argparse.ArgumentParser(prog="python -m bpfbatch.labs.events",
                                     description="Fill the ring buffer pinned in DIR.")
    parser.add_argument("directory", metavar="DIR")
    parser.add_argument("--events", type=int, default=1000, help="Events to produce.")
    parser.add_argument("--data-max", type=int, default=0,
                        help="Variable-size events (struct event_var) of up to N data bytes.")
    args = parser.parse_args(argv)
    from ..api import Map

    ring_path = os.path.join(args.directory, RING_MAP)
    ring = Map.open(pinned=ring_path) if os.path.exists(ring_path) else None
    try:
        with EventProducer(ring_fd=None if ring is None else ring.fd) as producer:
            producer.configure(outputs=RINGBUF, per_run=args.events, data_max=args.data_max)
            producer.run()
            producer.pin(args.directory)
            failed = producer.counters()["ringbuf_failures"]
    finally:
        if ring is not None:
            ring.close()
    print(f"{args.events - failed} events produced into {ring_path}"
          + (f" ({failed} did not fit)" if failed else ""))


if __name__ == "__main__":
    main()
