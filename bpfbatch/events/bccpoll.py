"""bcc's event loops, batched underneath: drop-ins for ``open_perf_buffer`` /
``perf_buffer_poll`` and ``open_ring_buffer`` / ``ring_buffer_poll`` / ``ring_buffer_consume``.

A bcc tool keeps its callback and its loop; only the calls change::

    from bpfbatch import bcc as batched

    batched.open_perf_buffer(b["events"], print_event, lost_cb=on_lost)
    while True:
        batched.perf_buffer_poll(b, timeout=1000)    # was: b.perf_buffer_poll(timeout=1000)

The callback is called as bcc calls it — ``callback(cpu, data, size)`` for a perf buffer,
``callback(ctx, data, size)`` for a ring buffer, ``data`` the address of the event in the
ring — so the tool's ``b["events"].event(data)`` gives bcc's own ctypes event object, over
the ring's memory as in bcc (valid during the callback). ``lost_cb(count)`` is called for
each ``PERF_RECORD_LOST``, where it stands among the samples, as bcc calls it.

Underneath, each poll takes every record waiting in one pass of the stream reader
(:mod:`bpfbatch.events`) and calls the callback from a Python loop, instead of bcc's C loop
calling into Python through a ctypes trampoline per event. Each ring's space is given back
(the batch committed) once the callback has returned for every record of the batch. A
callback that raises stops the loop there: the records it was called for are done (given
back to the kernel), the rest of the batch are handed to the next poll first, so no event is
seen twice or skipped (a process that ends there leaves the rest in the ring, for the next
reader). A ring buffer callback that returns a negative number stops the poll the same
way (libbpf's rule; bcc's poll ignores it). A callback that raises ``BrokenPipeError`` makes
the process exit, as bcc's does.
"""

from __future__ import annotations

import errno
import select
import weakref

from ..api import Map
from . import open_stream
from .batch import EventStream

#: The readers opened per bcc ``BPF`` object, by table (its map fd).
_opened: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _Reader:
    """One table's stream, its callbacks, and the batch being handed out (``held``: its
    records from ``next`` on, its lost records from ``next_loss`` on, are still to go)."""

    def __init__(self, stream: EventStream, call, lost_cb=None, ctx=None):
        self.stream = stream
        self.call = call
        self.lost_cb = lost_cb
        self.ctx = ctx
        self.held = None
        self.next = self.next_loss = 0

    def run(self, timeout: float | None) -> int:
        """Hand out the held batch's rest, else one new batch (waiting up to ``timeout``);
        the number of records the callback was called for."""
        if self.held is None:
            batch = self.stream.poll(timeout)
            if not len(batch):
                return 0
            self.held, self.next, self.next_loss = batch, 0, 0
        batch, first = self.held, self.next
        try:
            self._hand_out(batch, first)
        finally:  # what the callback was called for is done: given back, never seen again
            if self.next == len(batch):
                self.held = None
            batch.commit(self.next)
        return self.next - first

    def _hand_out(self, batch, first: int) -> None:
        """Call the callback for the records from ``first`` on, each lost record's callback
        where it stands; :attr:`next` follows (a record the callback was called for is
        done, whatever it did)."""
        addresses = (batch.offsets + batch.data.ctypes.data).tolist()
        sizes = batch.sizes.tolist()
        losses = getattr(batch, "losses", None) or []
        firsts = batch.cpus.tolist() if hasattr(batch, "cpus") else None  # perf: the CPU
        try:
            while True:
                stop = losses[self.next_loss][0] if self.next_loss < len(losses) else \
                    len(addresses)
                if not self._run_span(firsts, addresses, sizes, stop):
                    return  # a ring buffer callback said stop
                if self.next_loss == len(losses):
                    return
                self.next_loss += 1  # reported, whatever the callback does
                if self.lost_cb is not None:
                    self.lost_cb(losses[self.next_loss - 1][2])
        except OSError as exc:
            if exc.errno == errno.EPIPE:  # a closed pipe ends the process, as in bcc
                raise SystemExit() from None
            raise

    def _run_span(self, cpus, addresses, sizes, stop: int) -> bool:
        """The callback for records :attr:`next` to ``stop``; ``False`` when a ring buffer
        callback returned a negative number (libbpf's stop; bcc's poll ignores it)."""
        call, i = self.call, self.next
        try:
            if cpus is not None:
                for cpu, address, size in zip(cpus[i:stop], addresses[i:stop], sizes[i:stop]):
                    i += 1
                    call(cpu, address, size)
                return True
            ctx = self.ctx
            for address, size in zip(addresses[i:stop], sizes[i:stop]):
                i += 1
                if _stops(call(ctx, address, size)):
                    return False
            return True
        finally:
            self.next = i


def _stops(returned) -> bool:
    """A ring buffer callback's return value stops the poll when negative (libbpf's rule;
    anything that is not a number is 0, as bcc takes it)."""
    try:
        return int(returned) < 0
    except (TypeError, ValueError):
        return False


def _table_map(table) -> Map:
    return Map(table.map_fd, owned=False)


def _register(table, reader) -> None:
    """Open ``reader()`` for ``table`` in place of the one opened before (closed first: a
    map has one reader at a time, :mod:`.claim`)."""
    close_buffer(table)
    _opened.setdefault(table.bpf, {})[table.map_fd] = reader()


def open_perf_buffer(table, callback, page_cnt: int = 8, lost_cb=None,
                     wakeup_events: int = 1) -> None:
    """bcc's ``table.open_perf_buffer(callback, page_cnt, lost_cb, wakeup_events)``: a ring
    of ``page_cnt`` pages per online CPU, stored in the table, read by
    :func:`perf_buffer_poll`."""
    from .perf import PerfStream

    _register(table, lambda: _Reader(PerfStream(_table_map(table), page_count=page_cnt,
                                                wakeup_events=wakeup_events),
                                     callback, lost_cb))


def open_ring_buffer(table, callback, ctx=None) -> None:
    """bcc's ``table.open_ring_buffer(callback, ctx)``, read by :func:`ring_buffer_poll`
    and :func:`ring_buffer_consume`."""
    _register(table, lambda: _Reader(open_stream(_table_map(table)), callback, ctx=ctx))


def close_buffer(table) -> None:
    """Close what :func:`open_perf_buffer` or :func:`open_ring_buffer` opened for ``table``
    (bcc's ``close_perf_buffer``; records not handed out stay in the ring)."""
    reader = _opened.get(table.bpf, {}).pop(table.map_fd, None)
    if reader is not None:
        reader.stream.close()


def perf_buffer_poll(bpf, timeout: int = -1) -> int:
    """bcc's ``bpf.perf_buffer_poll(timeout)``: wait up to ``timeout`` ms (-1: for ever) for
    events on the perf buffers opened for ``bpf``, then call their callbacks for every event
    waiting; the number of events handed out."""
    return _poll(bpf, timeout, perf=True)


def ring_buffer_poll(bpf, timeout: int = -1) -> int:
    """bcc's ``bpf.ring_buffer_poll(timeout)``, for the ring buffers opened for ``bpf``."""
    return _poll(bpf, timeout, perf=False)


def ring_buffer_consume(bpf) -> int:
    """bcc's ``bpf.ring_buffer_consume()``: every event waiting, without waiting."""
    return _poll(bpf, 0, perf=False)


def _poll(bpf, timeout: int, *, perf: bool) -> int:
    from .perf import PerfStream

    readers = [r for r in _opened.get(bpf, {}).values()
               if isinstance(r.stream, PerfStream) == perf]
    if not readers:
        kind = "perf" if perf else "ring"
        raise ValueError(f"no {kind} buffer was opened for this BPF object with "
                         f"bpfbatch.bcc.open_{kind}_buffer")
    handed = sum(r.run(0) for r in readers)
    if handed or timeout == 0:
        return handed
    select.select([r.stream.fileno() for r in readers], [], [],
                  None if timeout < 0 else timeout / 1000)
    return sum(r.run(0) for r in readers)
