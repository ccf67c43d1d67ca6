"""The stream contract every event reader implements (ring buffer, perf event array).

A reader (:class:`EventStream`) owns the user-space side of one event map: the mmap'd ring(s),
a poll set and the consumer position(s). It hands out :class:`Batch` objects:

- **One pass.** :meth:`EventStream.poll` takes every complete record between the committed
  consumer position and the producer's position, in order, in one pass, as one batch (an empty
  batch when the timeout passed with nothing). Records the kernel marks discarded are skipped;
  a record still being written (busy) ends the pass there: it and what follows come next time.
- **Commit after the write.** Taking records moves nothing in the kernel. Only
  :meth:`Batch.commit` advances the consumer position (the ring's space is given back to the
  producer), and the caller calls it after it has written the batch: a fault before the commit
  (a signal, a full disk, a closed pipe) leaves every record of the batch in the ring, so the
  next process opening the map reads them again. SIGKILL between the write and the commit
  repeats at most the batches written since the last commit; nothing is ever lost by the
  consumer. ``commit(upto=k)`` gives back only the first ``k`` records (a write that took
  only those, an output cut at ``--count``).
- **Polls continue; rewind to retry.** Each poll continues after the previous batch, committed
  or not (a consumer may write several batches, then commit the last: a commit covers every
  record before its end). :meth:`EventStream.rewind` makes the next poll start again from the
  committed position, to retry what was not written.
- **Views, valid until commit.** A batch's :attr:`Batch.data` is a read-only view of the
  ring's memory, zero-copy; after the commit the producer may overwrite it. Copy what you keep
  (:meth:`Batch.records`, :meth:`Batch.to_numpy` copy).
- **Poll set.** :meth:`EventStream.fileno` is one file descriptor that is readable when
  records are waiting (taken and not yet committed ones included) (an epoll fd over the map's fds): hand it to ``selectors``, ``asyncio``'s
  ``add_reader`` or ``select``, then call ``poll(0)``.
- **One reader per map.** The kernel keeps one consumer position per ring (one ring per CPU
  slot for perf): a stream claims its map when it opens (:mod:`.claim`), and a second
  reader, in any process, is refused (``EBUSY``) until the first closes or dies.
- **Loss and lag** are in :attr:`EventStream.stats` (a :class:`StreamStats`; the perf reader
  adds records lost per CPU): the consumer never loses a record, but the producer may fail to
  write one when the ring is full, which only the producer can count (for a ring buffer) or
  the kernel reports (``PERF_RECORD_LOST``).

Every record of a batch is ``data[offsets[i] : offsets[i] + sizes[i]]``; when every record has
the same size and they lie at a constant stride, :meth:`Batch.fixed` is an ``(n, size)`` uint8
view without any copy, and :meth:`Batch.to_numpy` a structured array.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator

import numpy as np


@dataclasses.dataclass
class StreamStats:
    """What a stream has seen since it was opened. ``lag_bytes`` is how far the consumer was
    behind the producer at the last poll (bytes not yet committed); ``high_water`` the largest
    fill of the ring seen at a poll, as a fraction of its size (1.0: the producer had no room
    left, and its reservations failed until the consumer caught up); ``held`` the fraction
    of the ring (the fullest one, for per-CPU rings) taken and not yet committed, which the
    producer cannot reuse (a consumer that commits late closes its file before it nears 1).
    ``lost`` is records the
    kernel says it dropped (perf: per CPU; a ring buffer's producer counts its own failures)."""

    events: int = 0
    bytes: int = 0
    batches: int = 0
    lag_bytes: int = 0
    high_water: float = 0.0
    held: float = 0.0
    lost: dict[int, int] = dataclasses.field(default_factory=dict)

    @property
    def lost_total(self) -> int:
        return sum(self.lost.values())

    def summary(self) -> str:
        """Loss and lag in a few words, for ``record``'s exit line and ``-v``."""
        text = f"lag {self.lag_bytes} bytes, fill high-water {self.high_water:.0%}"
        if self.lost:
            per_cpu = ", ".join(f"cpu{cpu}: {n}" for cpu, n in sorted(self.lost.items()) if n)
            text += f"; {self.lost_total} lost" + (f" ({per_cpu})" if per_cpu else "")
        return text


class Batch:
    """The records one pass took (see the module's contract). ``data`` is a uint8 array (a
    view of the ring, valid until :meth:`commit`); record ``i`` is
    ``data[offsets[i]:offsets[i] + sizes[i]]``. ``stride`` is set when the records lie at a
    constant distance (``offsets[i] = offsets[0] + i * stride``) and share one size."""

    def __init__(self, data: np.ndarray, offsets: np.ndarray, sizes: np.ndarray,
                 commit: Callable[[int], None] | None = None, *, stride: int | None = None):
        self.data = data
        self.offsets = offsets
        self.sizes = sizes
        self.stride = stride if len(offsets) else None
        self._commit = commit
        self.committed = commit is None

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def nbytes(self) -> int:
        """Payload bytes (headers and padding not counted)."""
        return int(self.sizes.sum())

    @property
    def size(self) -> int | None:
        """The records' common size, or ``None`` when they differ (or there are none)."""
        if not len(self.sizes):
            return None
        first = int(self.sizes[0])
        return first if self.stride is not None or bool((self.sizes == first).all()) else None

    def commit(self, upto: int | None = None) -> None:
        """Give the space of the batch's records back to the producer (advance the consumer
        position past them, and past every record of earlier batches): all of them, or the
        first ``upto``. Call it once they are written; after it their views are stale. The
        reader's ``commit(k)`` callback gets the number of records; committing the same
        records twice, or fewer than an earlier commit, gives nothing back twice."""
        n = len(self) if upto is None else max(0, min(upto, len(self)))
        if self._commit is not None and not self.committed:
            self._commit(n)
        self.committed = self.committed or n == len(self)

    def fixed(self) -> np.ndarray | None:
        """An ``(n, size)`` uint8 view of the records, zero-copy, when they lie at a constant
        stride (``None`` otherwise: use :meth:`to_numpy`, which copies)."""
        if self.stride is None:
            return None
        size = int(self.sizes[0])
        return np.lib.stride_tricks.as_strided(
            self.data[int(self.offsets[0]):], shape=(len(self), size),
            strides=(self.stride, 1), writeable=False)

    def view(self, dtype: np.dtype) -> np.ndarray | None:
        """The records as a structured array of ``dtype`` without any copy (a view of the
        ring at the records' stride: valid until the commit), when they lie at a constant
        stride and are at least ``dtype.itemsize`` bytes; else ``None`` (:meth:`to_numpy`)."""
        dtype = np.dtype(dtype)
        if self.stride is None or int(self.sizes[0]) < dtype.itemsize:
            return None
        return np.ndarray((len(self),), dtype, buffer=self.data, offset=int(self.offsets[0]),
                          strides=(self.stride,))

    def rows(self, width: int | None = None) -> np.ndarray:
        """The records copied into a new ``(n, width)`` uint8 array, each cut or zero-padded
        to ``width`` bytes (``None``: their common size; they must share one)."""
        if width is None:
            width = self.size
            if width is None and len(self):
                raise ValueError("records differ in size: give a width to pad them to")
            width = width or 0
        if width and self.stride is not None and int(self.sizes[0]) >= width:
            # one memcpy per record: the records as opaque items at their stride, copied
            records = np.ndarray((len(self),), np.dtype((np.void, width)), buffer=self.data,
                                 offset=int(self.offsets[0]), strides=(self.stride,))
            return records.copy().view(np.uint8).reshape(len(self), width)
        out = np.zeros((len(self), width), np.uint8)
        for i, (offset, size) in enumerate(zip(self.offsets.tolist(), self.sizes.tolist())):
            n = min(size, width)
            out[i, :n] = self.data[offset:offset + n]
        return out

    def to_numpy(self, dtype: np.dtype | None = None) -> np.ndarray:
        """The records copied into a new array: :meth:`rows` when ``dtype`` is ``None``, else
        a structured array of ``dtype``, each record cut or zero-padded to its itemsize
        (variable-size events: the tail a short record does not carry reads as zeros)."""
        if dtype is None:
            return self.rows()
        dtype = np.dtype(dtype)
        return self.rows(dtype.itemsize).view(dtype).reshape(len(self))

    def records(self) -> list[bytes]:
        """Each record as ``bytes`` (copied), in order."""
        data = self.data
        return [data[o:o + s].tobytes()
                for o, s in zip(self.offsets.tolist(), self.sizes.tolist())]


class EventStream:
    """One event map's reader (the module's contract). Subclasses implement :meth:`_take`
    (one pass, no wait), :meth:`_wait` (block until readable or the timeout) and
    :meth:`_release`; this class adds the loop, the poll set's file descriptor, the lifetime
    and the map's claim (one reader per map, :mod:`.claim`: taken first, by
    ``super().__init__(info)``; a subclass whose ``__init__`` then fails calls
    :meth:`close`). Use as a context manager, or call :meth:`close`."""

    #: How errors and the exit line name the stream's map.
    label: str = "event stream"

    def __init__(self, info):
        from .claim import Claim

        self.stats = StreamStats()
        self._claim = Claim(info)
        self._closed = False

    # -- what a reader implements ----------------------------------------------------------

    def _take(self) -> Batch:
        raise NotImplementedError

    def _wait(self, timeout: float | None) -> bool:
        raise NotImplementedError

    def _release(self) -> None:
        raise NotImplementedError

    def rewind(self) -> None:
        """The next poll starts again at the committed position: the records taken and not
        committed are offered again (after a write that failed)."""
        raise NotImplementedError

    def fileno(self) -> int:
        """A file descriptor that polls readable while records are waiting."""
        raise NotImplementedError

    # -- the contract ----------------------------------------------------------------------

    def poll(self, timeout: float | None = None) -> Batch:
        """Every record waiting now, as one batch; if none, wait up to ``timeout`` seconds
        (``None``: until one comes; ``0``: not at all) for the first, then take all there
        are. Returns an empty batch when the timeout passed (or, rarely, before it: the
        record that woke it still being written)."""
        batch = self._take()
        if not len(batch) and timeout != 0 and self._wait(timeout):
            batch = self._take()
        if len(batch):
            self.stats.batches += 1
            self.stats.events += len(batch)
            self.stats.bytes += batch.nbytes
        return batch

    def batches(self, *, idle: float | None = None, poll_timeout: float = 0.5
                ) -> Iterator[Batch]:
        """Non-empty batches as they come. Each is committed when the caller asks for the next
        one (its loop body has run: the batch is written), never earlier; a caller that stops
        early calls ``batch.commit()`` itself for the last one it handled (else the next
        reader gets it again). Ends after ``idle`` seconds with no record (``None``: never)."""
        quiet_since = time.monotonic()
        while True:
            batch = self.poll(poll_timeout if idle is None else min(poll_timeout, idle))
            if not len(batch):
                if idle is not None and time.monotonic() - quiet_since >= idle:
                    return
                continue
            yield batch
            batch.commit()
            quiet_since = time.monotonic()

    def close(self) -> None:
        """Unmap and close what the stream opened and give up the map's claim; the map
        itself stays open (not owned). Uncommitted records stay in the ring. Safe to call
        twice, and on a stream whose ``__init__`` failed after the claim."""
        if not self._closed:
            self._closed = True
            try:
                self._release()
            finally:
                self._claim.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
