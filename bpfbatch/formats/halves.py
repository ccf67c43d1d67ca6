"""A large JSONL file read in two halves at once: the second half by a forked child.

The typed path (:mod:`~bpfbatch.formats.typedjson`) spends a 1M-record load in msgspec and
in the Python objects it makes, which one process works through piece after piece. With a
second CPU, a child process encodes the second half of a regular file while this one reads
the first, and hands its packed records over in a memfd.

The outcome is the one of reading the file in order in one process: the child only encodes
pieces the typed path takes, and stops at the first it declines, without reporting anything;
this process reads its own half as always (typed, then the general reader), then takes the
child's records, then reads whatever the child left with the general reader. So the records,
their line numbers and the first error in file order are unchanged. The child is killed and
reaped whatever stops this process's half (a bad record, a signal), and gives up as soon as
it sees that this process is gone.
"""

from __future__ import annotations

import io
import os
import signal
import stat
import struct
from array import array
from collections.abc import Generator
from typing import BinaryIO

from .. import interrupts
from .._numpy import np
from .read import Chunk, Packed, _jsonl_chunks, _pieces, typed_piece
from .typedjson import TypedLines

__all__ = ["MIN_BYTES", "chunks", "worth_splitting"]

#: Smaller files are read in one process: a fork and the hand-over cost milliseconds that a
#: small load does not win back.
MIN_BYTES = 32 << 20
#: What the child writes before its records: where it stopped (byte offset), how many lines
#: it read up to there, how many records it encoded, and their keys' length in bytes.
_HEADER = struct.Struct("<4q")


def worth_splitting(stream: BinaryIO) -> bool:
    """Whether ``stream`` is a regular file of at least :data:`MIN_BYTES` and this process
    may run on more than one CPU."""
    try:
        info = os.fstat(stream.fileno())
    except (AttributeError, OSError, io.UnsupportedOperation):  # in memory: stdin, a pipe
        return False
    return (stat.S_ISREG(info.st_mode) and info.st_size >= MIN_BYTES
            and len(os.sched_getaffinity(0)) > 1)


def chunks(stream: BinaryIO, source: str, typed: TypedLines) -> Generator[Chunk, None, int]:
    """The chunks of :func:`~bpfbatch.formats.read._jsonl_chunks` over the whole of
    ``stream`` (a regular file, closed at the end), the second half encoded by a child
    meanwhile (see the module doc). Both read the file this process opened (and checked),
    each at its own offsets."""
    with stream:
        fd = stream.fileno()
        size = os.fstat(fd).st_size
        middle = _line_start(fd, size // 2)
        with _Child(fd, middle, size, typed) as child:
            end = yield from _jsonl_chunks(_pieces(_Slice(fd, 0, middle), source), source,
                                           typed)
            done = child.result()
        if done is None:  # the child failed: read its half here
            return (yield from _jsonl_chunks(_pieces(_Slice(fd, middle, size), source),
                                             source, typed, first=end))
        stop, lines, numbers, keys, values = done
        if len(numbers):
            yield array("q", (numbers + (end - 1)).tobytes()), Packed(keys, values)
        return (yield from _jsonl_chunks(_pieces(_Slice(fd, stop, size), source), source,
                                         first=end + lines))


class _Slice:
    """Bytes ``[start, stop)`` of the file ``fd``, read with ``pread``: the parent and the
    child share the file's offset, so neither moves it."""

    def __init__(self, fd: int, start: int, stop: int):
        self.fd, self.at, self.stop = fd, start, stop

    def read(self, size: int) -> bytes:
        data = os.pread(self.fd, min(size, self.stop - self.at), self.at)
        self.at += len(data)
        return data


def _line_start(fd: int, offset: int) -> int:
    """The offset of the first line that starts at or after ``offset``."""
    at = offset - 1 if offset else 0
    while offset and (block := os.pread(fd, 1 << 16, at)):
        cut = block.find(b"\n")
        if cut >= 0:
            return at + cut + 1
        at += len(block)
    return at


class _Child:
    """The child process encoding ``[start, stop)`` of the file ``fd``; :meth:`result` waits for
    it. Leaving the ``with`` block kills and reaps it if it is still there."""

    def __init__(self, fd: int, start: int, stop: int, typed: TypedLines):
        self.args = fd, start, stop, typed

    def __enter__(self) -> _Child:
        """Start the child. A signal that lands while it starts is held until its pid is
        stored and is then raised here, after the child is killed and reaped: raised the
        moment ``fork()`` returned, it would leave ``__enter__`` with no ``__exit__`` to come
        and the child running on its own."""
        self.fd = self.pid = None
        parent = os.getpid()
        try:
            with interrupts.deferred():
                self.fd = os.memfd_create("bpfbatch-load")
                self.pid = os.fork()
                if self.pid == 0:
                    _child(self.fd, parent, *self.args)  # never returns
        except BaseException:
            self.__exit__()
            raise
        return self

    def result(self) -> tuple[int, int, np.ndarray, bytes, bytes] | None:
        """``(stop offset, lines read, line numbers from 1, keys, values)``, or ``None``
        when the child did not finish."""
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        if os.waitstatus_to_exitcode(status) != 0:
            return None
        with open(self.fd, "rb", closefd=False) as out:
            out.seek(0)
            stop, lines, count, nkeys = _HEADER.unpack(out.read(_HEADER.size))
            numbers = np.frombuffer(out.read(8 * count), dtype=np.int64)
            keys = out.read(nkeys)
            return stop, lines, numbers, keys, out.read()

    def __exit__(self, *exc) -> None:
        with interrupts.deferred():  # a signal now must not leave the child running
            if self.pid is not None:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            if self.fd is not None:
                os.close(self.fd)


def _child(out_fd: int, parent: int, fd: int, start: int, stop: int, typed: TypedLines):
    """Encode pieces of ``[start, stop)`` of the file ``fd`` until the typed path declines
    one; write the header and the records to ``out_fd``; exit (0 when written). Signals take their default
    action here: the parent alone says what a signal stopped (the child starts inside the
    parent's :func:`~bpfbatch.interrupts.deferred` section: what it holds back is let
    through once the default actions are set)."""
    code = 1
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, interrupts.DEFERRED)
        numbers, keys, values = array("q"), [], []
        line, offset = 1, start
        for piece in _pieces(_Slice(fd, start, stop), "input"):
            if os.getppid() != parent:  # the parent is gone: so is the point
                return
            piece_numbers, _, end, packed = typed_piece(piece, line, typed)
            if packed is None:
                break
            numbers.extend(piece_numbers)
            keys.append(packed.keys)
            values.append(packed.values)
            line, offset = end, offset + len(piece)
        keys_data = b"".join(keys)
        with open(out_fd, "wb", closefd=False) as out:
            out.write(_HEADER.pack(offset, line - 1, len(numbers), len(keys_data)))
            out.write(numbers.tobytes())
            out.write(keys_data)
            out.write(b"".join(values))
        code = 0
    finally:
        os._exit(code)
