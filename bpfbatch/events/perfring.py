"""One CPU's perf ring, read as the kernel lays it out (``include/uapi/linux/perf_event.h``).

The mapping is one metadata page (``struct perf_event_mmap_page``) and ``2**n`` data pages.
The kernel writes records at ``data_head`` and never past ``data_tail``, which only the
reader moves; both are byte positions that grow without wrapping, a record's place in the
data area being the position modulo its size. Every record starts with ``struct
perf_event_header`` (``type`` u32, ``misc`` u16, ``size`` u16) and is 8-byte aligned, so a
header never straddles the end of the area, but the record's body may: it then continues at
the start of the area.

A BPF output event writes two kinds of records: ``PERF_RECORD_SAMPLE`` with
``PERF_SAMPLE_RAW`` only — the header, a u32 size, then the raw bytes the program passed to
``bpf_perf_event_output``, padded so that the record stays 8-aligned (the u32 counts the
padding: it is the record's size less 12) — and ``PERF_RECORD_LOST`` (header, u64 id, u64
lost), which the kernel writes in place of the samples it dropped while the ring was full.

Ordering. ``data_head`` is read before the records it covers, and ``data_tail`` written only
after they were read (and, through :meth:`PerfRing.commit`, after the caller wrote them
out): a load-acquire and a store-release in the kernel's terms (``ring_buffer.c``'s comment
on the ring's barriers). Here they are plain aligned 8-byte loads and stores, which are
exactly that on x86-64 (see :func:`bpfbatch._sys.libbpf.perf_event_open`, which refuses
other machines).
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import struct

from .._numpy import np
from .._sys import abi
from ..errors import BpfBatchError
from .runs import layout, run_length

_HEADER = struct.Struct("<IHH")
_LOST = struct.Struct("<Q")
#: A header read as one little-endian u64, less its ``misc`` bits: type and size.
_TYPE_AND_SIZE = 0xFFFF_0000_FFFF_FFFF
#: A sample's bytes before its raw data: the header and the u32 raw size.
SAMPLE_HEAD = 12
#: Consecutive samples of one size after which the rest of a pass is tried as one run.
_STREAK = 4


@dataclasses.dataclass
class Pass:
    """What one pass over a ring took: the raw data of ``count`` samples (``offsets`` and
    ``sizes`` into ``data``, in the order the kernel wrote them), the drops the kernel reported
    meanwhile (``losses``: the data offset of each ``PERF_RECORD_LOST`` and its count; ``lost``
    their sum), and where it began and ended in the ring (``start``, ``tail``: the tail that
    commits it whole). ``data`` is a view of the ring itself when the taken bytes do not wrap
    (valid until the commit), else a copy."""

    cpu: int
    data: object
    offsets: "np.ndarray"
    sizes: "np.ndarray"
    losses: list[tuple[int, int]]
    start: int
    tail: int
    #: The samples as runs of one record size: ``(first record's offset, record size, count)``.
    runs: list[tuple[int, int, int]]

    @property
    def lost(self) -> int:
        return sum(count for _, count in self.losses)

    def end_of(self, m: int) -> int:
        """The ring position just past the first ``m`` samples (and the lost records before
        them; all of the pass when ``m`` is its count)."""
        return self.tail if m >= self.count else self.start + int(self.offsets[m]) - SAMPLE_HEAD

    def lost_between(self, first: int, end: int) -> int:
        """Drops reported by the lost records of the pass in ring positions ``[first, end)``."""
        return sum(count for at, count in self.losses if first <= self.start + at < end)

    @property
    def count(self) -> int:
        return len(self.offsets)


class PerfRing:
    """The ring of the perf event ``fd`` (``page_count`` data pages, a power of two), mapped
    read-write (the reader writes ``data_tail``, which tells the kernel the room it may
    overwrite; a read-only mapping would make it an overwriting ring)."""

    def __init__(self, cpu: int, fd: int, page_count: int, label: str):
        self.cpu = cpu
        self.fd = fd
        self.label = label
        self._mm = mmap.mmap(fd, (page_count + 1) * mmap.PAGESIZE, mmap.MAP_SHARED,
                             mmap.PROT_READ | mmap.PROT_WRITE)
        self._meta = memoryview(self._mm)[:mmap.PAGESIZE].cast("Q")
        offset = self._meta[abi.PERF_MMAP_DATA_OFFSET // 8] or mmap.PAGESIZE
        self.size = self._meta[abi.PERF_MMAP_DATA_SIZE // 8] or page_count * mmap.PAGESIZE
        self._data = memoryview(self._mm)[offset:offset + self.size]
        self._head = abi.PERF_MMAP_DATA_HEAD // 8
        self._tail = abi.PERF_MMAP_DATA_TAIL // 8
        self._read = self._meta[self._tail]  # where the next pass starts (taken up to there)

    def pending(self) -> int:
        """Bytes written and not yet committed."""
        return self._meta[self._head] - self._meta[self._tail]

    def committed(self) -> int:
        """The tail: the position up to which the kernel may write again."""
        return self._meta[self._tail]

    def held(self) -> float:
        """The fraction of the ring taken and not committed (the kernel cannot reuse it)."""
        return max(0, self._read - self._meta[self._tail]) / self.size

    def unread(self) -> bool:
        """Whether records were written since the last pass."""
        return self._meta[self._head] != self._read

    def rewind(self) -> None:
        """The next pass starts again at the committed tail."""
        self._read = self._meta[self._tail]

    def take(self) -> Pass | None:
        """Every record between the end of the last pass (or the tail, after a commit past it
        or a :meth:`rewind`) and the head as it is now (``None``: none); the tail does not
        move until :meth:`commit`."""
        head = self._meta[self._head]  # before the records: see the module's note on ordering
        tail = max(self._read, self._meta[self._tail])
        if head == tail:
            return None
        avail = head - tail
        if avail > self.size or avail % 8:
            raise BpfBatchError(f"perf ring of CPU {self.cpu}: head {head} and tail {tail} "
                                f"are {avail} bytes apart in a {self.size}-byte ring",
                                obj=self.label)
        at = tail % self.size
        if at + avail <= self.size:
            data = self._data[at:at + avail]
        else:  # the records wrap: one contiguous copy of the two pieces
            data = bytes(self._data[at:]) + bytes(self._data[:at + avail - self.size])
        runs, losses = self._walk(data)
        self._read = head
        starts, steps, counts = zip(*runs) if runs else ((), (), ())
        # each sample's raw data follows its 12-byte head; its size counts the padding to 8
        # bytes, as the kernel does
        offsets, sizes = layout([start + SAMPLE_HEAD for start in starts], steps, counts,
                                [step - SAMPLE_HEAD for step in steps])
        return Pass(self.cpu, data, offsets, sizes, losses, tail, head, runs)

    def commit(self, position: int) -> int:
        """Give the bytes before ring ``position`` back to the kernel (after every read of
        them); returns the tail it moved from (a position behind the tail moves nothing)."""
        tail = self._meta[self._tail]
        if position > tail:
            self._meta[self._tail] = position
        return tail

    def close(self) -> None:
        """Unmap the ring (once no view of it is left: a batch still held keeps the mapping
        until it is dropped) and close the event."""
        self._meta.release()
        self._data.release()
        try:
            self._mm.close()
        except BufferError:
            pass  # a view is alive: the mapping goes with the last one
        os.close(self.fd)

    def _walk(self, data) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
        """The samples in ``data`` as runs (see :attr:`Pass.runs`), and the drops reported
        (the offset of each lost record, its count).

        Records are walked header by header, except that once a few samples in a row share a
        size, the rest of the pass is read as a run of that size: every further header at
        that stride compared at once with numpy, the run ending at the first that differs
        (a lost record, a sample of another size). A stream of fixed-size events thus costs a
        handful of numpy calls per pass, not Python code per event."""
        n = len(data)
        starts: list[int] = []  # runs: first record, record size, records
        steps: list[int] = []
        counts: list[int] = []
        losses: list[tuple[int, int]] = []
        o = 0
        streak = 0
        unpack = _HEADER.unpack_from
        while o < n:
            kind, _misc, size = unpack(data, o)
            if size < 8 or size % 8 or o + size > n:
                raise BpfBatchError(f"perf ring of CPU {self.cpu}: a record of {size} bytes "
                                    f"at {o} of {n}", obj=self.label)
            if kind == abi.PERF_RECORD_SAMPLE:
                streak = streak + 1 if steps and steps[-1] == size else 0
                count = 1 if streak < _STREAK else run_length(
                    np.ndarray(((n - o) // size,), "<u8", buffer=data, offset=o,
                               strides=(size,)), _TYPE_AND_SIZE)
                if steps and steps[-1] == size and starts[-1] + counts[-1] * size == o:
                    counts[-1] += count
                else:
                    starts.append(o)
                    steps.append(size)
                    counts.append(count)
                o += count * size
                if count > 1:
                    streak = 0
                continue
            if kind == abi.PERF_RECORD_LOST and size >= 24:
                losses.append((o, _LOST.unpack_from(data, o + 16)[0]))
            streak = 0
            o += size  # other records (none for a BPF output event) are skipped
        return list(zip(starts, steps, counts)), losses
