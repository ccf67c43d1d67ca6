"""``bpfbatch tc -b FILE``, the batch form of ``bpfbatch tc``, declared as data (no typer).

iproute2 runs ``tc -b`` by the thousand from scripts, and the test suite compares it with ``tc
-b`` line for line in fresh namespaces, so its start-up counts: declared here, the thin entry
point (:mod:`.fastpath`) parses it without importing typer (~25 ms of CPU time a start), and
the typer group in :mod:`.tc` (with ``tc apply`` and ``tc dump``, help and completion) builds
its callback from the same declaration and calls the same body.

A drop-in for ``tc -b``: the same kernel state, the same messages on stderr (the kernel's
errors and warnings, ``Command failed FILE:LINE``) and the same exit status — 0, 1 when a
command failed, 255 when a line is one tc's parser exits on."""

from __future__ import annotations

import contextlib
import os
import sys

from ..errors import InputError, Interrupted
from ..interrupts import raised_as_interrupted
from ..tc.netns import path_of as netns_path
from .options import REQUIRED, Commands, Option

commands = Commands()

#: Exit status of ``tc -b`` when a line fails (a line its parser exits on gives the status tc
#: exits with there: the report's ``fatal_status``, 255 from ``usage()``/``invarg()``).
EXIT_FAILED = 1
#: tc's status when ``-n NAME`` cannot be entered (``netns_switch()`` failed: ``return -1``).
EXIT_NO_NETNS = 255


@commands.command(
    "tc",
    # REQUIRED for the thin entry point only: without it, typer reads the line (a subcommand,
    # or the callback's usage error).
    Option("batch", "-b", "--batch", default=REQUIRED, metavar="FILE",
           help="tc batch file (iproute2 `tc -batch` syntax); '-' reads stdin."),
    Option("force", "-f", "--force", kind=bool, default=False,
           help="Keep going after a failed command (exit status stays 1)."),
    Option("netns", "-n", "--netns", metavar="NAME", complete="netns_names",
           help="Network namespace (`ip netns` name) to configure."),
    Option("json_", "-j", "--json", kind=bool, default=False,
           help="Listings of read-only lines (filter show, actions list, ...) as JSON, as tc -j."),
    Option("batch_bytes", "--batch-bytes", kind=int, metavar="N", minimum=1024,
           help="Bytes per sendmsg (default 256 KiB; capped by the socket's send limit). The "
                "first is 8 KiB at most, each next one twice the last up to this."),
    Option("coalesce", "--coalesce", kind=bool, default=False,
           help="Pack consecutive `actions add` lines into shared messages, up to 32 actions "
                "each."),
)
def tc_batch(batch: str, force: bool, netns: str | None, json_: bool, batch_bytes: int | None,
             coalesce: bool) -> int:
    """Send a tc batch file: the kernel ends as `tc -b` leaves it, many messages per sendmsg.
    Returns the exit status: 0, :data:`EXIT_FAILED`, or the status tc's parser exits with."""
    with raised_as_interrupted():  # SIGINT/SIGTERM/SIGHUP: one line saying what was applied
        # What tc says and exits with before it reads a line: the netns first (tc enters it
        # while reading its options), then the file.
        if netns is not None and not _netns_opens(netns):
            return EXIT_NO_NETNS
        lines = _batch_file(batch)
        if lines is None:
            return EXIT_FAILED
        done = []  # the report, once the send returned it
        try:
            _send(lines, batch, force, netns, batch_bytes, coalesce, json_, done)
        except Interrupted as exc:
            if not exc.message:  # outside the send: before it began, or once it was done
                exc.obj = batch
                exc.message = f"after {done[0].summary()}" if done else "before any line was sent"
            raise
    report = done[0]
    if report.fatal:
        return report.fatal_status
    return 0 if report.ok else EXIT_FAILED


def _send(lines, batch: str, force: bool, netns: str | None, batch_bytes: int | None,
          coalesce: bool, json_: bool, done: list) -> None:
    """Open the session, send the file's ``lines`` (:func:`_batch_file`, closed after), append
    the report to ``done`` (kept when a signal lands while the session closes)."""
    from ..tc import DEFAULT_BATCH_BYTES, Session
    from ..tc.listing import tc_printer

    with lines as stream, Session(
            netns=netns, force=force, coalesce=coalesce, on_failure=_print_failure,
            on_warning=_print_warning, on_listing=tc_printer(netns, json=json_),
            on_said=_print_said, batch_bytes=batch_bytes or DEFAULT_BATCH_BYTES) as session:
        done.append(session.send_batch(stream, batch))


def _kernel_text(text: str) -> str:
    """iproute2's ``nl_dump_ext_ack``: the kernel's text with a closing period."""
    return text if text.endswith(".") else text + "."


def _print_failure(failure) -> None:
    """As tc prints it: the reason, tc's follow-up line, then ``Command failed FILE:LINE``
    (not after a line tc's parser exits on: tc prints nothing more)."""
    from ..tc import specs as S

    if failure.said:  # a listing line tc ran: it printed its reason itself
        pass
    elif failure.extack:
        print(f"Error: {_kernel_text(failure.extack)}", file=sys.stderr)
    elif failure.errno is not None:
        print(f"RTNETLINK answers: {failure.text}", file=sys.stderr)
    else:
        print(failure.text, file=sys.stderr)
    if failure.msg_type in (S.Msg.NEWTFILTER, S.Msg.DELTFILTER, S.Msg.NEWACTION, S.Msg.DELACTION):
        print("We have an error talking to the kernel", file=sys.stderr)
    if failure.msg_type == S.Msg.DELACTION:
        print('Command "action" is unknown, try "tc actions help".', file=sys.stderr)
    if not failure.fatal:
        print(f"Command failed {failure.where}", file=sys.stderr)


def _print_warning(_line: int, text: str) -> None:
    print(f"Warning: {_kernel_text(text)}", file=sys.stderr)


def _print_said(text: str) -> None:
    """What tc prints on stderr while parsing a line (its lines, newline-ended)."""
    sys.stderr.write(text)


def _netns_opens(netns: str) -> bool:
    """Whether netns ``netns`` can be opened; if not, tc's line saying so."""
    try:
        os.close(os.open(netns_path(netns), os.O_RDONLY | os.O_CLOEXEC))
    except OSError as exc:
        _cannot_open("network namespace", netns, exc)
        return False
    return True


def _batch_file(batch: str):
    """:func:`batch_file` as tc reads it: a directory as an empty file (tc opens it and its
    first read fails, EISDIR: no line, exit 0); ``None`` once tc's line said why it cannot be
    opened."""
    if os.path.isdir(batch):
        return contextlib.nullcontext(iter(()))
    try:
        return batch_file(batch)
    except OSError as exc:
        _cannot_open("file", batch, exc, " for reading")
        return None


def batch_file(batch: str):
    """The batch file to read, a context manager of its lines (stdin for '-', left open);
    OSError when it cannot be opened, which each command says in its own words."""
    if batch == "-":
        return contextlib.nullcontext(sys.stdin)
    return open(batch, encoding="utf-8", errors="surrogateescape")


@contextlib.contextmanager
def opened(batch: str):
    """(lines, name) of the batch file, or stdin for '-'; one line naming the file when it
    cannot be opened (``tc apply``'s words: it is no drop-in for a tc command)."""
    try:
        lines = batch_file(batch)
    except OSError as exc:
        raise InputError(f"cannot open batch file: {exc.strerror}", obj=batch,
                         errno=exc.errno) from None
    with lines as stream:
        yield stream, batch


def _cannot_open(what: str, name: str, exc: OSError, purpose: str = "") -> None:
    """tc's line: ``Cannot open file "rules.tc" for reading: No such file or directory``."""
    print(f'Cannot open {what} "{name}"{purpose}: {exc.strerror}', file=sys.stderr)
