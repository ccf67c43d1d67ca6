"""The BPF ring buffer (``BPF_MAP_TYPE_RINGBUF``) read as the kernel lays it out.

The map's fd maps three parts (``kernel/bpf/ringbuf.c``): at offset 0 one page holding the
consumer position, the only part user space may write; at one page the producer position's
page, then the data area, read-only. The data area is mapped twice in a row, so a record that
wraps past the end reads as one contiguous run of bytes, and so does everything between the
consumer and the producer position: a whole pass is one slice, without a copy.

Positions are byte counts that only grow (the offset in the data area is ``pos & (size - 1)``).
Each record is an 8-byte header (``u32 len``, ``u32`` page offset for the kernel) then ``len``
bytes, padded to 8. Two high bits of ``len`` say what the producer did with it:
``BPF_RINGBUF_BUSY_BIT`` (bit 31), reserved and not yet submitted, which nothing past may be
read before (records are read in order: the pass ends there and the record is read when it
is submitted); ``BPF_RINGBUF_DISCARD_BIT`` (bit 30), discarded: skipped, its space given back
with the records around it.

The pass reads the producer position once (x86 orders loads, so the headers read after it
are at least as new), then walks the headers. Records that share one header (same length,
neither bit set) follow each other at one stride, so a run of them is found by comparing the
headers as one strided numpy array (:func:`.runs.run_length`), not one at a time: a stream of
fixed-size events is a handful of comparisons per pass. The consumer position is written only by :meth:`Batch.commit`; the
stream keeps its own read position, where the next pass starts.

The kernel wakes a poller when a record is submitted while the consumer has caught up with it
(and ``poll`` reports readable whenever the positions differ), so waiting is an epoll on the
map's fd, which is also the stream's :meth:`fileno`. One consumer per ring: the kernel does
not arbitrate between two, so the stream claims the map first (:mod:`.claim`).
"""

from __future__ import annotations

import mmap
import select
import time

import numpy as np

from ..errors import BpfBatchError
from .batch import Batch, EventStream
from .runs import layout, run_length

#: Header bits of ``len`` (``include/uapi/linux/bpf.h``).
BUSY_BIT = 1 << 31
DISCARD_BIT = 1 << 30
HEADER_SIZE = 8  # BPF_RINGBUF_HDR_SZ
_LEN_MASK = DISCARD_BIT - 1
#: How often a wait looks for new records while taken ones keep the fd readable (s).
_RECHECK = 0.005


class RingbufStream(EventStream):
    """A reader of one ring buffer map (``source``: a :class:`~bpfbatch.Map`, not owned)."""

    def __init__(self, source):
        info = source.info
        super().__init__(info)
        self.label = info.label
        self.size = info.max_entries
        self._mask = self.size - 1
        page = mmap.PAGESIZE
        fd = source.fd
        try:
            self._cons_map = mmap.mmap(fd, page, mmap.MAP_SHARED,
                                       mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
            try:
                self._data_map = mmap.mmap(fd, page + 2 * self.size, mmap.MAP_SHARED,
                                           mmap.PROT_READ, offset=page)
            except BaseException:
                self._cons_map.close()
                raise
        except OSError as exc:
            self._claim.release()
            raise BpfBatchError(f"map the ring ({self.size} bytes): {exc.strerror}",
                                obj=self.label, errno=exc.errno) from None
        except BaseException:
            self._claim.release()
            raise
        self._consumer = np.frombuffer(self._cons_map, np.uint64, 1)
        self._producer = np.frombuffer(self._data_map, np.uint64, 1)
        self._data = np.frombuffer(self._data_map, np.uint8, 2 * self.size, offset=page)
        self._headers = self._data.view(np.uint32)
        self._epoll = select.epoll()
        self._epoll.register(fd, select.EPOLLIN)
        self._read = int(self._consumer[0])  # where the next pass starts

    def rewind(self) -> None:
        self._read = int(self._consumer[0])

    def fileno(self) -> int:
        return self._epoll.fileno()

    def _wait(self, timeout: float | None) -> bool:
        """Until a record past the read position, or ``timeout``. The fd is readable while
        the positions differ, which records taken and not yet committed keep true: then
        look again every :data:`_RECHECK` seconds instead of spinning."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._epoll.poll(-1 if left is None else left, 1):
                return False
            if int(self._producer[0]) > self._read:
                return True
            if left is not None and left <= _RECHECK:
                return False
            time.sleep(_RECHECK)

    def _take(self) -> Batch:
        consumer = int(self._consumer[0])
        producer = int(self._producer[0])
        self.stats.lag_bytes = producer - consumer
        self.stats.high_water = max(self.stats.high_water, (producer - consumer) / self.size)
        start = max(self._read, consumer)
        base = start & self._mask
        runs, end = self._walk(base, producer - start)
        self._read = start + end
        self.stats.held = (self._read - consumer) / self.size
        if not runs:
            if end and consumer == start:  # only discarded records: give them back now
                self._advance(start + end)
            return Batch(self._data[base:base], _EMPTY, _EMPTY_SIZES)
        return _batch(self._data[base:base + end], runs, start, end, self._advance)

    def _walk(self, base: int, waiting: int) -> tuple[list[tuple[int, int, int, int]], int]:
        """``(runs, end)``: ``(offset, length, stride, count)`` of each run of submitted
        records with one header, offsets from ``base``; ``end`` is where the pass stopped
        (the first busy record, or everything waiting)."""
        headers = self._headers
        runs, at = [], 0
        while at < waiting:
            header = int(headers[(base + at) >> 2])
            if header & BUSY_BIT:
                break
            length = header & _LEN_MASK
            stride = (length + HEADER_SIZE + 7) & ~7
            most = (waiting - at) // stride
            count = run_length(headers[(base + at) >> 2::stride >> 2][:most])
            if not header & DISCARD_BIT:
                runs.append((at + HEADER_SIZE, length, stride, count))
            at += count * stride
        return runs, at

    def _advance(self, to: int) -> None:
        """Commit: the consumer position moves to ``to``, unless a later batch's commit moved
        it past already (an older batch committed late gives nothing back twice)."""
        if to > int(self._consumer[0]):
            self._consumer[0] = to
            self.stats.held = max(0, self._read - to) / self.size

    def _release(self) -> None:
        self._epoll.close()
        del self._consumer, self._producer, self._data, self._headers
        for mapping in (self._cons_map, self._data_map):
            try:
                mapping.close()
            except BufferError:  # a batch's view is still alive: unmapped when it goes
                pass


def _batch(data: np.ndarray, runs: list, start: int, end: int, advance) -> Batch:
    """A :class:`Batch` over ``data`` (the pass from position ``start``, ``end`` bytes) from
    the runs :meth:`RingbufStream._walk` found; its commit advances the consumer past the
    first ``k`` records (all of them: to the pass's end, discarded records after them too)."""
    firsts, lengths, strides, counts = zip(*runs)
    offsets, sizes = layout(firsts, strides, counts, lengths)

    def commit(k: int) -> None:
        if k == len(offsets):
            advance(start + end)
        elif k:
            last = int(offsets[k - 1]) - HEADER_SIZE
            advance(start + last + ((int(sizes[k - 1]) + HEADER_SIZE + 7) & ~7))

    return Batch(data, offsets, sizes, commit, stride=runs[0][2] if len(runs) == 1 else None)


_EMPTY = np.zeros(0, np.int64)
_EMPTY_SIZES = np.zeros(0, np.int64)
