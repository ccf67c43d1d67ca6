"""Signals that must not land between a delete and what pays for it.

A command that deletes what it outputs, or applies a file to a map, has critical sections: a
``LOOKUP_AND_DELETE`` and the write of what it returned, a batch update and the count of what
it applied. Python runs a signal handler between any two bytecodes, so a SIGINT that lands
after the syscall returned but before the batch reached the writer (or the tally) loses it.
:func:`deferred` holds SIGINT, SIGTERM, SIGHUP and SIGPIPE back for such a section; one that
arrives meanwhile lands when the section ends, at a point where everything taken has been
delivered or put back and counted, with the disposition it had (KeyboardInterrupt, the
CLI's :class:`~bpfbatch.errors.Interrupted`, or death by SIGTERM's default).

Two mechanisms, because CPython runs Python-level handlers in the main thread whichever
thread the kernel delivered the signal to (numpy's BLAS threads have every signal unblocked):
in the main thread the handlers are swapped for one that only records the signal, which is
raised again at the end of the section; in every thread the signals are blocked with
``pthread_sigmask``, which also keeps a default disposition (SIGTERM, SIGHUP: terminate) from
acting inside the section. SIGKILL cannot be deferred: it loses at most the batch in hand.

The CLI turns the three terminating signals into :class:`Interrupted` from the first moment
its entry point runs to the moment the command's outcome is decided
(:func:`command_started`, :func:`decide`), so
every command stops the same way — saying what it did, exiting 128 + the signal number —
instead of SIGTERM and SIGHUP killing it on the spot or SIGINT printing a traceback; a
command that can say more wraps its work in :func:`stopping`. An Interrupted that C code
swallows (it calls Python code, where the handler raised, and clears the error) is raised
again: its signal is sent again as it dies undecided (:func:`_watched`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import signal
import sys
import threading
import weakref
from collections.abc import Callable

from .errors import BpfBatchError, Interrupted, PartialError

#: Deferred in critical sections. SIGPIPE is ignored by Python (writes fail with EPIPE), but a
#: program embedding the library may have it at its default, which kills.
DEFERRED = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE})
#: Turned into Interrupted by the CLI.
TERMINATING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


_held = threading.local()


@contextlib.contextmanager
def deferred():
    """Hold :data:`DEFERRED` back for the block; what arrived lands at its end.

    The section's own steps (the handler swaps, the mask) can be hit by the signal they are
    setting up for: a process-directed signal that this thread blocks is taken by another
    thread, and its Python handler runs here at whatever bytecode comes next. So the CLI's
    handlers hold a signal that lands while ``_held.caught`` is set (:func:`_interrupt`),
    which is set before anything else and cleared only once the handlers and the mask are
    back: a handler that raised half-way through the restore would leave the mask blocked
    for good and the other signals going to a list nobody reads."""
    main = threading.current_thread() is threading.main_thread()
    caught: list[int] = []
    holds = main and getattr(_held, "caught", None) is None
    previous: dict = {}
    mask = None
    if holds:
        _held.caught = caught
    try:
        if holds:
            for sig in TERMINATING:
                previous[sig] = signal.signal(sig, _hold)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, DEFERRED)
        yield
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # what waited reaches _hold
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if holds:
            _held.caught = None
        for sig in dict.fromkeys(caught):
            signal.raise_signal(sig)


def _hold(signum, _frame):
    """The handler inside a section: the signal is raised again at its end."""
    _held.caught.append(signum)


def pending() -> bool:
    """Whether a deferred signal is waiting for the section to end (a writer stuck on a full
    pipe uses it to give up the batch in hand instead of waiting forever)."""
    return bool(getattr(_held, "caught", None)) or bool(signal.sigpending() & DEFERRED)


def _raise(signum, _frame):
    _interrupt(signum)


#: Whether the outcome of the command between :func:`command_started` and
#: :func:`command_ended` is decided (see :func:`decide`).
_decided = False
#: The handlers :func:`command_started` replaced, for :func:`command_ended` to put back.
_replaced: dict = {}


def _raise_until_decided(signum, _frame):
    if not _decided:
        _interrupt(signum)


def _interrupt(signum: int) -> None:
    """Raise :class:`Interrupted`, unless that would lose it: inside a section's setup or
    restore (:func:`deferred`: the section raises it at its end) or inside
    :func:`_unraisable` (sent again a moment later)."""
    held = getattr(_held, "caught", None)
    if held is not None:
        held.append(signum)
    elif _in_hook:
        _send_again(signum)
    else:
        raise _watched(Interrupted(signum))


#: Whether a command runs (between :func:`command_started` and :func:`command_ended`), and
#: which one: an Interrupted raised for one command says nothing about the next.
_running = False
_command = 0
#: The weak references :func:`_watched` keeps (a weakref's callback runs only while the
#: weakref itself is alive).
_watching: set = set()


def _watched(exc: Interrupted) -> Interrupted:
    """``exc``, whose death before the command's outcome is decided sends its signal again.

    A handler raises wherever the signal lands, and C code that calls Python code may clear
    whatever that raised and go on as if nothing came: numpy, making a dtype of an object
    (``np.dtype((np.void, n))``, as :meth:`~bpfbatch.events.batch.Batch.rows` does for every
    batch ``record`` takes), calls its Python ``npy_ctypes_check`` and takes any exception
    from it to mean "not a ctypes type"; ``__del__`` and weakref callbacks report it as
    unraisable (:func:`_unraisable`). Raised, the Interrupted lives until the entry point has
    decided the outcome — on the stack, handled, or the context of what replaced it; swallowed, it
    dies at once (nothing else refers to it: no local holds it here, so no traceback cycle
    keeps it). Its death then sends the signal again to the main thread, from a thread of
    its own (sent from here, its handler would run here, inside the code that swallows),
    unless an Interrupted is being handled already (a second signal during the first one's
    cleanup adds nothing)."""
    if _running and not _decided:
        _watching.add(weakref.ref(exc, functools.partial(_died, exc.signum, _command)))
    return exc


#: The signal of the last watched Interrupted that died swallowed while the command ran.
_swallowed: int | None = None


def _died(signum: int, command: int, ref: weakref.ref) -> None:
    """A watched Interrupted of ``command`` is gone (:func:`_watched`)."""
    global _swallowed
    _watching.discard(ref)
    if command == _command and _running and not _decided \
            and interruption_in(sys.exc_info()[1]) is None:
        _swallowed = signum
        _send_again(signum)


def swallowed() -> Interrupted | None:
    """An :class:`Interrupted` for the signal whose Interrupted C code swallowed while the
    command ran, if one did: what the swallowing code raised instead (numpy's import, which
    turns it into an ImportError naming ``datetime``) is that signal's doing, so the entry
    point reports the interruption, not the error it became."""
    return None if _swallowed is None else Interrupted(_swallowed)


def interruption_in(exc: BaseException | None) -> Interrupted | None:
    """The :class:`Interrupted` that ``exc`` is or wraps (its cause or context, however
    deep), if any: what a signal raised and another exception replaced — Python wraps what a
    handler raised inside ``__set_name__`` in a RuntimeError (3.11), an error in a cleanup
    has the Interrupted it cleans up after as its context."""
    seen = set()
    while exc is not None and id(exc) not in seen and not isinstance(exc, SystemExit):
        if isinstance(exc, Interrupted):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


_in_hook = False


def _send_again(signum: int) -> None:
    """``signum`` to the main thread a moment from now, from a thread of its own (sent from
    here, its handler would run here; ``_thread``'s start does not wait for the thread)."""
    import _thread

    _thread.start_new_thread(_kill_main_later, (threading.main_thread().ident, signum))


def _kill_main_later(ident: int, signum: int) -> None:
    import time

    time.sleep(0.002)
    signal.pthread_kill(ident, signum)


def _unraisable(unraisable) -> None:
    """``sys.unraisablehook`` while a command runs: an :class:`Interrupted` raised where
    Python cannot propagate it (a weakref callback, ``__del__``: it would print "Exception
    ignored" and go on) is not printed; it dies as the hook returns, which sends its signal
    again (:func:`_watched`) to land in code that can raise it."""
    global _in_hook
    _in_hook = True
    try:
        if isinstance(unraisable.exc_value, Interrupted):
            return
    finally:
        _in_hook = False
    _replaced_hook[0](unraisable)


_replaced_hook = [sys.__unraisablehook__]


def command_started() -> None:
    """A command run from its entry point begins: SIGINT, SIGTERM and SIGHUP raise
    :class:`Interrupted` wherever they land until :func:`decide` is called — as soon as the
    command returned or raised — and do nothing from then on, while the entry point reports
    the outcome (one line, the exit status), so a late signal can neither replace that report
    nor add a traceback to it (nor can one swallowed by a callback: :func:`_unraisable`).
    Call it inside the ``try`` that answers :class:`Interrupted`: a signal may land half-way
    through it."""
    global _decided, _running, _command, _swallowed
    _decided, _running, _command, _swallowed = False, True, _command + 1, None
    if sys.unraisablehook is not _unraisable:
        _replaced_hook[0], sys.unraisablehook = sys.unraisablehook, _unraisable
    for sig in TERMINATING:
        _replaced.setdefault(sig, signal.getsignal(sig))
        signal.signal(sig, _raise_until_decided)


def decide() -> None:
    """The command's outcome (its result, or the exception that ended it) is decided: from
    here on a signal is ignored. One store, so no handler can run half-way through it."""
    global _decided
    _decided = True


def command_ended(*, restore: bool) -> None:
    """After the report: the signals stay ignored (SIG_IGN, which also discards one waiting
    to run) — for good without ``restore``, as a process that is about to exit needs (the
    interpreter would put SIG_DFL back for a Python handler as it exits, and a SIGTERM then
    would kill it after its report) — or, with ``restore``, until the handlers
    :func:`command_started` replaced are back (a caller that goes on, e.g. a test)."""
    global _decided, _running
    _decided, _running = True, False
    for sig in TERMINATING:
        signal.signal(sig, signal.SIG_IGN)
    if restore:
        for sig, handler in _replaced.items():
            signal.signal(sig, handler)
        _replaced.clear()
        sys.unraisablehook = _replaced_hook[0]
        _decided = False


@contextlib.contextmanager
def raised_as_interrupted():
    """SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` for the block (then the previous
    handlers). Main thread only: elsewhere the handlers cannot be set and this is a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise) for sig in TERMINATING}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def stopping(done: Callable[[], str], tally: Tally | None = None):
    """For a command: SIGINT/SIGTERM/SIGHUP stop it with :class:`Interrupted`, whose message
    says ``after <done()>`` (what was applied or delivered) unless the command said more.
    With ``tally``, an error that stops the command once something was applied says it too:
    a package error in its message, anything else in a line of its own before the traceback.
    """
    with raised_as_interrupted():
        try:
            yield
        except Interrupted as exc:
            exc.message = exc.message or f"after {done()}"
            raise
        except PartialError:
            raise  # it says itself how many entries were applied
        except BpfBatchError as exc:
            if tally is not None and tally.applied:
                exc.message += f" ({done()} before it)"
            raise
        except Exception:
            if tally is not None and tally.applied:
                print(f"bpfbatch: {done()} before this error", file=sys.stderr, flush=True)
            raise


@dataclasses.dataclass
class Tally:
    """What a write has applied so far, counted in the same critical section as the syscall
    that applied it, so an interrupted command can say exactly what it did. Several writer
    threads may count into one tally (:func:`bpfbatch.map.writes.update` with ``jobs``)."""

    applied: int = 0
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False,
                                              compare=False)

    def add(self, n: int) -> None:
        with self._lock:
            self.applied += n
