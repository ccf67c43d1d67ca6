"""Writing rendered records to a real file descriptor, knowing where each record ends.

:class:`FdWriter` writes every byte with ``os.write`` (no Python buffer that could hold bytes
it claims were written); :class:`RecordSink` renders a batch, writes it and, when the output
refuses part of it, says how many records were completely written
(:class:`~bpfbatch.delivery.Undelivered`), which is what the delivery step
(:mod:`bpfbatch.delivery`) needs to put back exactly the others.
"""

from __future__ import annotations

import bisect
import errno as E
import os
import select
import stat

from .. import interrupts
from ..delivery import Undelivered
from ..errors import BpfBatchError, InputError, OutputError

#: Bytes per write to an fd that can block (pipe, socket, tty): at most what ``poll`` promises
#: fits, so a write never blocks with a signal waiting and the batch half-written.
_PIPE_CHUNK = select.PIPE_BUF
#: How long a wait for a stuck reader lasts between looks at pending signals (ms).
_POLL_MS = 50


class FdWriter:
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
        """Write all of ``data`` or raise :class:`~bpfbatch.errors.OutputError` with the bytes
        accepted."""
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
                raise OutputError(exc.strerror or str(exc), written=written, errno=exc.errno,
                                  obj=self.name) from None
            if n == 0:
                raise OutputError("the output accepted no bytes", written=written, errno=E.EIO,
                                  obj=self.name)
            written += n

    def isatty(self) -> bool:
        """Whether the fd is a terminal (binary formats refuse one)."""
        return os.isatty(self.fd)

    def flush(self) -> None:
        """Nothing to do: every byte was handed to the kernel by :meth:`write` (so this
        writer can stand where a binary stream is expected)."""

    def sync(self) -> None:
        """With ``fsync``, make what was written durable; a failure leaves it unknown how much
        is on disk, so nothing of the batch counts as delivered."""
        if self.fsync:
            try:
                os.fsync(self.fd)
            except OSError as exc:
                raise OutputError(f"fsync failed: {exc.strerror}", written=0, errno=exc.errno,
                                  obj=self.name) from None

    def _poller(self) -> select.poll:
        poller = select.poll()
        poller.register(self.fd, select.POLLOUT)
        return poller

    def _wait(self, written: int) -> None:
        """Until the fd takes bytes. A deferred signal waiting while the reader takes
        nothing ends the batch here (the rest is put back) rather than never."""
        while not self._poll.poll(_POLL_MS):
            if interrupts.pending():
                raise OutputError("interrupted while the output accepted nothing", written=written,
                                  errno=None, obj=self.name)


class RecordSink:
    """Render a batch (a :class:`~bpfbatch.formats.render.Renderer`) and write it to an
    :class:`FdWriter`; a refusal names the records that were completely written.

    ``whole``: the output is this one batch (``pop``'s one element), written with its
    trailer in one go, and a record ending where the batch ends is delivered only once the
    trailer is written too: a ``json`` array is then delivered with its ``]``, and a
    ``parquet`` file, readable only once its footer is there, can be delivered at all."""

    def __init__(self, renderer, output: FdWriter, *, whole: bool = False):
        if not (whole or renderer.delivers_prefix):
            fmt = type(renderer).__name__.lower()
            raise InputError(f"a {fmt} file is readable only once its footer is written at "
                             "the end, so no batch could count as delivered before the last; "
                             "use -o arrow (delivered a batch at a time) or dump, then clear",
                             obj=f"-o {fmt}")
        self.renderer = renderer
        self.output = output
        self.whole = whole

    def __call__(self, batch) -> None:
        data, ends = self.renderer.render(batch)
        if self.whole:
            trailer = self.renderer.trailer()
            ends = [end + len(trailer) if end == len(data) else end for end in ends]
            data += trailer
        try:
            self.output.write(data)
            self.output.sync()
        except OutputError as refused:
            complete = bisect.bisect_right(ends, refused.written)
            raise Undelivered(complete, refused.reason, refused.errno) from None

    def finish(self) -> None:
        """Write the trailer (a ``whole`` output wrote it with its batch); everything is
        delivered already, so a failure only fails."""
        if self.whole:
            return
        trailer = self.renderer.trailer()
        try:
            self.output.write(trailer)
            self.output.sync()
        except OutputError as refused:
            refused.message = f"output failed after every entry was delivered: {refused.reason}"
            raise
