"""The one output pipeline: batches → (read-ahead) → limit → renderer → writer.

Every command that prints records — ``dump``, ``drain``, ``exec -o``, the demo — and the
Python API build it here, so a format, a limit or a flush rule behaves the same everywhere.
It is fed batches and never touches a map: the caller picks the source (a
:class:`~bpfbatch.map.cursor.BatchCursor`, read ahead with
:func:`~bpfbatch.map.cursor.read_ahead` when nothing is deleted; a drain; the exec walker's
sink) and this module does the rest.

What prints records it deleted gets its writing end from :func:`delivery`, never from
:class:`Output`: the records go to the real fd byte by byte (:mod:`.writer`), each batch in
the critical section of its delete, and what the output does not take is handed to the
caller's put-back (:mod:`bpfbatch.delivery`). That is how ``drain`` and ``exec --action
delete -o`` keep the rule "nothing deleted that is not delivered or put back".
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator

from .. import interrupts
from ..delivery import Delivery, PutBackFn
from ..errors import InputError, OutputError
from ..records.decoding import decode_options, view
from .render import RENDERERS, Renderer, check_format, make_renderer
from .writer import FdWriter, RecordSink

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at start-up
if TYPE_CHECKING:
    from typing import BinaryIO

__all__ = ["RENDERERS", "Output", "check_format", "delivery", "limited", "run", "stdout"]


def _display_codecs(fmt: str, info, btf, decode: Iterable[str] | None, sum_cpus: bool):
    """The map's codecs as ``--decode`` and ``--sum`` ask to show them (see :class:`Output`);
    bpftool-json takes neither: it is bpftool's output byte for byte."""
    if fmt == "bpftool-json" and any(d.strip() != "none" for d in decode_options(decode)):
        raise InputError("bpftool-json is bpftool's output byte for byte; use "
                         "another format to decode fields", obj="--decode")
    key_codec, value_codec = view(info, decode, btf=btf)
    if sum_cpus:
        if fmt == "bpftool-json":
            raise InputError("bpftool-json is bpftool's output byte for byte; use "
                             "another format to sum", obj="--sum")
        from ..records.cpusum import summed  # only --sum needs it: not imported by every dump

        value_codec = summed(value_codec)
    return key_codec, value_codec


class Output:
    """The writing end: each batch rendered in the map's format and written with one
    ``write()``; with ``flush_each`` flushed before :meth:`write` returns, which a drain needs
    (its sink contract: a batch is delivered when the call returns). :meth:`close` writes the
    trailer (``]`` of the JSON arrays) and flushes.

    ``sum_cpus``: a per-CPU map's values shown summed over the CPUs
    (:mod:`~bpfbatch.records.cpusum`). ``decode``: the view, as
    :func:`~bpfbatch.records.decoding.view` takes it (``None``: the automatic decoders;
    ``"none"``: every field as the map stores it; ``FIELD=KIND`` options). ``element``: the
    output is one element (``lookup``, ``peek``), printed as bpftool prints one
    (:func:`~.render.make_renderer`)."""

    def __init__(self, fmt: str, info, out: BinaryIO, *, flush_each: bool = False, btf=None,
                 decode: Iterable[str] | None = None, sum_cpus: bool = False,
                 element: bool = False):
        key_codec, value_codec = _display_codecs(fmt, info, btf, decode, sum_cpus)
        self.info = info
        self.renderer: Renderer = make_renderer(fmt, info, key_codec, value_codec, out,
                                                element=element)
        self._out = out
        self._flush_each = flush_each
        self._closed = False

    def write(self, batch) -> None:
        """Render and write ``batch`` with SIGINT/SIGTERM/SIGHUP held back, so a signal stops
        the output between two batches, never inside a record."""
        with interrupts.deferred():
            self.renderer.write_batch(batch)
            if self._flush_each:
                self._out.flush()

    def close(self) -> None:
        """Write the trailer, signals held back like :meth:`write`'s; once (a signal held back
        during the trailer lands as it ends, and the caller that closes again on a signal
        must not write a second one)."""
        if self._closed:
            return
        with interrupts.deferred():
            self._closed = True
            try:
                self.renderer.close()
            except OutputError as refused:
                refused.message = (f"output failed after all {self.written} records were "
                                   f"written: {refused.reason}")
                raise

    @property
    def written(self) -> int:
        """Elements rendered so far."""
        return self.renderer.count


def stdout(*, fsync: bool = False) -> FdWriter:
    """Standard output as a checked writer on fd 1 (what Python buffered is flushed first):
    a short write continues, a failure raises instead of being lost in a buffer, and a closed
    stdout fails here, before anything is read or deleted."""
    if sys.stdout is not None:  # None when the process started with fd 1 closed
        sys.stdout.flush()
    return FdWriter(1, fsync=fsync, name="stdout")


def delivery(fmt: str, info, put_back: PutBackFn, writer: FdWriter, *, btf=None,
             decode: Iterable[str] | None = None, whole: bool = False) -> Delivery:
    """The writing end of a command that deletes what it prints: batches rendered in ``fmt``
    and written through ``writer`` (e.g. :func:`stdout`); what the output does not take goes
    to ``put_back``. Feed it with :meth:`~bpfbatch.delivery.Delivery.drain` (a draining
    cursor) or :meth:`~bpfbatch.delivery.Delivery.take` (a sink that deleted the batch
    itself); end it with :meth:`~bpfbatch.delivery.Delivery.close`. ``decode`` as for
    :class:`Output`. ``whole``: the output is the one element given to ``take`` (``pop``),
    delivered with its trailer (see :class:`~.writer.RecordSink`; any format, ``parquet``
    included) and printed as bpftool prints one element (:func:`~.render.make_renderer`)."""
    key_codec, value_codec = _display_codecs(fmt, info, btf, decode, False)
    sink = RecordSink(make_renderer(fmt, info, key_codec, value_codec, writer, element=whole),
                      writer, whole=whole)
    return Delivery(sink, put_back, label=info.label)


def limited(batches: Iterable, limit: int | None, key_size: int, value_stride: int) -> Iterator:
    """``batches`` cut to ``limit`` elements in all (``None``: no limit); the last batch is
    shortened in place (views, no copy) and nothing after it is read."""
    if limit is None:
        yield from batches
        return
    if limit < 0:
        raise InputError(f"must not be negative, got {limit}", obj="limit")
    left = limit
    for batch in batches:
        if batch.count > left:
            batch = type(batch)(left, batch.keys[:left * key_size],
                                batch.values[:left * value_stride],
                                tuple(f for f in batch.failed if f[0] < left))
        left -= batch.count
        yield batch
        if left == 0:
            return


def run(batches: Iterable, output: Output, *, limit: int | None = None,
        progress: Callable[[int], None] = lambda n: None) -> int:
    """Write ``batches`` (at most ``limit`` elements) to ``output``, close it, and return how
    many elements were written. ``progress`` is told each batch's count.

    ``batches`` is closed before this returns, also when stopped early by the limit, so a
    read-ahead thread is gone before the caller closes the map.
    """
    info = output.info
    try:
        for batch in limited(batches, limit, info.key_size, info.value_stride):
            output.write(batch)
            progress(batch.count)
    finally:
        close = getattr(batches, "close", None)
        if close:
            close()
    output.close()
    return output.written
