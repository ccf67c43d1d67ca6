"""Delivery: nothing is deleted that is not delivered or put back.

Every path that deletes what it outputs (``drain``, ``exec --action delete -o``, ``pop``,
``bcc.items_and_clear``, the library's drain) hands each batch it deleted to a
:class:`Delivery`, inside one critical section (:func:`bpfbatch.interrupts.deferred`):

    LOOKUP_AND_DELETE → render → write every byte → (fsync) ; on failure: put back the rest

**Delivered** means: every byte of the record was accepted by the kernel for the output fd
(and, with ``fsync``, is on disk). Bytes a pipe accepted count as delivered: what the reader
does with them after reading is out of our hands. A record whose bytes were only partly
written is not delivered: it is put back, and the torn bytes stay in the output (a reader
that stops at the last complete line sees exactly the delivered records). Where a record
ends is the renderer's to say: in ``arrow`` every record of a batch ends with the batch, so a
batch is delivered whole or put back whole; ``parquet``, readable only once closed, is refused.

**Put back** means: the records that were not delivered are written back into the map,
exactly those, one ``BPF_MAP_UPDATE_ELEM`` with ``BPF_NOEXIST`` each. The rule when a writer
re-created a key between the delete and the put-back: the writer's value is newer and stays;
the drained value of that key is counted as *superseded* and reported, never written over it.
A put-back the kernel refuses (a map filled up meanwhile: E2BIG) is reported as lost with its
count. Either makes the command fail.

The one exception is SIGKILL, which cannot be deferred: it loses at most the batch in hand,
so ``--batch-size`` bounds it.

What the library hands out over several calls (:meth:`bpfbatch.Map.drain`'s pairs, the bcc
drop-ins' entries until they return) is *held* between its critical sections: deleted, not
yet delivered. A holder registers with :func:`hold`, and what it still holds is put back when
it ends early (its own close, garbage collection), at interpreter exit (``atexit``: before
the modules it needs are torn down), and before a signal kills the process: a terminating
signal whose disposition is the default (SIGTERM, SIGHUP, SIGINT or SIGPIPE set to
``SIG_DFL``: the process would die on the spot) is caught while something is held, the
holders put back, then the signal kills as it would have.

Here: :class:`Delivery` runs the critical sections and keeps the counts a command reports;
a sink raises :class:`Undelivered` with the number of records it delivered completely;
:class:`PutBack` is what the map layer's put-back did (:func:`bpfbatch.map.whole.put_back`).
Writing to a real file descriptor, record boundaries included, is
:mod:`bpfbatch.formats.writer`'s; :func:`bpfbatch.formats.pipeline.delivery` joins the two.
This module sits below both the map and the records layers, which both use it.
"""

from __future__ import annotations

import atexit
import dataclasses
import errno as E
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Iterable

from . import interrupts
from .errors import BpfBatchError, errno_name


class Undelivered(BpfBatchError):
    """Raised by a sink: its first ``complete`` records were delivered, the rest not. Where
    nothing was deleted (a dump) it is the command's error as it stands."""

    def __init__(self, complete: int, reason: str, errno: int | None):
        super().__init__(f"output failed: {reason}", obj="output", errno=errno)
        self.complete = complete
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class PutBack:
    """What a put-back did with ``restored + superseded + lost`` records: ``superseded``
    keys a writer had re-created (its value kept), ``lost`` the kernel refused (``errno``)."""

    restored: int
    superseded: int = 0
    lost: int = 0
    errno: int | None = None

    def __add__(self, other: PutBack) -> PutBack:
        """Both put-backs' counts (the errno of the latest refusal)."""
        return PutBack(self.restored + other.restored, self.superseded + other.superseded,
                       self.lost + other.lost, other.errno or self.errno)

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
        self.reason = reason
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
        #: What the put-back of the batch that failed did (``None`` while none failed).
        self.returned: PutBack | None = None

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

    def close(self) -> None:
        """End the output (the sink's trailer, if it has one: ``]`` of a JSON array). Every
        entry is delivered by then, so a failure only fails."""
        finish = getattr(self.sink, "finish", None)
        if finish is not None:
            with interrupts.deferred():
                finish()

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
        self.returned = self._put_back(type(batch)(batch.count - start, batch.keys[start * ks:],
                                                   batch.values[start * vs:]))
        return self.returned

    def _fail(self, batch, complete: int, reason: str, errno: int | None):
        self.delivered += complete
        put_back = self._restore(batch, complete)
        raise DeliveryError(reason, obj=self.label, errno=errno, delivered=self.delivered,
                            put_back=put_back)


# -- held: deleted, handed out over several calls, not yet delivered --------------------------

#: The live holders, by the thread that holds (weakly: a holder dropped by its owner puts
#: back in its own finalizer).
_holders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_guarded: set[int] = set()  # signals whose SIG_DFL is replaced by _put_back_and_die
_at_exit = False


def hold(holder) -> None:
    """Register ``holder``, whose ``put_back()`` puts back whatever it still holds (and may be
    called again: it then does nothing), until :func:`release`. Call it outside a critical
    section (:func:`~bpfbatch.interrupts.deferred` swaps the handlers set here).

    Covered from then on: interpreter exit, and, for a holder of the main thread (CPython runs
    signal handlers there, between two of its bytecodes, so a holder's state must change
    inside critical sections or in single steps), a terminating signal at its default
    disposition. A holder in another thread is put back at exit only: a default SIGTERM kills
    the process from any thread, so block the signals there (:mod:`bpfbatch.interrupts`)."""
    global _at_exit
    main = threading.current_thread() is threading.main_thread()
    _holders[holder] = main
    if not _at_exit:
        atexit.register(_put_back_at_exit)
        _at_exit = True
    if main:
        for sig in interrupts.DEFERRED - _guarded:
            if signal.getsignal(sig) == signal.SIG_DFL:
                signal.signal(sig, _put_back_and_die)
                _guarded.add(sig)


def release(holder) -> None:
    """``holder`` holds nothing any more; with the last holder gone, the default dispositions
    :func:`hold` replaced are back (those still ours: a handler set since is left alone)."""
    _holders.pop(holder, None)
    if _guarded and not any(_holders.values()) \
            and threading.current_thread() is threading.main_thread():
        for sig in list(_guarded):
            if signal.getsignal(sig) is _put_back_and_die:
                signal.signal(sig, signal.SIG_DFL)
            _guarded.discard(sig)


def _put_back_all(*, main_only: bool) -> None:
    """Every holder's (of the main thread's, with ``main_only``) put-back, with the signals
    held back; a failure is one line on stderr, and the others still run."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, interrupts.DEFERRED)
    try:
        for holder, main in list(_holders.items()):
            if main or not main_only:
                try:
                    holder.put_back()
                except Exception as exc:  # the process is ending: say it, go on
                    print(f"bpfbatch: error: {exc}", file=sys.stderr, flush=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _put_back_at_exit() -> None:
    """At interpreter exit, while every module still works: put back what is held, and let
    go of the holders (finalized later in the teardown, they find nothing to do)."""
    _put_back_all(main_only=False)
    _holders.clear()
    _guarded.clear()


def _put_back_and_die(signum: int, _frame) -> None:
    """A terminating signal at its default disposition arrived while the main thread held
    deleted records: put them back, then die of the signal, as the process would have."""
    signal.pthread_sigmask(signal.SIG_BLOCK, interrupts.DEFERRED)
    _put_back_all(main_only=True)
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)  # pending while blocked; kills when unblocked
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
