"""Delivery: nothing is deleted that is not delivered or put back.

Every path that deletes what it outputs (``drain``, ``exec --action delete -o``,
``bcc.items_and_clear``, the library's drain) hands each batch it deleted to a
:class:`Delivery`, inside one critical section (:func:`bpfbatch.interrupts.deferred`):

    LOOKUP_AND_DELETE → render → write every byte → (fsync) ; on failure: put back the rest

**Delivered** means: every byte of the record was accepted by the kernel for the output fd
(and, with ``fsync``, is on disk). Bytes a pipe accepted count as delivered: what the reader
does with them after reading is out of our hands. A record whose bytes were only partly
written is not delivered: it is put back, and the torn bytes stay in the output (a reader
that stops at the last complete line sees exactly the delivered records).

**Put back** means: the records that were not delivered are written back into the map,
exactly those, one ``BPF_MAP_UPDATE_ELEM`` with ``BPF_NOEXIST`` each. The rule when a writer
re-created a key between the delete and the put-back: the writer's value is newer and stays;
the drained value of that key is counted as *superseded* and reported, never written over it.
A put-back the kernel refuses (a map filled up meanwhile: E2BIG) is reported as lost with its
count. Either makes the command fail.

The one exception is SIGKILL, which cannot be deferred: it loses at most the batch in hand,
so ``--batch-size`` bounds it.

The pieces: :class:`Output` writes to a real file descriptor (no Python buffer that could
hold bytes it claims were written); :class:`RecordSink` renders a batch and writes it,
turning a failure into :class:`Undelivered` with the number of complete records;
:class:`Delivery` runs the critical sections and keeps the counts a command reports.
"""

from __future__ import annotations

import dataclasses
import errno as E
import os
import select
import stat
from collections.abc import Callable, Iterable

import numpy as np

from . import interrupts
from .errors import BpfBatchError, errno_name

#: Bytes per write to an fd that can block (pipe, socket, tty): at most what ``poll`` promises
#: fits, so a write never blocks with a signal waiting and the batch half-written.
_PIPE_CHUNK = select.PIPE_BUF
#: How long a wait for a stuck reader lasts between looks at pending signals (ms).
_POLL_MS = 50


class Refused(Exception):
    """The output took ``written`` bytes of a write, then refused the rest."""

    def __init__(self, written: int, reason: str, errno: int | None):
        super().__init__(reason)
        self.written = written
        self.reason = reason
        self.errno = errno


class Output:
    """Every byte to the real fd ``fd``: ``os.write`` in a loop (short writes continue,
    EAGAIN waits), each failure reported with how many bytes were accepted before it.

    ``fsync``: after each batch, flush it to disk (regular files and block devices; on a
    pipe, socket or tty there is no disk and nothing to wait for). Checks up front that the
    fd is open, so a closed stdout fails before anything is deleted.
    """

    def __init__(self, fd: int, *, fsync: bool = False, name: str = "output"):
        self.name = name
        try:
            mode = os.fstat(fd).st_mode
        except OSError as exc:
            raise BpfBatchError(f"cannot be written: {exc.strerror}", obj=name,
                                errno=exc.errno) from None
        self.fd = fd
        self.on_disk = stat.S_ISREG(mode) or stat.S_ISBLK(mode)
        self.fsync = fsync and self.on_disk
        self._poll = None if self.on_disk else self._poller()

    def write(self, data: bytes) -> None:
        """Write all of ``data`` or raise :class:`Refused` with the bytes accepted."""
        view = memoryview(data)
        written = 0
        chunk = _PIPE_CHUNK if self._poll else len(view)
        while written < len(view):
            if self._poll:
                self._wait(written)
            try:
                n = os.write(self.fd, view[written:written + chunk])
            except BlockingIOError:  # a non-blocking fd: _wait before the next try
                self._poll = self._poll or self._poller()
                chunk = _PIPE_CHUNK
                continue
            except OSError as exc:
                raise Refused(written, exc.strerror or str(exc), exc.errno) from None
            if n == 0:
                raise Refused(written, "the output accepted no bytes", E.EIO)
            written += n

    def sync(self) -> None:
        """With ``fsync``, make what was written durable; a failure leaves it unknown how much
        is on disk, so nothing of the batch counts as delivered."""
        if self.fsync:
            try:
                os.fsync(self.fd)
            except OSError as exc:
                raise Refused(0, f"fsync failed: {exc.strerror}", exc.errno) from None

    def _poller(self) -> select.poll:
        poller = select.poll()
        poller.register(self.fd, select.POLLOUT)
        return poller

    def _wait(self, written: int) -> None:
        """Until the fd takes bytes. A deferred signal waiting while the reader takes
        nothing ends the batch here (the rest is put back) rather than never."""
        while not self._poll.poll(_POLL_MS):
            if interrupts.pending():
                raise Refused(written, "interrupted while the output accepted nothing", None)


class Undelivered(BpfBatchError):
    """Raised by a sink: its first ``complete`` records were delivered, the rest not. Where
    nothing was deleted (a dump) it is the command's error as it stands."""

    def __init__(self, complete: int, reason: str, errno: int | None):
        super().__init__(f"output failed: {reason}", obj="output", errno=errno)
        self.complete = complete
        self.reason = reason


class RecordSink:
    """Render a batch (a :class:`~bpfbatch.records.render.Renderer`) and write it to an
    :class:`Output`; a refusal names the records that were completely written."""

    def __init__(self, renderer, output: Output):
        self.renderer = renderer
        self.output = output

    def __call__(self, batch) -> None:
        rendered = self.renderer.render(batch)
        try:
            self.output.write(rendered.data)
            self.output.sync()
        except Refused as refused:
            complete = int(np.searchsorted(rendered.ends, refused.written, side="right"))
            raise Undelivered(complete, refused.reason, refused.errno) from None

    def finish(self) -> None:
        """Write the trailer; everything is delivered already, so a failure only fails."""
        trailer = self.renderer.trailer()
        try:
            self.output.write(trailer)
            self.output.sync()
        except Refused as refused:
            raise BpfBatchError(f"output failed after every entry was delivered: "
                                f"{refused.reason}", obj=self.output.name,
                                errno=refused.errno) from None


@dataclasses.dataclass(frozen=True)
class PutBack:
    """What a put-back did with ``restored + superseded + lost`` records: ``superseded``
    keys a writer had re-created (its value kept), ``lost`` the kernel refused (``errno``)."""

    restored: int
    superseded: int = 0
    lost: int = 0
    errno: int | None = None

    def __str__(self) -> str:
        text = f"{self.restored} put back into the map"
        if self.superseded:
            text += (f", {self.superseded} not put back because a writer re-created the key "
                     "(the map keeps the newer value)")
        if self.lost:
            text += (f", {self.lost} could not be put back "
                     f"({errno_name(self.errno or E.EIO)}) and are lost")
        return text


#: Puts back the records of a batch; the map layer provides it.
PutBackFn = Callable[[object], PutBack]


class DeliveryError(BpfBatchError):
    """A batch could not be delivered. ``delivered`` entries were, in all; the records of
    the failed batch that were not are accounted for in ``put_back``."""

    def __init__(self, reason: str, *, obj: str | None, errno: int | None, delivered: int,
                 put_back: PutBack):
        super().__init__(f"output failed: {reason}; {delivered} entries delivered, {put_back}",
                         obj=obj, errno=errno)
        self.delivered = delivered
        self.put_back = put_back

    @property
    def restored(self) -> int:
        return self.put_back.restored


class Delivery:
    """Hands deleted batches to ``sink`` and puts back what it did not deliver.

    ``sink(batch)`` returns when every record was delivered, raises :class:`Undelivered` when
    only the first ``complete`` were, and any other exception means none were (an ``OSError``
    is reported as an output failure; anything else propagates once the batch is back).
    :attr:`delivered` counts what was delivered so far, for the caller's report whatever
    stops it.
    """

    def __init__(self, sink: Callable, put_back: PutBackFn, *, label: str | None = None):
        self.sink = sink
        self._put_back = put_back
        self.label = label
        self.delivered = 0

    def take(self, batch) -> None:
        """Deliver one batch the caller has just deleted. Call it inside
        :func:`~bpfbatch.interrupts.deferred`, in the same section as the delete."""
        if not batch.count:
            return
        try:
            self.sink(batch)
        except Undelivered as undelivered:
            self._fail(batch, undelivered.complete, undelivered.reason, undelivered.errno)
        except OSError as exc:
            self._fail(batch, 0, exc.strerror or str(exc), exc.errno)
        except BaseException:
            self._restore(batch, 0)
            raise
        self.delivered += batch.count

    def drain(self, batches: Iterable) -> int:
        """Take every batch of ``batches`` (e.g. a draining cursor: each ``next`` deletes),
        each in its own critical section; returns :attr:`delivered`."""
        it = iter(batches)
        while True:
            with interrupts.deferred():
                batch = next(it, None)
                if batch is None:
                    return self.delivered
                self.take(batch)

    def _restore(self, batch, start: int) -> PutBack:
        if start >= batch.count:
            return PutBack(0)
        ks = len(batch.keys) // batch.count
        vs = len(batch.values) // batch.count
        return self._put_back(type(batch)(batch.count - start, batch.keys[start * ks:],
                                          batch.values[start * vs:]))

    def _fail(self, batch, complete: int, reason: str, errno: int | None):
        self.delivered += complete
        put_back = self._restore(batch, complete)
        raise DeliveryError(reason, obj=self.label, errno=errno, delivered=self.delivered,
                            put_back=put_back)
