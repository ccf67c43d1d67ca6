"""Signals held back around critical sections, and what an interrupted command says."""

import _thread
import errno
import inspect
import os
import signal
import subprocess
import sys
import threading

import pytest

from bpfbatch import interrupts
from bpfbatch.errors import Interrupted, KernelError, PartialError


def test_a_signal_inside_a_section_lands_at_its_end():
    landed = []
    previous = signal.signal(signal.SIGHUP, lambda *_: landed.append("HUP"))
    try:
        with interrupts.deferred():
            # At this thread, which holds it back: a process-directed kill may be taken by
            # another thread (numpy's BLAS pool) and reach this one's handler at a moment the
            # test cannot see (the subprocess tests send real process-directed signals).
            signal.pthread_kill(threading.get_ident(), signal.SIGHUP)
            assert interrupts.pending()
            assert landed == []
        assert landed == ["HUP"]
    finally:
        signal.signal(signal.SIGHUP, previous)


def _lines_of_deferred_with(sig, at: int) -> tuple[int, list[int]]:
    """A ``deferred()`` section run with ``sig`` arriving at its ``at``-th line (its setup,
    its body, its restore), as a signal another thread took arrives: its Python handler runs
    here at the next bytecode. Returns the lines the section ran and the signals raised."""
    code = inspect.unwrap(interrupts.deferred).__code__
    lines = [0]

    def at_line(frame, event, _arg):
        if event == "line":
            lines[0] += 1
            if lines[0] == at:
                _thread.interrupt_main(sig)
        return at_line

    raised = []
    tracer = sys.gettrace()
    sys.settrace(lambda frame, *_: at_line if frame.f_code is code else None)
    try:
        with interrupts.deferred():
            pass
    except Interrupted as exc:
        raised.append(exc.signum)
    finally:
        sys.settrace(tracer)
    return lines[0], raised


@pytest.mark.parametrize("sig", interrupts.TERMINATING, ids=lambda s: s.name)
def test_a_signal_at_any_line_of_a_section_lands_once_and_leaves_nothing_held(sig):
    """Landing while the section swaps its handlers or puts them and the mask back, a signal
    is raised once, and the next signal still is: one that interrupted the restore used to
    leave this thread's mask blocked and the other signals going to a list nobody read."""
    with interrupts.raised_as_interrupted():
        handlers = {s: signal.getsignal(s) for s in interrupts.TERMINATING}
        at = 1
        while True:
            lines, raised = _lines_of_deferred_with(sig, at)
            if at > lines:
                break
            assert raised == [sig], at
            assert {s: signal.getsignal(s) for s in interrupts.TERMINATING} == handlers, at
            assert not signal.pthread_sigmask(signal.SIG_BLOCK, []) & interrupts.DEFERRED, at
            assert not interrupts.pending(), at
            with pytest.raises(Interrupted):
                _thread.interrupt_main(signal.SIGTERM)
                sum(range(100))  # a bytecode boundary: the handler runs
            at += 1
    assert at > 10  # the section's setup and restore were all reached


def python(code: str) -> subprocess.CompletedProcess:
    """``code`` run by an interpreter of its own (signals to itself)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)


def test_a_default_disposition_acts_only_after_the_section():
    """SIGTERM at its default kills, but not inside a section: the section finishes."""
    code = ("import os, signal\nfrom bpfbatch import interrupts\n"
            "with interrupts.deferred():\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    print('finished the section', flush=True)\n"
            "print('never here', flush=True)\n")
    proc = python(code)
    assert proc.returncode == -signal.SIGTERM
    assert proc.stdout == "finished the section\n"


def test_stopping_turns_a_signal_into_interrupted_saying_what_was_done():
    tally = interrupts.Tally()
    with pytest.raises(Interrupted) as exc, \
            interrupts.stopping(lambda: f"{tally.applied} entries loaded", tally):
        tally.add(42)
        os.kill(os.getpid(), signal.SIGINT)
    assert exc.value.exit_status == 130
    assert str(exc.value) == "interrupted (SIGINT) after 42 entries loaded"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_stopping_adds_what_was_applied_to_an_error_that_does_not_say_it():
    tally = interrupts.Tally(7)
    with pytest.raises(KernelError) as exc, \
            interrupts.stopping(lambda: f"{tally.applied} entries removed", tally):
        raise KernelError("lookup_and_delete batch", errno.EFAULT, obj="map 1 'm'")
    assert str(exc.value).endswith("bad user buffer (7 entries removed before it) (EFAULT)")
    with pytest.raises(PartialError) as exc, \
            interrupts.stopping(lambda: f"{tally.applied} entries loaded", tally):
        raise PartialError("update batch", errno.E2BIG, applied=7, obj="map 1 'm'")
    assert "before it" not in str(exc.value)


def test_a_signal_a_callback_swallowed_lands_after_it():
    """A signal whose Interrupted is raised inside a weakref callback (Python prints
    "Exception ignored" and goes on) must still stop the command, and print nothing there."""
    proc = python(swallowed_then_spun(
        "import os, signal, weakref\n"
        "class A: pass\n"
        "a = A()\n"
        "r = weakref.ref(a, lambda _: os.kill(os.getpid(), signal.SIGTERM))\n",
        "del a\n"))
    assert (proc.stdout, proc.stderr) == (f"interrupted {signal.SIGTERM}\n", "")


def swallowed_then_spun(setup: str, swallow: str) -> str:
    """A command's code: ``setup``, then ``swallow`` (where the Interrupted of a signal is
    swallowed), then 10 s of spinning; it prints ``interrupted N`` when the signal lands
    after all, ``went on`` when it never does."""
    body = "".join(f"    {line}\n" for line in swallow.splitlines())
    return (setup + "from bpfbatch import interrupts\nfrom bpfbatch.errors import Interrupted\n"
            "interrupts.command_started()\n"
            "try:\n" + body +
            "    import time\n"
            "    deadline = time.monotonic() + 10\n"
            "    while time.monotonic() < deadline: pass\n"
            "    print('went on')\n"
            "except Interrupted as exc:\n"
            "    print('interrupted', exc.signum)\n")


#: numpy's C code, making a dtype of an object (``np.dtype((np.void, n))``), calls this Python
#: function on the object's type and takes any exception from it to mean "not a ctypes type":
#: a handler that raises in it is swallowed.
SWALLOWED_BY_NUMPY = (
    "import signal\nimport numpy as np\nimport numpy._core._internal as internal\n"
    "check, landed = internal.npy_ctypes_check, []  # numpy keeps what it first found\n"
    "def landing(cls):  # the signal lands as numpy calls its check, once\n"
    "    if not landed:\n"
    "        landed.append(print('landed', flush=True))\n"
    "        signal.raise_signal(signal.SIGINT)\n"
    "    return check(cls)\n"
    "internal.npy_ctypes_check = landing\n")


def test_a_signal_whose_interrupted_numpy_swallows_lands_after_it():
    """The Interrupted a handler raised dies inside numpy (no exception reaches the caller):
    its death sends the signal again, and the command stops a moment later instead of going
    on as if it never came (``record --follow`` recorded on, deaf to that SIGINT)."""
    # One write of the whole line: the signal sent again lands a moment later, which a loaded
    # machine stretched into print()'s two writes (text, then end).
    proc = python(swallowed_then_spun(
        SWALLOWED_BY_NUMPY, "np.dtype((np.void, 4))\nprint('swallowed\\n', end='', flush=True)"))
    assert (proc.stdout, proc.stderr) == (f"landed\nswallowed\ninterrupted {signal.SIGINT}\n",
                                          "")


def test_an_interrupted_caught_once_decided_is_not_sent_again():
    """Once the outcome is decided (the entry point took the Interrupted), its end sends
    nothing; nor does an Interrupted's end while another one is being handled."""
    code = (SWALLOWED_BY_NUMPY +
            "import time\nfrom bpfbatch import interrupts\nfrom bpfbatch.errors import Interrupted\n"
            "interrupts.command_started()\n"
            "try:\n"
            "    signal.raise_signal(signal.SIGTERM)\n"
            "except Interrupted as first:\n"
            "    np.dtype((np.void, 4))  # a second signal, swallowed\n"
            "    time.sleep(0.1)\n"
            "    interrupts.decide()\n"
            "    print('handled', first.signum, flush=True)\n"
            "time.sleep(0.1)\n"
            "interrupts.command_ended(restore=True)\n"
            "print('done')\n")
    proc = python(code)
    assert (proc.stdout, proc.stderr) == (f"landed\nhandled {signal.SIGTERM}\ndone\n", "")


def test_an_error_after_a_swallowed_interrupted_is_the_signal_s_outcome():
    """C code that swallows the Interrupted and raises its own error instead (numpy's import,
    interrupted there, raises an ImportError naming ``datetime``): the command ends as the
    signal ends it — one line, 128 + n — not with that error's traceback."""
    proc = python(SWALLOWED_BY_NUMPY +
                  "from bpfbatch.cli import _run\n"
                  "def call():\n"
                  "    np.dtype((np.void, 4))\n"
                  "    raise ImportError('PyCapsule_Import could not import module \"datetime\"')\n"
                  "_run(call)\n")
    assert proc.returncode == 128 + signal.SIGINT, proc.stderr
    assert proc.stdout == "landed\n" and proc.stderr.count("\n") == 1, proc.stderr
    assert "interrupted" in proc.stderr and "Traceback" not in proc.stderr
