"""``bpfbatch top tcp`` and ``bpfbatch top slab``: bcc's tcptop and slabratetop, same flags
and columns, read out loss-free every interval (see :mod:`bpfbatch.top.intervals`);
``bpfbatch top maps``: ``list --count`` refreshed (:mod:`bpfbatch.top.maps`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Optional

import typer

from .. import interrupts
from ..errors import InputError
from ..top import screen
from . import complete

commands = typer.Typer()

top = typer.Typer(help="bcc-style top tools over batched, loss-free interval read-outs.",
                  no_args_is_help=True, context_settings={"help_option_names": ["-h", "--help"]})
commands.add_typer(top, name="top")

Interval = Annotated[float, typer.Argument(help="Output interval, in seconds.")]
Count = Annotated[Optional[int], typer.Argument(help="Number of outputs (default: until Ctrl-C).")]
NoClear = Annotated[bool, typer.Option("-C", "--noclear", help="Don't clear the screen.")]
MaxRows = Annotated[int, typer.Option("-r", "--maxrows", help="Maximum rows per table.")]
Pid = Annotated[Optional[int], typer.Option("-p", "--pid", help="Trace this PID only.")]


def _check(interval: float, count: int | None, rows: int) -> None:
    if interval <= 0:
        raise InputError(f"must be positive, got {interval:g}", obj="INTERVAL")
    if count is not None and count <= 0:
        raise InputError(f"must be positive, got {count}", obj="COUNT")
    if rows <= 0:
        raise InputError(f"must be positive, got {rows}", obj="-r/--maxrows")


def _every_interval(interval: float, count: int | None, *, name: str, sample: Callable,
                    lines: Callable, lost: Callable, noclear: bool, summary: bool) -> None:
    """Every ``interval`` seconds (:func:`screen.ticks`), take a ``sample()`` and print the
    screen header and ``lines(sample)``, whole with the signals held back; an interval that
    lost events adds one stderr line, ``lost(sample)`` saying what (only this interval's
    losses, so a past overflow is not repeated every interval). A signal ends the command
    after the partial interval, saying how many were shown, with 128 + the signal."""
    shown = 0
    clear = not noclear and sys.stdout.isatty()  # as top maps: no escape codes into a file
    with interrupts.stopping(lambda: f"{shown} interval{'s' if shown != 1 else ''}"):
        for _ in screen.ticks(interval, count):
            with interrupts.deferred():
                taken = sample()
                sys.stdout.write(screen.CLEAR if clear else "\n")
                if summary:
                    print(screen.loadavg_line())
                for line in lines(taken):
                    print(line)
                sys.stdout.flush()
                if taken.dropped_events:
                    print(f"{name}: {taken.dropped_events} events not counted in this "
                          f"interval: {lost(taken)}", file=sys.stderr)
                shown += 1


@top.command("tcp")
def tcp(
    interval: Interval = 1.0,
    count: Count = None,
    noclear: NoClear = False,
    nosummary: Annotated[bool, typer.Option("-S", "--nosummary",
                                            help="Skip the system summary line.")] = False,
    pid: Pid = None,
    ipv4: Annotated[bool, typer.Option("-4", "--ipv4", help="Trace IPv4 only.")] = False,
    ipv6: Annotated[bool, typer.Option("-6", "--ipv6", help="Trace IPv6 only.")] = False,
    rows: MaxRows = 20,
    sort: Annotated[str, typer.Option("-s", "--sort", help="Sort by all, sent or received.")] = "all",
) -> None:
    """Summarize TCP send/recv throughput by process and flow (bcc's tcptop)."""
    _check(interval, count, rows)
    if ipv4 and ipv6:
        raise InputError("-4 and -6 are mutually exclusive", obj="-4/-6")
    from ..top import tcptop

    screen.check_choice(sort, tcptop.SORT_KEYS, "-s/--sort")
    family = 4 if ipv4 else 6 if ipv6 else None
    with tcptop.TcpTop(pid=pid, family=family) as tool:
        _every_interval(
            interval, count, name="tcptop", sample=tool.sample,
            lines=lambda sample: tcptop.report(sample, sort=sort, rows=rows),
            lost=lambda sample: f"flow map full or program skipped ({sample.dropped_bytes} "
                                "bytes known)",
            noclear=noclear, summary=not nosummary)


@top.command("slab")
def slab(
    interval: Interval = 1.0,
    count: Count = None,
    noclear: NoClear = False,
    pid: Pid = None,
    rows: MaxRows = 20,
    sort: Annotated[str, typer.Option("-s", "--sort", help="Sort by name, count or size.")] = "size",
) -> None:
    """Kernel slab allocation rate by cache (bcc's slabratetop).

    kmalloc() allocations show per size class (kmalloc-64, kmalloc-1k, ...): the kernel does
    not say which of the kmalloc caches of that size served them.
    """
    _check(interval, count, rows)
    from ..top import slabratetop

    screen.check_choice(sort, slabratetop.SORT_KEYS, "-s/--sort")
    with slabratetop.SlabRateTop(pid=pid) as tool:
        _every_interval(
            interval, count, name="slabratetop", sample=tool.sample,
            lines=lambda sample: slabratetop.table(sample.caches, sort=sort, rows=rows),
            lost=lambda sample: "cache map full or program skipped",
            noclear=noclear, summary=True)


@top.command("maps")
def maps(
    interval: Interval = 1.0,
    count: Count = None,
    noclear: NoClear = False,
    rows: MaxRows = 20,
    budget: Annotated[Optional[str], typer.Option(
        "--budget", metavar="DURATION",
        help="Stop each refresh's counting after DURATION (default: half the interval); a "
             "map not counted by then shows '-' and why.")] = None,
    match: Annotated[Optional[str], typer.Option(
        "--match", help="Only maps whose name matches this shell pattern (flow*).")] = None,
    map_type: Annotated[Optional[str], typer.Option(
        "--type", help="Only maps of this type (hash, lru_hash, ... as listed).",
        autocompletion=complete.map_types)] = None,
) -> None:
    """Every map's fill, refreshed: list --count every interval, fullest first, with +/s,
    the net change of its entries per second since the previous refresh.

    +/s is the difference of two counts: adds and deletes (or LRU evictions) that balance
    between two refreshes show 0, and a map not counted at both shows '-'. On a terminal
    the screen is cleared before each refresh (not with -C, nor into a pipe).
    SIGINT, SIGTERM or SIGHUP stop it with one line saying how many refreshes were printed,
    exit 128 + the signal number.
    """
    from .. import interrupts
    from ..exec.predicate import parse_duration
    from ..top.maps import MapsTop, table
    from . import options

    _check(interval, count, rows)
    budget_s = interval / 2 if budget is None else parse_duration(budget, "--budget") / 1e9
    tool = MapsTop(budget_s, options.map_selector(map_type, match))
    clear = not noclear and sys.stdout.isatty()
    shown = interrupts.Tally()
    with interrupts.stopping(lambda: f"{shown.applied} refreshes printed"):
        for _ in screen.ticks(interval, count):
            refresh = tool.refresh()
            text = (screen.CLEAR if clear else "\n") + screen.loadavg_line() \
                + table(refresh, rows) + "\n"
            with interrupts.deferred():  # a refresh is printed whole or not at all
                sys.stdout.write(text)
                sys.stdout.flush()
                shown.add(1)


def run_as_tool(command: str) -> None:
    """Entry point of the bcc-named executables in ``tools/``: ``tcptop.py ARGS`` runs
    ``bpfbatch top tcp ARGS`` under the tool's own name."""
    import os

    from . import run_command

    run_command(["top", command], sys.argv[1:], os.path.basename(sys.argv[0]))
