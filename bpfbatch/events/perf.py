"""Perf event arrays (``BPF_MAP_TYPE_PERF_EVENT_ARRAY``) read in batches, under the stream
contract of :mod:`.batch`.

:class:`PerfStream` opens one BPF output perf event (``perf_event_open`` of
``PERF_TYPE_SOFTWARE`` / ``PERF_COUNT_SW_BPF_OUTPUT``, ``PERF_SAMPLE_RAW``) per online CPU,
maps its ring (:mod:`.perfring`) and stores the event's fd in the map at the CPU's index,
which is where ``bpf_perf_event_output(ctx, &map, BPF_F_CURRENT_CPU, ...)`` on that CPU
writes: what libbpf's ``perf_buffer__new`` and bcc's ``open_perf_buffer`` do. One epoll set
holds every ring's fd (:meth:`~PerfStream.fileno`). :class:`PerfBuffer` is the Python API
over it (numpy arrays, Arrow record batches), as :class:`~.api.Ringbuf` is for ring buffers.

A poll takes, from every ring, every record written so far, in one pass per ring, and hands
them out as one batch: each ring's records in the order the kernel wrote them, the rings one
after the other (or merged by a timestamp, ``order_by``). A record is the raw data of one
sample as the kernel sizes it: what the program passed to ``bpf_perf_event_output``, padded
to keep the record 8-byte aligned (a 32-byte event is a 36-byte record, as bcc's and libbpf's
callbacks see it; :meth:`~.batch.Batch.to_numpy` with the event's dtype cuts the padding).
Each ring's ``data_tail`` moves only at the batch's commit.

Loss. When a ring is full the kernel drops the sample (``bpf_perf_event_output`` returns
``-ENOSPC`` to the program) and counts it; the count is written as a ``PERF_RECORD_LOST``
record just before the next sample that fits on that CPU, so a drop becomes visible with that
CPU's next sample. :attr:`~.batch.StreamStats.lost` adds each CPU's reported drops when the
batch holding the record is committed (a batch taken twice counts once).

Closing deletes the map entries it stored (a program then gets ``-ENOENT`` instead of writing
into a ring nobody reads) and unmaps the rings. Unlike a ring buffer, whose ring is the map's
and keeps what a reader left for the next one, a perf ring is its reader's: records taken and
not committed are offered again within the process (:meth:`~PerfStream.rewind`), but those
still in the rings when it closes them are gone — the kernel counts them nowhere.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import select
import struct

import numpy as np

from .._sys import abi
from .._sys.libbpf import perf_event_open
from ..api import Map
from ..errors import BpfBatchError, InputError
from .api import EventReader
from .batch import Batch, EventStream
from .perfring import SAMPLE_HEAD, Pass, PerfRing

#: Data pages per CPU ring by default (bcc's tools use 8 to 64): 256 KiB with 4 KiB pages.
DEFAULT_PAGE_COUNT = 64


def online_cpus(path: str = "/sys/devices/system/cpu/online") -> list[int]:
    """The online CPUs, from the kernel's list (``0-3,6``)."""
    with open(path) as f:
        text = f.read().strip()
    cpus: list[int] = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


class PerfBatch(Batch):
    """A :class:`~.batch.Batch` of a perf event array: :attr:`cpus` says which CPU each
    record came from, :attr:`losses` the drops the kernel reported among these records, as
    ``(index, cpu, count)``: ``count`` samples of ``cpu`` were lost before record ``index``
    (in ring order; ``None`` when the records were merged by a timestamp)."""

    def __init__(self, data, offsets, sizes, commit, *, cpus,
                 losses: list[tuple[int, int, int]] | None, lost: int,
                 stride: int | None = None):
        super().__init__(data, offsets, sizes, commit, stride=stride)
        self.cpus = cpus
        self.losses = losses
        self.lost = lost


class PerfStream(EventStream):
    """The rings of a perf event array, one per online CPU below its ``max_entries``.

    ``page_count``: data pages per ring (a power of two); ``wakeup_events``: samples per
    wake-up of the poll set (a poll reads what is there whatever the count; more than one
    costs the producer fewer wake-ups); ``order_by``: a field of ``dtype`` (the event's numpy
    dtype) to merge the CPUs by, see :meth:`_take`."""

    #: What becomes of records taken and not written when the reader stops on a failure
    #: (``record``'s error line): the rings are this reader's, and close with it.
    left_behind = "not recorded: dropped with the perf rings, which close with this reader"

    def __init__(self, source: Map, *, page_count: int = DEFAULT_PAGE_COUNT,
                 wakeup_events: int = 1, order_by: str | None = None, dtype=None):
        self.label = source.info.label
        if source.info.type != abi.MapType.PERF_EVENT_ARRAY:
            raise InputError(f"not a perf event array (it is {source.info.type_name})",
                             obj=self.label)
        if page_count <= 0 or page_count & (page_count - 1):
            raise InputError(f"page count must be a power of two, got {page_count}",
                             obj=self.label)
        self._order = None if order_by is None else \
            order_field(order_by, dtype, f"{self.label}: order_by")
        super().__init__(source.info)
        self.rings: list[PerfRing] = []
        self._by_cpu: dict[int, PerfRing] = {}
        try:
            self._map = source.dup()  # the entries stored through it live as long as its file
        except BaseException:
            self._claim.release()
            raise
        self._epoll = select.epoll()
        try:
            for cpu in online_cpus():
                if cpu < source.info.max_entries:
                    self._add(cpu, page_count, wakeup_events)
        except BaseException:
            self.close()
            raise

    def _add(self, cpu: int, page_count: int, wakeup_events: int) -> None:
        attr = abi.PerfEventAttr(
            type=abi.PERF_TYPE_SOFTWARE, size=ctypes.sizeof(abi.PerfEventAttr),
            config=abi.PERF_COUNT_SW_BPF_OUTPUT, sample_period=1,
            sample_type=abi.PERF_SAMPLE_RAW, wakeup=max(1, wakeup_events))
        fd = perf_event_open(attr, cpu, self.label)
        try:
            ring = PerfRing(cpu, fd, page_count, self.label)
        except OSError as exc:
            os.close(fd)
            raise BpfBatchError(f"map the perf ring of CPU {cpu} ({page_count} pages): "
                                f"{exc.strerror}", obj=self.label, errno=exc.errno) from None
        self.rings.append(ring)
        self._by_cpu[cpu] = ring
        self.stats.lost[cpu] = 0
        fcntl.ioctl(fd, abi.PERF_EVENT_IOC_ENABLE, 0)
        self._epoll.register(fd, select.EPOLLIN)
        self._map.update(struct.pack("<I", cpu), struct.pack("<I", fd))

    # -- the stream contract -----------------------------------------------------------------

    def fileno(self) -> int:
        """The epoll fd over every ring's event."""
        return self._epoll.fileno()

    def _wait(self, timeout: float | None) -> bool:
        if any(ring.unread() for ring in self.rings):
            return True
        return bool(self._epoll.poll(-1 if timeout is None else timeout))

    def _take(self) -> PerfBatch:
        """One pass over every ring, as one batch.

        With ``order_by`` the records are put in the order of that field (a stable sort:
        equal timestamps keep each CPU's order). The guarantee holds within the batch: the
        records one poll takes come out in timestamp order; a record written to a ring after
        that ring's pass began comes in a later batch, even when its timestamp is earlier than
        ones already handed out. Each CPU's records always stay in the order it wrote them
        (as long as its timestamps do not go backwards)."""
        passes = [p for p in map(PerfRing.take, self.rings) if p is not None]
        self._note_fill()
        if not any(p.count for p in passes):
            # lost records alone (the kernel writes one with the next sample, so hardly ever):
            # counted now, where nothing taken before them is waiting for its commit
            for p in passes:
                if self._by_cpu[p.cpu].committed() == p.start:
                    self._commit(p, 0)
            return PerfBatch(np.zeros(0, np.uint8), np.zeros(0, np.int64),
                             np.zeros(0, np.int64), lambda k: None,
                             cpus=np.zeros(0, np.uint32), losses=[], lost=0)
        losses = _losses(passes)
        cpus = np.repeat(np.array([p.cpu for p in passes], np.uint32),
                         [p.count for p in passes])
        ring_index = np.concatenate([np.arange(p.count) for p in passes])
        size = _common_size(passes)
        if size is None:  # records of several sizes: the passes joined, records in place
            data = _joined([np.frombuffer(p.data, np.uint8) for p in passes])
            firsts = np.cumsum([0] + [len(p.data) for p in passes])
            offsets = _joined([p.offsets + first for p, first in zip(passes, firsts)], np.int64)
            sizes = _joined([p.sizes for p in passes], np.int64)
            stride = None
        elif len(passes) == 1 and len(passes[0].runs) == 1 and self._order is None:
            # one run, in ring order: the ring itself
            p = passes[0]
            data = np.frombuffer(memoryview(p.data).toreadonly(), np.uint8)
            offsets, sizes, stride = p.offsets, p.sizes, p.runs[0][1]
        else:  # one size: the records gathered into one (n, size) block, run by run
            data = np.concatenate([_run_rows(p, run, size) for p in passes for run in p.runs])
            data = data.view(np.uint8)
            offsets = np.arange(0, len(data), size, dtype=np.int64)
            sizes, stride = np.full(len(offsets), size, np.int64), size
        if self._order is not None and len(offsets) > 1:
            order = np.argsort(_column(data, offsets, sizes, *self._order, block=stride),
                               kind="stable")
            offsets, sizes, cpus, losses = offsets[order], sizes[order], cpus[order], None
            ring_index = ring_index[order]
            if stride is not None:  # keep the block contiguous
                data = data.reshape(-1, size)[order].reshape(-1)
                offsets = np.arange(0, len(data), size, dtype=np.int64)
                stride = size
            else:
                stride = None
        data.flags.writeable = False
        return PerfBatch(data, offsets, sizes, _Commit(self, passes, cpus, ring_index),
                         cpus=cpus, losses=losses, lost=sum(p.lost for p in passes),
                         stride=stride)

    def _note_fill(self) -> None:
        """Lag, the fill high-water mark and the part held (taken, not committed), from the
        positions as they are now: the fullest ring's for the fractions."""
        pending = [ring.pending() for ring in self.rings]
        self.stats.lag_bytes = sum(pending)
        if self.rings:
            fill = max(n / ring.size for n, ring in zip(pending, self.rings))
            self.stats.high_water = max(self.stats.high_water, fill)
            self.stats.held = max(ring.held() for ring in self.rings)

    def _commit(self, p: Pass, m: int) -> None:
        """Commit the first ``m`` samples of pass ``p`` (and every pass before it), counting
        the drops reported in what the commit covers for the first time."""
        ring = self._by_cpu.get(p.cpu)
        if ring is not None:
            end = p.end_of(m)
            self.stats.lost[p.cpu] += p.lost_between(ring.commit(end), end)
            self.stats.held = max(ring.held() for ring in self.rings)

    def rewind(self) -> None:
        """The next poll starts again at each ring's committed tail."""
        for ring in self.rings:
            ring.rewind()

    def _release(self) -> None:
        """Delete the entries stored, unmap the rings, close the events and the map."""
        rings, self.rings = self.rings, []
        for ring in rings:
            try:
                self._map.delete(struct.pack("<I", ring.cpu))
            except BpfBatchError:
                pass  # gone already (the map's owner cleared it): nothing of ours left there
            ring.close()
        self._epoll.close()
        self._map.close()


class PerfBuffer(EventReader):
    """A perf event array's records as numpy arrays or Arrow record batches
    (:class:`~.api.EventReader`, ``from bpfbatch import PerfBuffer``)::

        with PerfBuffer.open(pinned="/sys/fs/bpf/events", type="struct event",
                             order_by="ts") as perf:
            for events in perf.batches(idle=1.0):
                ...

    ``page_count``, ``wakeup_events`` and ``order_by`` as :class:`PerfStream` takes them
    (``order_by`` names a field of ``type``)."""

    map_type = abi.MapType.PERF_EVENT_ARRAY

    def _stream_options(self, options: dict) -> dict:
        if options.get("order_by") is not None:
            return {**options, "dtype": self.dtype}
        return options


class _Commit:
    """A perf batch's ``commit(k)``: its first ``k`` records, ring by ring. Each CPU's records
    keep their ring order in a batch (merged by a timestamp too, the CPU's own timestamps
    rising), so the first ``k`` hold a prefix of each ring's pass: the records of that CPU
    before the first of its records past ``k``."""

    def __init__(self, stream: PerfStream, passes: list[Pass], cpus, ring_index):
        self.stream, self.passes, self.cpus, self.ring_index = stream, passes, cpus, ring_index

    def __call__(self, k: int) -> None:
        rest_cpus, rest_index = self.cpus[k:], self.ring_index[k:]
        for p in self.passes:
            beyond = rest_index[rest_cpus == p.cpu]
            self.stream._commit(p, int(beyond.min()) if beyond.size else p.count)


def _losses(passes: list[Pass]) -> list[tuple[int, int, int]]:
    """Each pass's lost records as ``(index of the next record in the batch, cpu, count)``."""
    out, first = [], 0
    for p in passes:
        out += [(first + int(np.searchsorted(p.offsets, at)), p.cpu, count)
                for at, count in p.losses]
        first += p.count
    return out


def order_field(name: str, dtype, where: str) -> tuple[int, np.dtype]:
    """``(offset, dtype)`` of the integer field ``name`` of the event ``dtype``, to order by;
    ``where`` names the option in an error (``--order-by``, or the map's ``order_by``)."""
    fields = None if dtype is None else np.dtype(dtype).fields
    if not fields or name not in fields:
        known = f" (fields: {', '.join(fields)})" if fields else " (the events have no type)"
        raise InputError(f"no field '{name}' in the events' type{known}", obj=where)
    field_dtype, offset = fields[name][:2]
    if field_dtype.kind not in "iu":
        raise InputError(f"field '{name}' is not an integer timestamp ({field_dtype})",
                         obj=where)
    return offset, field_dtype


def _column(data: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, offset: int,
            dtype: np.dtype, *, block: int | None = None) -> np.ndarray:
    """Field ``(offset, dtype)`` of every record (bytes a short record lacks read as 0);
    ``block``: the records are one contiguous block of records of that size."""
    width = dtype.itemsize
    if block and offsets[0] == 0 and offset + width <= block and len(data) % block == 0:
        rows = data.reshape(-1, block)[:, offset:offset + width]
        return np.ascontiguousarray(rows).view(dtype).reshape(-1)
    within = offset + np.arange(width)
    inside = within < sizes[:, None]
    raw = np.where(inside, data[np.minimum(offsets[:, None] + within, len(data) - 1)], 0)
    return np.ascontiguousarray(raw.astype(np.uint8)).view(dtype).reshape(-1)


def _common_size(passes: list[Pass]) -> int | None:
    """The raw size every sample of the passes has (``None``: they differ). No sample at all
    counts as one size: an empty block."""
    sizes = {step - SAMPLE_HEAD for p in passes for _, step, _ in p.runs}
    if len(sizes) > 1:
        return None
    return sizes.pop() if sizes else 0


def _run_rows(p: Pass, run: tuple[int, int, int], size: int) -> np.ndarray:
    """The raw data of a run's samples, one ``V{size}`` row each (a strided view of ``p``)."""
    start, step, count = run
    return np.ndarray((count,), f"V{size}", buffer=p.data, offset=start + SAMPLE_HEAD,
                      strides=(step,))


def _joined(arrays: list[np.ndarray], dtype=np.uint8) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype)
