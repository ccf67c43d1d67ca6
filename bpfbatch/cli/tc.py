"""``bpfbatch tc``: the typer group of ``tc -b FILE`` (declared and run by :mod:`.tcbatch`,
which the thin entry point also reads), ``tc apply FILE`` and ``tc dump``. iproute2's
single-dash spellings (``-force``, ``-batch``, ``-netns``, ``-json``, any prefix tc accepts)
work too (:func:`.argv.iproute2_argv`)."""

from __future__ import annotations

import sys

import typer

from ..errors import InputError, Interrupted
from ..interrupts import raised_as_interrupted
from . import complete
from .app import usage_error
from .tcbatch import commands as batch_commands
from .tcbatch import opened
from .typed import group_callback

commands = typer.Typer()

tc = typer.Typer(invoke_without_command=True,
                 context_settings={"help_option_names": ["-h", "--help"]})
commands.add_typer(tc, name="tc")


def _tc_batch(ctx: typer.Context, **values) -> None:
    """Send a tc batch file: the kernel ends as `tc -b` leaves it, many messages per sendmsg.
    `tc apply FILE` brings devices to the state FILE describes; `tc dump` prints one."""
    if ctx.invoked_subcommand is not None:
        return
    if values["batch"] is None:
        raise usage_error("Missing option '-b' / '--batch' (or a command: apply, dump).")
    status = batch_commands["tc"].body(**values)
    if status:
        raise typer.Exit(status)


tc.callback()(group_callback(batch_commands["tc"], _tc_batch))


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

            with opened(batch) as (lines, name):
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
