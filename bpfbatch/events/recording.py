"""Recording an event stream: each batch rendered and written by the one output pipeline,
and committed (the ring's consumer position advanced) only once it is written.

Per batch, in one critical section (:func:`bpfbatch.interrupts.deferred`)::

    take (no change in the kernel) → render → write every byte → commit

so a signal lands between two batches, after the one in hand is written and committed; an
output that refuses part of a batch (a full disk, a reader that left) gets exactly its
completely written records committed (the delivery step, :mod:`bpfbatch.delivery`: what it
would "put back" into a map is here simply left in the ring), and the command fails saying
so: the next ``record`` reads the rest. SIGKILL between a write and its commit repeats that
batch, never loses it.

Parquet is readable only once its footer is written, so its records are committed when a
file is complete: at ``rotate_size``, at the end, and whenever the records taken but not yet
committed reach half the ring (the file is then closed early and the next one begun, so the
producer never runs out of room because of the consumer). A file left without its footer by
a failure is removed; its records are still in the ring.

Files: ``path``, then with ``rotate_size`` ``stem.1.ext``, ``stem.2.ext``... as each reaches
the size (checked after each batch: a file ends with the batch that crossed it).
"""

from __future__ import annotations

import contextlib
import os
import time

from .. import interrupts
from ..delivery import DeliveryError, PutBack
from ..errors import BpfBatchError, InputError, Interrupted
from .batch import Batch, EventStream

#: A deferred-commit output is closed once the ring is this full of records taken, not
#: committed.
HELD_LIMIT = 0.5


class Recorder:
    """Writes ``stream``'s batches as ``fmt`` to ``path`` (``None``: stdout), typed by
    ``record_type`` (``(Btf, type_id)``; ``None``: raw bytes, all records of one size)."""

    def __init__(self, stream: EventStream, info, fmt: str, *, record_type=None,
                 path: str | None = None, rotate_size: int | None = None, decode=None,
                 fsync: bool = False):
        from ..formats.render import RENDERERS

        self.stream, self.fmt = stream, fmt
        self._map_info, self._type, self._decode = info, record_type, decode or []
        self.deferred = not RENDERERS[fmt].delivers_prefix
        if self.deferred and path is None:
            raise InputError(f"a {fmt} file is readable only once complete, and its events "
                             "are committed only then: write it to a file (-w FILE), or use "
                             "-o arrow for a stream", obj=f"-o {fmt}")
        self._path, self._rotate, self._fsync = path, rotate_size, fsync
        self.recorded = 0
        self.files: list[str] = []
        self._info = None  # the value model's view, fixed by the first batch when untyped
        self._writer = self._sink = None
        self._pending: tuple[Batch, int] | None = None  # deferred: written, not committed
        self._in_hand: tuple[Batch, int, int] | None = None  # (batch, stop, count) in delivery
        self._in_file = 0  # records in the current file (deferred: none committed yet)

    def start(self) -> None:
        """Open the first file, before any poll, so a path that cannot be written is said
        first. :func:`run` calls it inside the ``try`` that ends the file whole: opened by
        the constructor, a file that a signal landing as the section ended (or before
        ``run``) interrupted was left without its trailer (Parquet: 0 bytes)."""
        with interrupts.deferred():
            if self._writer is None:
                self._open_file()

    # -- writing -----------------------------------------------------------------------------

    def write(self, batch: Batch, n: int | None = None) -> None:
        """Write the first ``n`` records of ``batch`` (all), then commit them; with
        ``rotate_size``, in pieces that each end their file near the size."""
        n = len(batch) if n is None else n
        if not n:
            return
        rows = self._rows(batch, n)
        done = 0
        while done < n:
            stop = n if self._rotate is None else min(n, done + self._room())
            self._write_piece(batch, rows[done:stop], stop)
            done = stop
            self._maybe_rotate()

    def _write_piece(self, batch: Batch, rows, stop: int) -> None:
        """``rows``, the records of ``batch`` up to ``stop``, written then committed, in one
        critical section."""
        from ..map.cursor import Batch as Elements

        count = len(rows)
        elements = Elements(count, b"", memoryview(rows).cast("B"))
        with interrupts.deferred():  # a file is opened only with records to write in it
            if self._writer is None:
                self._open_file()
            if self._sink is None:
                self._start_output()
            if self.deferred:
                self._sink.write(elements)
                self._pending = (batch, stop)
            else:
                self._in_hand = (batch, stop, count)
                try:
                    self._sink.take(elements)
                except DeliveryError as failed:
                    raise self._failed(failed) from None
                batch.commit(stop)
            self._in_file += count
            self.recorded += count

    def _room(self) -> int:
        """Records that fit the current file (the next one, when none is open) before
        ``rotate_size``, at the bytes per record seen so far (64 before any)."""
        size = 0 if self._writer is None else os.fstat(self._writer.fd).st_size
        per_record = size / self._in_file if self._in_file else 64
        return max(1, int((self._rotate - size) / max(per_record, 1)))

    def close(self) -> None:
        """End the output: its trailer (a JSON array's ``]``, Parquet's footer), then commit
        what waited for it. Safe to call twice."""
        with interrupts.deferred():
            self._finish_file()

    def abort(self) -> None:
        """End the output after a failure: a deferred file, never complete, is removed (its
        records were never committed); another output gets its trailer if it still can."""
        with interrupts.deferred():
            if self.deferred:
                self._sink = None
                self._discard_torn()
                self._close_writer()
            with contextlib.suppress(BpfBatchError, OSError):
                self._finish_file()

    # -- helpers -----------------------------------------------------------------------------

    def _rows(self, batch: Batch, n: int):
        if self._info is None:
            from .types import event_info

            size = batch.size
            if self._type is None and size is None:
                raise InputError("records of different sizes: give their type (--type) to "
                                 "read them as one", obj=self._map_info.label)
            self._info = event_info(self._map_info, self._type, size)
        width = self._info.value_size
        if self._type is None and batch.size != width:
            raise InputError(f"a record of {batch.size or 'another'} bytes after {width}-byte "
                             "ones: give their type (--type) to read them as one",
                             obj=self._map_info.label)
        rows = batch.rows(width)
        return rows[:n] if n < len(rows) else rows

    def _open_file(self) -> None:
        from ..formats import pipeline
        from ..formats.writer import FdWriter

        if self._path is None:
            self._writer, self._name = pipeline.stdout(fsync=self._fsync), "stdout"
            return
        name = self._path if not self.files else _rotated(self._path, len(self.files))
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise BpfBatchError(f"cannot be written: {exc.strerror}", obj=name,
                                errno=exc.errno) from None
        self.files.append(name)
        self._name = name
        self._writer = FdWriter(fd, fsync=self._fsync, name=name)

    def _start_output(self) -> None:
        from ..formats import pipeline

        if self.deferred:
            self._sink = pipeline.Output(self.fmt, self._info, self._writer, decode=self._decode)
        else:
            self._sink = pipeline.delivery(self.fmt, self._info, self._leave_in_ring,
                                           self._writer, decode=self._decode)

    def _leave_in_ring(self, rest) -> PutBack:
        """The delivery step's put-back: the records it did not deliver stay in the ring
        (the first ones were written: commit exactly those)."""
        batch, stop, _ = self._in_hand
        batch.commit(stop - rest.count)
        return PutBack(rest.count)

    def _failed(self, failed: DeliveryError) -> BpfBatchError:
        """The delivery step's error, said as record says it: the file, what was recorded
        (the failed batch's complete records included), what stays in the ring."""
        left = failed.put_back.restored
        recorded = self.recorded + self._in_hand[2] - left
        left_behind = getattr(self.stream, "left_behind", "left in the ring for the next reader")
        return BpfBatchError(f"output failed: {failed.reason}; {recorded} events recorded, "
                             f"{left} of the batch {left_behind}",
                             obj=self._name, errno=failed.errno)

    def _maybe_rotate(self) -> None:
        if self._path is None:
            return
        full = self._rotate is not None and os.fstat(self._writer.fd).st_size >= self._rotate
        held = self.deferred and self.stream.stats.held >= HELD_LIMIT
        if full or held:
            with interrupts.deferred():
                self._finish_file()  # the next piece opens the next file

    def _finish_file(self) -> None:
        """End the current file (its trailer; deferred: then commit its records). A
        deferred file without a record (the first, when none came) still gets a complete
        document when the type is known; else, with no schema to write, it is removed."""
        if self._sink is None and self.deferred and self._writer is not None \
                and self._path is not None:
            if self._info is None and self._type is not None:
                from .types import event_info

                self._info = event_info(self._map_info, self._type, None)
            if self._info is None:
                self._discard_torn()
            else:
                self._start_output()
        sink, self._sink = self._sink, None
        try:
            if sink is not None:
                sink.close()
                if self.deferred:
                    self._writer.sync()
                    if self._pending is not None:
                        self._pending[0].commit(self._pending[1])
                    self._pending = None
        except BaseException:
            if self.deferred:
                self._discard_torn()
            raise
        finally:
            self._close_writer()

    def _close_writer(self) -> None:
        if self._path is not None and self._writer is not None:
            with contextlib.suppress(OSError):
                os.close(self._writer.fd)
        self._writer, self._in_file = None, 0

    def _discard_torn(self) -> None:
        """Remove the current deferred file, incomplete: none of its records was committed,
        so they are all still in the ring, and none counts as recorded."""
        if self._path is not None and self._writer is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._name)
        self.recorded -= self._in_file
        self._pending, self._in_file = None, 0


def _rotated(path: str, index: int) -> str:
    """``events.jsonl`` → ``events.<index>.jsonl`` (``events`` → ``events.<index>``)."""
    stem, dot, ext = os.path.basename(path).partition(".")
    return os.path.join(os.path.dirname(path), f"{stem}.{index}{dot}{ext}")


def run(recorder: Recorder, *, count: int | None = None, duration: float | None = None,
        follow: bool = False, report=None, every: float = 1.0) -> int:
    """Record until ``count`` events, ``duration`` seconds, or (``follow``) a signal; with
    none of them, what is waiting now. ``report(stats)`` is called about ``every`` seconds
    (``-v``). Returns the events recorded; the output is closed either way."""
    stream = recorder.stream
    deadline = None if duration is None else time.monotonic() + duration
    waits = follow or count is not None or deadline is not None
    next_report = time.monotonic() + every
    try:
        recorder.start()
        while count is None or recorder.recorded < count:
            timeout = 0.0 if not waits else 0.2 if deadline is None else \
                max(0.0, min(0.2, deadline - time.monotonic()))
            batch = stream.poll(timeout)
            left = None if count is None else count - recorder.recorded
            recorder.write(batch, len(batch) if left is None else min(left, len(batch)))
            now = time.monotonic()
            if report is not None and now >= next_report:
                report(stream.stats)
                next_report = now + every
            if deadline is not None and now >= deadline or not waits and not len(batch):
                break
    except (Interrupted, KeyboardInterrupt):
        recorder.close()  # the batch in hand was written and committed: end the file whole
        raise
    except BaseException:
        recorder.abort()
        raise
    recorder.close()
    return recorder.recorded
