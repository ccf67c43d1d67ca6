"""``bpfbatch tc -b FILE``: an iproute2 ``tc -batch`` file over rtnetlink, many messages per
sendmsg, as a drop-in for ``tc -b``: the same kernel state, the same messages on stderr (the
kernel's errors and warnings, ``Command failed FILE:LINE``) and the same exit status — 0, 1
when a command failed, 255 when a line is one tc's parser exits on. iproute2's single-dash
spellings (``-force``, ``-batch``, ``-netns``, ``-json``, any prefix tc accepts) work too."""

from __future__ import annotations

import contextlib
import sys

import typer

from ..errors import InputError, Interrupted
from ..interrupts import raised_as_interrupted
from . import complete
from .app import usage_error

commands = typer.Typer()

#: Exit status of ``tc -b`` when a line fails (a line its parser exits on gives the status tc
#: exits with there: the report's ``fatal_status``, 255 from ``usage()``/``invarg()``).
EXIT_FAILED = 1
#: iproute2's single-dash options (``matches()``: any prefix) → this command's spelling.
_IPROUTE2_OPTIONS = (("-force", "--force"), ("-batch", "--batch"), ("-netns", "--netns"),
                     ("-json", "--json"))


def iproute2_argv(argv: list[str]) -> list[str]:
    """``tc``'s spelling of this command's options (``-force``, ``-ba``, ``-netns``) rewritten
    to the double-dash form; everything else unchanged."""
    out = []
    for arg in argv:
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
            arg = next((long for short, long in _IPROUTE2_OPTIONS if short.startswith(arg)), arg)
        out.append(arg)
    return out


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


tc = typer.Typer(invoke_without_command=True,
                 context_settings={"help_option_names": ["-h", "--help"]})
commands.add_typer(tc, name="tc")


@tc.callback()
def tc_batch(
    ctx: typer.Context,
    batch: str = typer.Option(None, "-b", "--batch", metavar="FILE",
                              help="tc batch file (iproute2 `tc -batch` syntax); '-' reads stdin."),
    force: bool = typer.Option(False, "-f", "--force",
                               help="Keep going after a failed command (exit status stays 1)."),
    netns: str = typer.Option(None, "-n", "--netns", metavar="NAME",
                              autocompletion=complete.netns_names,
                              help="Network namespace (`ip netns` name) to configure."),
    json_: bool = typer.Option(False, "-j", "--json",
                               help="Listings of read-only lines (filter show, actions list, ...) as JSON, as tc -j."),
    batch_bytes: int = typer.Option(None, "--batch-bytes", metavar="N", min=1024,
                                    help="Bytes per sendmsg (default 256 KiB; capped by the "
                                         "socket's send limit)."),
    coalesce: bool = typer.Option(False, "--coalesce",
                                  help="Pack consecutive `actions add` lines into shared "
                                       "messages, up to 32 actions each."),
) -> None:
    """Send a tc batch file: the kernel ends as `tc -b` leaves it, many messages per sendmsg.
    `tc apply FILE` brings devices to the state FILE describes; `tc dump` prints one."""
    if ctx.invoked_subcommand is not None:
        return
    if batch is None:
        raise usage_error("Missing option '-b' / '--batch' (or a command: apply, dump).")
    with raised_as_interrupted():  # SIGINT/SIGTERM/SIGHUP: one line saying what was applied
        done = []  # the report, once the send returned it
        try:
            _send(batch, force, netns, batch_bytes, coalesce, json_, done)
        except Interrupted as exc:
            if not exc.message:  # outside the send: before it began, or once it was done
                exc.obj = batch
                exc.message = f"after {done[0].summary()}" if done else "before any line was sent"
            raise
    report = done[0]
    if report.fatal:
        raise typer.Exit(report.fatal_status)
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)


def _send(batch: str, force: bool, netns: str | None, batch_bytes: int | None, coalesce: bool,
          json_: bool, done: list) -> None:
    """Open the file and the session, send, append the report to ``done`` (kept when a signal
    lands while the session closes)."""
    from ..tc import DEFAULT_BATCH_BYTES, Session
    from ..tc.listing import tc_printer

    with _opened(batch) as (lines, name), Session(
            netns=netns, force=force, coalesce=coalesce, on_failure=_print_failure, on_warning=_print_warning,
                                  on_listing=tc_printer(netns, json=json_), on_said=_print_said,
                                  batch_bytes=batch_bytes or DEFAULT_BATCH_BYTES) as session:
        done.append(session.send_batch(lines, name))


Devices = typer.Option(None, "--dev", metavar="DEV", autocompletion=complete.devices,
                       help="A device whose state FILE describes (repeatable; default: the "
                            "devices FILE names).")
DumpDevices = typer.Option(..., "--dev", metavar="DEV", autocompletion=complete.devices,
                           help="A device to dump (repeatable).")
Netns = typer.Option(None, "-n", "--netns", metavar="NAME", autocompletion=complete.netns_names,
                     help="Network namespace (`ip netns` name).")


@tc.command("apply")
def tc_apply(
    batch: str = typer.Argument(..., metavar="FILE",
                                help="The desired state: a tc batch file of adds; '-' reads stdin."),
    dev: list[str] = Devices,
    plan: bool = typer.Option(False, "--plan", help="Print the lines it would send, as tc -b "
                                                    "lines, and send nothing."),
    netns: str = Netns,
    force: bool = typer.Option(False, "-f", "--force",
                               help="Keep going after a failed line (exit status 1)."),
) -> None:
    """Bring devices to the state FILE describes, sending only the difference: deletes,
    in-place changes, adds. Unchanged qdiscs, classes, filters and actions are not touched."""
    with raised_as_interrupted():
        done: list = []
        try:
            from ..tc.apply import plan_for, send_plan  # a signal while importing: nothing sent

            with _opened(batch) as (lines, name):
                difference, _live = plan_for(lines, name, netns, dev or [])
            if plan:
                sys.stdout.write("".join(line + "\n" for line in difference.lines))
                return
            done.append(send_plan(difference, netns, force=force, source=f"{name} (plan)"))
        except Interrupted as exc:
            if not exc.message:
                exc.obj = batch
                exc.message = f"after {done[0].summary()}" if done else "before any line was sent"
            raise
    report = done[0]
    if not report.ok:
        raise InputError(f"apply {report.summary()}", obj=batch) if report.first_failure.errno \
            is None else _apply_failed(report, batch)
    from .options import say

    say(f"{batch}: {report.applied} lines sent, {difference.unchanged} objects unchanged")


def _apply_failed(report, batch: str):
    """One line: what was applied, where it stopped, the kernel's reason and errno."""
    from ..errors import BpfBatchError

    return BpfBatchError(f"apply: {report.summary()}", obj=batch, errno=report.first_failure.errno)


@tc.command("dump")
def tc_dump(
    dev: list[str] = DumpDevices,
    netns: str = Netns,
) -> None:
    """Print the live state of devices (qdiscs, classes, filters) and the namespace's
    standalone actions as a batch file that `tc -b` and `tc apply` accept and that gives
    the same state back."""
    from ..tc.apply import dump_lines

    with raised_as_interrupted():
        lines = dump_lines(netns, dev)
    sys.stdout.write("".join(line + "\n" for line in lines))


@contextlib.contextmanager
def _opened(batch: str):
    """(lines, name) of the batch file, or stdin for '-'."""
    if batch == "-":
        yield sys.stdin, "-"
        return
    try:
        stream = open(batch, encoding="utf-8", errors="surrogateescape")
    except OSError as exc:
        raise InputError(f"cannot open batch file: {exc.strerror}", obj=batch,
                         errno=exc.errno) from None
    with stream:
        yield stream, batch
