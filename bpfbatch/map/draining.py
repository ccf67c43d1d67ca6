"""What :meth:`bpfbatch.Map.drain` returns: a map's ``(key, value)`` pairs, deleted batch by
batch and handed out one by one, with nothing lost whenever and however the iteration ends.

A pair is delivered when :meth:`Draining.__next__` returns it. The rest of the batch in hand
(deleted by ``BPF_MAP_LOOKUP_AND_DELETE_BATCH``, not yet handed out) is *held*
(:func:`bpfbatch.delivery.hold`) and put back (:func:`bpfbatch.map.whole.put_back`: a key a
program re-created meanwhile keeps its newer value) when the iteration ends early:

- :meth:`Draining.close`, a ``with`` block, or an exception raised inside ``__next__`` (a
  KeyboardInterrupt landing there, a decoding error);
- the iterator dropped: a ``break`` out of the ``for`` that owned it, a reference given up
  mid-iteration (its finalizer puts back);
- interpreter exit with the iterator still alive (an ``atexit`` hook, before the modules it
  needs are torn down);
- SIGTERM, SIGHUP (or SIGINT/SIGPIPE) at its default disposition in the main thread: put
  back, then the process dies of the signal as it would have.

The iterator holds a file descriptor of its own on the map (:meth:`bpfbatch.Map.dup`), so
closing the :class:`~bpfbatch.Map` it came from (the end of its ``with`` block) neither stops
it nor makes a put-back fail: the map stays open until the iterator ends. SIGKILL (and
``os._exit``) lose at most the batch in hand, so ``batch_size`` bounds them.
"""

from __future__ import annotations

from .. import delivery, interrupts
from ..errors import BpfBatchError
from . import whole
from .cursor import Batch, BatchCursor
from .handle import MapHandle

_END = object()


class Draining:
    """Iterator over the decoded pairs drained from ``map`` (see the module docstring);
    also a context manager that closes it."""

    def __init__(self, map: MapHandle, key_codec, value_codec, *, batch_size: int):
        self._map = map.dup()
        try:
            # refuses the types whose drain could not be put back
            self._restore = whole.restorer(self._map)
            self._batches = iter(BatchCursor(self._map, delete=True, batch_size=batch_size))
        except BaseException:
            self._map.close()
            raise
        self._codecs = key_codec, value_codec
        self._batch: Batch | None = None  # in hand: its first _handed pairs were handed out
        self._handed = 0
        self._pairs = iter(())
        delivery.hold(self)

    def __iter__(self) -> Draining:
        return self

    def __next__(self) -> tuple[object, object]:
        try:
            while True:
                pair = next(self._pairs, _END)
                if pair is not _END:
                    self._handed += 1  # no signal handler runs between this and the return
                    return pair
                if self._batches is None:
                    raise StopIteration
                with interrupts.deferred():
                    self._batch, self._handed = next(self._batches, None), 0
                if self._batch is None:
                    self.close()
                    raise StopIteration
                key_codec, value_codec = self._codecs
                self._pairs = zip(key_codec.decode_batch(self._batch.keys, self._batch.count),
                                  value_codec.decode_batch(self._batch.values,
                                                           self._batch.count))
        except StopIteration:
            raise
        except BaseException:
            self.close()
            raise

    def put_back(self) -> None:
        """Put back the pairs of the batch in hand not handed out yet (once)."""
        batch, self._batch = self._batch, None
        self._pairs = iter(())
        if batch is None or self._handed >= batch.count:
            return
        ks, vs = self._map.info.key_size, self._map.info.value_stride
        start, rest = self._handed, batch.count - self._handed
        back = self._restore(Batch(rest, batch.keys[start * ks:], batch.values[start * vs:]))
        if back.lost:
            raise BpfBatchError(f"drain stopped: {back}", obj=self._map.info.label,
                                errno=back.errno)

    def close(self) -> None:
        """End the drain: put back what was not handed out, release the map's fd. Closing
        again does nothing."""
        if self._batches is None:
            return
        try:
            if self._batch is not None:
                with interrupts.deferred():
                    self.put_back()
        finally:
            self._batches = None
            self._map.close()
            delivery.release(self)

    def __enter__(self) -> Draining:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_batches", None) is not None:  # __init__ may have failed
            self.close()
