"""The ``bpfbatch`` command: a thin entry point (:func:`main`), the typer app with its lazy
command registry (:mod:`.app`), shared options (:mod:`.options`), and one module per command
group.

:func:`main` runs ``count``, ``list`` and ``dump`` through :mod:`.fastpath` when it
understands their argv completely — typer's import alone is about half of their start-up
budget — and everything else through typer (:func:`typer_main`). It is the only place that
turns a failure into an exit status and one line on stderr, ``bpfbatch: error: ...``: a
usage error (unknown option, missing argument, a bad option value:
:func:`.options.is_usage_error`) exits 2, any other
:class:`~bpfbatch.errors.BpfBatchError` or a failed write of the output 1, SIGINT, SIGTERM
and SIGHUP 128 + the signal, saying what was done, and a reader that left (EPIPE) 141, as
SIGPIPE would (``diff`` ends a runtime error with 2, as diff(1) does:
:data:`.options.RUNTIME_STATUS`). The signal handling starts before the command is even imported
(:func:`bpfbatch.interrupts.command_started`). Command modules stay thin (check options → call
the library → render), and their bodies are the same functions on either path. Importing
this package imports no typer.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable, Sequence

from ..errors import BpfBatchError, Interrupted, errno_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .app import UsageError

__all__ = ["main", "run_command", "typer_main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point (``argv``: the arguments, default ``sys.argv[1:]``). The
    process's: it owns the signal handling until the process exits. Without ``argv`` it does
    not return: the process ends with the command's status (:func:`_leave`)."""
    args = list(argv) if argv is not None else sys.argv[1:]
    try:
        _run(lambda: _started(args))  # _run's signal handling starts before anything is imported
    except SystemExit as exc:
        if argv is None:
            _leave(exc.code)
        raise
    if argv is None:
        _leave(0)


def _leave(status: object) -> None:
    """End the process with ``status`` now, without the interpreter's own teardown, when that
    teardown has nothing left to do for the command: no ``atexit`` callback is registered, no
    thread but this one is alive, and both standard streams flush. Otherwise return, and the
    interpreter ends as usual.

    Why: the teardown frees every object of every module the command imported — 8-12 ms of
    CPU after ``tc -b`` (its parser's kinds), a tenth of the fixed cost it adds to the
    kernel's own work; less for commands that import less. What it would do for a command
    is done before: files are closed by the commands' ``with`` blocks and the deliveries, and
    the kernel closes the descriptors."""
    import atexit
    import os
    import threading

    if status is None:
        status = 0
    if not isinstance(status, int) or atexit._ncallbacks() or threading.active_count() > 1:
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return  # the interpreter's exit says it, as it would have
    os._exit(status)


def _started(args: list[str], *, fast: bool = True) -> object:
    """A fresh start (the global flags; for :func:`main`, a shell's completion request),
    then the command, by the thin entry point when ``fast`` understands it, else typer."""
    from .argv import reset_global_flags

    reset_global_flags()
    if not fast:
        return _by_typer(args)
    _completion_request()
    return _fast_or_typer(args)


#: The variable a shell's completion script sets (typer's: ``complete_bash``).
COMPLETE_VAR = "_BPFBATCH_COMPLETE"


def _completion_request() -> None:
    """A shell's completion request as typer reads it: click's spelling of the request
    (``bash_complete``, ``zsh_source``) as typer's (``complete_bash``), so scripts written
    for either work; and bpftool's ``MAP`` keyword right after the command (``dump id
    <TAB>``) as the option it stands for, whose values typer then completes (the words
    reach its completion unparsed, without :func:`.argv.bpftool_map_form`) — not where the
    command's arguments are maps in those words (:data:`.argv.MAP_WORD_ARGUMENTS`)."""
    import os

    from .argv import MAP_KEYWORDS, MAP_WORD_ARGUMENTS

    first, _, second = os.environ.get(COMPLETE_VAR, "").partition("_")
    if second in ("complete", "source"):
        first, second = second, first
    elif first not in ("complete", "source"):
        return
    os.environ[COMPLETE_VAR] = f"{first}_{second}"
    for var in ("COMP_WORDS", "_TYPER_COMPLETE_ARGS"):  # bash's; zsh's and fish's
        text = os.environ.get(var)
        if text is None:
            continue
        words = text.split("\n" if "\n" in text else " ")
        command = next((i for i, w in enumerate(words[1:], 1) if w[:1] not in ("-", "")), 0)
        if command and command + 1 < len(words) and words[command + 1] in MAP_KEYWORDS \
                and words[command] not in MAP_WORD_ARGUMENTS:
            words[command + 1] = MAP_KEYWORDS[words[command + 1]]
            os.environ[var] = ("\n" if "\n" in text else " ").join(words)


def typer_main(args: list[str]) -> None:
    """``bpfbatch ARGS`` read by typer: every command, help, completion and usage error.
    Callable in a process that goes on: the signal handlers are put back on return."""
    _run(lambda: _started(args, fast=False), restore=True)


def _fast_or_typer(args: list[str]) -> object:
    from .fastpath import parse

    call = parse(args)  # inside _run: it imports the command's module, which may fail
    return _by_typer(args) if call is None else call()


def _by_typer(args: list[str]) -> object:
    from .app import app
    from .argv import iproute2_form

    args = iproute2_form(args)  # iproute2's spelling: tc -force -b FILE, -n NS, -batch ...

    return _typer_call(lambda: app(args=args, prog_name="bpfbatch", standalone_mode=False))


def run_command(path: Sequence[str], argv: Sequence[str], prog_name: str) -> None:
    """Run the command at ``path`` (``["top", "tcp"]``) as a program of its own named
    ``prog_name`` (``tcptop.py -h`` shows ``Usage: tcptop.py [OPTIONS] ...``)."""
    _run(lambda: _typer_call(lambda: _tool_main(path, argv, prog_name), prog_name), prog_name)


def _tool_main(path: Sequence[str], argv: Sequence[str], prog_name: str) -> object:
    """The click command at ``path`` of the typer app, run on ``argv`` as ``prog_name``."""
    import typer

    from .app import CONTEXT, LazyCommands, app

    group = typer.main.get_group(app)
    ctx = group.make_context("bpfbatch", list(path), resilient_parsing=True)
    command = group
    for name in path:
        command = LazyCommands.get_command(command, ctx, name) if command is group \
            else command.get_command(ctx, name)
    return command.main(args=list(argv), prog_name=prog_name, standalone_mode=False, **CONTEXT)


def _typer_call(call: Callable[[], object], prog: str = "bpfbatch") -> object:
    """``call()``, a typer/click invocation, with its usage errors as :class:`_Said`."""
    from .app import UsageError

    try:
        return call()
    except UsageError as exc:
        raise _usage_error(exc, prog) from None


class _Said(Exception):
    """What ends the command, already worded: ``text`` on stderr, exit ``status``. Said by
    :func:`_run` once the outcome is decided, so no signal can add a line to it."""

    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status, self.text = status, text


def _run(call: Callable[[], object], prog: str = "bpfbatch", *, restore: bool = False) -> None:
    """Run ``call`` and end with its outcome: its status, or one line on stderr and the exit
    status of the exception that ended it. The signal handling
    (:func:`bpfbatch.interrupts.command_started`) starts inside the ``try`` that answers an
    interruption, so no moment is left between the two; ``restore`` puts the previous
    handlers back at the end, for a caller that goes on."""
    from .. import interrupts

    try:
        try:
            interrupts.command_started()
            status = call()
            if sys.stdout is not None:
                sys.stdout.flush()  # here, where a failure is reported, not at the exit
        finally:
            interrupts.decide()  # the first statement: no signal replaces the outcome now
    except BaseException as exc:
        if not isinstance(exc, _Said):  # an error a signal caused is that signal's outcome
            exc = interrupts.interruption_in(exc) or interrupts.swallowed() or exc
        if not isinstance(exc, _ANSWERED):
            raise  # a bug: its traceback
        said = exc if isinstance(exc, _Said) else _answer(exc, prog)
        if said.status == EPIPE_STATUS:  # nothing more can reach the reader: not even at exit
            _silence_stdout()
        print(said.text, file=sys.stderr)
        status = said.status
    finally:
        interrupts.command_ended(restore=restore)
    if status:
        sys.exit(status)


#: What a closed pipe ends a command with: 128 + SIGPIPE, as if it had killed it, and as a
#: shell reports ``cmd | head`` when ``cmd`` dies of SIGPIPE.
EPIPE_STATUS = 128 + 13
#: The exceptions that end a command with a line (:func:`_answer`).
_ANSWERED = (_Said, BpfBatchError, OSError, KeyboardInterrupt, Interrupted)


def _answer(exc: BaseException, prog: str) -> _Said:
    """The line and the exit status that say how ``exc`` ended the command: an interruption
    128 + the signal (SIGPIPE's for a reader that left), a usage error 2, any other error 1."""
    if isinstance(exc, KeyboardInterrupt):  # Python's own handler, before main installed its
        exc = Interrupted(2)
    if isinstance(exc, Interrupted):
        return _Said(exc.exit_status, f"{prog}: {exc}")
    if isinstance(exc, BpfBatchError):
        from .options import as_flags, is_usage_error

        exc = as_flags(exc)
        status = EPIPE_STATUS if exc.errno == errno.EPIPE else 2 if is_usage_error(exc) \
            else _runtime_status()
        return _Said(status, f"{prog}: error: {exc}")
    name = errno_name(exc.errno) if exc.errno else "EIO"  # an OSError writing the output
    where = exc.filename or ("stdout" if exc.errno == errno.EPIPE else "output")
    status = EPIPE_STATUS if exc.errno == errno.EPIPE else _runtime_status()
    return _Said(status, f"{prog}: error: {where}: {exc.strerror or exc} ({name})")


def _runtime_status() -> int:
    """A runtime error's exit status: 1, or what the command said (``diff``: 2)."""
    from .options import RUNTIME_STATUS

    return RUNTIME_STATUS


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null, so the interpreter's flush of what is left in ``sys.stdout``
    as it exits does not fail again with a second message."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _usage_error(exc: UsageError, prog: str) -> _Said:
    """One line, exit 2, naming the command; an extra word where no map was named (a bare
    number, a misspelt keyword) gets bpftool's forms as a hint. No arguments at all prints
    the help instead."""
    from .app import NoArgsIsHelpError
    from .argv import MAP_KEYWORDS

    ctx = exc.ctx
    if isinstance(exc, NoArgsIsHelpError) and ctx is not None:
        return _Said(2, ctx.get_help())
    where = ""
    if ctx is not None and ctx.parent is not None:
        where = ctx.command_path.split(" ", 1)[-1] + ": "
    message = exc.format_message()
    message = message[:1].lower() + message[1:]
    params = ctx.command.params if ctx is not None else []
    unnamed = all(ctx.params.get(name) is None for name in ("map_id", "pinned", "name")) \
        if ctx is not None else False
    if "unexpected extra argument" in message and unnamed \
            and any(p.name == "map_id" for p in params):  # the map named wrong, or not at all
        message += f" (name the map with {', '.join(k + ' ...' for k in MAP_KEYWORDS)})"
    return _Said(2, f"{prog}: error: {where}{' '.join(message.split())}")
