"""Map exec and pruning: ``exec``, ``prune``, ``prune-demo``.

Thin: open the map, compile the predicate, call :mod:`bpfbatch.exec.walker` / :mod:`bpfbatch.exec.prune`,
render. Records go to stdout; summaries and per-round reports go to stderr.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import BpfBatchError, InputError, Interrupted
from ..interrupts import TERMINATING
from .progress import counted, progress
from .options import DEFAULT_BATCH, OUTPUT_FORMATS, check_output, open_map, say
from . import complete
from .typed import BatchSize, Decode, MapId, Name, Pinned

commands = typer.Typer()

Mode = Annotated[str, typer.Option("--mode", autocompletion=complete.modes,
                                   help="auto (kernel when it runs here), kernel (the "
                                   "program selects; each key is taken atomically with its "
                                   "value, re-checked, put back if refreshed), kernel-fast "
                                   "(the program deletes and puts back what was written in "
                                   "place meanwhile: faster, may lose an update replacing an "
                                   "element at that instant) or user.")]



def _summary(label: str, r) -> str:
    """One line of what an exec did (``r``: :class:`bpfbatch.exec.walker.ExecResult`)."""
    did = {"count": "matched", "dump": "dumped", "delete": "deleted"}[r.action]
    n = r.deleted if r.action == "delete" else r.selected
    kept = f", {r.kept} refreshed and kept" if r.kept else ""
    kept += f", {r.superseded} re-created by a writer" if r.superseded else ""
    return (f"{label}: {n} of {r.visited} elements {did}{kept} in {r.seconds * 1e3:.1f} ms "
            f"({r.mode}, {r.passes} pass{'es' if r.passes != 1 else ''})")


@commands.command("exec")
def exec_command(
    where: Annotated[Optional[str], typer.Option("--where", help="Predicate over the value's "
                     "fields, e.g. 'last_seen_ns < now - 30s and packets > 10'.")] = None,
    map_id: MapId = None, pinned: Pinned = None, name: Name = None,
    filter_obj: Annotated[Optional[Path], typer.Option(
        "--filter-obj", help="Your own filter instead of --where: a BPF object built on "
                             "bpfbatch_filter.h (kernel mode only).")] = None,
    filter_prog: Annotated[Optional[str], typer.Option(
        "--filter-prog", help="The filter's program in --filter-obj (the name given to "
                              "BPFBATCH_FILTER_PROGRAM).")] = None,
    action: Annotated[str, typer.Option("--action", help="count, dump or delete.",
                                        autocompletion=complete.actions)] = "count",
    mode: Mode = "auto",
    output: Annotated[Optional[str], typer.Option(
        "-o", "--output", autocompletion=complete.output_formats, help="Records format (" + OUTPUT_FORMATS + "); dump "
                               "defaults to json, delete prints records only when given.")] = None,
    max_selected: Annotated[int, typer.Option("--max", help="Stop after N selected "
                                              "(0: no limit).")] = 0,
    fsync: Annotated[bool, typer.Option(
        "--fsync", help="With --action delete -o: deleted records count as delivered only "
                        "once on disk.")] = False,
    decode: Decode = None,
    batch_size: BatchSize = DEFAULT_BATCH,
) -> None:
    """Run a predicate over every element of a map, in the kernel or emulated in user space,
    and count, dump or delete what it selects.

    Fields are the value's BTF fields (nested with dots) or, prefixed with key., the key's,
    compared as the output shows them (--decode, and __be16/__be32 fields decoded by
    default: dport == 443, saddr == 10.0.0.1); operands are integers, enumerators, display
    values or now - DURATION (CLOCK_MONOTONIC ns; units ns us ms s m h); comparisons
    are joined by and/or, with parentheses. Per-CPU maps compare each field's largest per-CPU
    value.

    Instead of --where, --filter-obj and --filter-prog run your own filter, written in C
    against the contract in bpfbatch_filter.h (installed next to bpfbatch's BPF objects).
    """
    from .. import interrupts
    from ..exec import walker
    from ..map import whole
    from ..formats import pipeline

    user_filter = _user_filter(where, filter_obj, filter_prog, mode)
    if output is not None:
        check_output(output)  # before anything is deleted
    if action not in walker.ACTIONS:
        raise InputError(f"unknown action '{action}' (use {', '.join(walker.ACTIONS)})",
                         obj="--action")
    if action == "dump" and output is None:
        output = "json"
    out = delivery = None
    with interrupts.stopping(lambda: _done(action, output, out, delivery)), \
            open_map(map_id, pinned, name, read_only=action != "delete") as m:
        predicate = walker.compile_for(m, where, decode or []) if user_filter is None else None
        # deleted records: delivered or put back; dumped ones: just written
        if output is not None and action == "delete":
            out = delivery = pipeline.delivery(output, m.info, whole.restorer(m),
                                               pipeline.stdout(fsync=fsync), decode=decode or [])
            write = delivery.take
        elif output is not None and action == "dump":
            out = pipeline.Output(output, m.info, pipeline.stdout(), decode=decode or [])
            write = out.write
        else:
            write = None
        with progress(f"{m.info.label} {action}", "selected") as advance:
            sink = counted(write, advance) if write else None
            try:
                if user_filter is None:
                    result = walker.exec_map(m, predicate, action, mode=mode, sink=sink,
                                             max_selected=max_selected, batch_size=batch_size)
                else:
                    result = walker.exec_filter(m, user_filter, action, sink=sink,
                                                max_selected=max_selected,
                                                batch_size=batch_size)
            except Interrupted as exc:
                exc.obj = m.info.label
                # as dump and drain: a whole document (JSON's "]", Arrow's end of stream) of
                # the records written or delivered; a second signal meanwhile changes
                # nothing of what the first one stopped
                if out is not None:
                    with contextlib.suppress(BpfBatchError, Interrupted):
                        out.close()
                raise
        if out is not None:
            out.close()
        if action == "count":
            print(result.selected)
        say(_summary(m.info.label, result))


def _done(action: str, output: str | None, out, delivery) -> str:
    """What an interrupted exec says it did: the records it output, when it outputs them."""
    if action == "dump":
        return f"{out.written if out else 0} records written"
    if output is not None:
        return f"{delivery.delivered if delivery else 0} entries delivered"
    return f"a {action} it did not finish"


def _user_filter(where: str | None, filter_obj: Path | None, filter_prog: str | None,
                 mode: str):
    """The :class:`~bpfbatch.exec.walker.Filter` the options name, ``None`` for --where; refuses
    every other combination."""
    from ..exec.walker import MODES, Filter

    if filter_obj is None and filter_prog is None:
        if where is None:
            raise InputError("give a predicate, or --filter-obj and --filter-prog",
                             obj="--where")
        return None
    if where is not None:
        raise InputError("cannot be combined with --where", obj="--filter-obj")
    if filter_obj is None:
        raise InputError("needs --filter-obj, the object file holding it", obj="--filter-prog")
    if filter_prog is None:
        raise InputError("needs --filter-prog, the program to run", obj="--filter-obj")
    if mode not in MODES:
        raise InputError(f"unknown mode '{mode}' (use {', '.join(MODES)})", obj="--mode")
    if mode == "user":
        raise InputError("a filter object runs in the kernel only", obj="--mode")
    return Filter(filter_obj, filter_prog)


class _Stop(threading.Event):
    """Set by the first SIGINT, SIGTERM or SIGHUP, which :attr:`signum` keeps."""

    signum: int | None = None

    def interrupted(self, done: str, obj: str) -> None:
        """Raise :class:`~bpfbatch.errors.Interrupted` saying ``done`` if a signal set it."""
        if self.signum is not None:
            raise Interrupted(self.signum, obj=obj, message=f"after {done}")


@contextlib.contextmanager
def _stop_on_signals():
    """A :class:`_Stop` set by a signal for the duration of the block (then the old
    handlers): the round in hand finishes, then the command says what it did."""
    stop = _Stop()

    def note(signum, _frame):
        stop.signum = stop.signum or signum
        stop.set()

    previous = {sig: signal.signal(sig, note) for sig in TERMINATING}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@commands.command("prune")
def prune_command(
    field: Annotated[str, typer.Option("--field", help="Timestamp field (ns, CLOCK_MONOTONIC "
                                       "as bpf_ktime_get_ns), e.g. last_seen_ns.")],
    older_than: Annotated[str, typer.Option("--older-than", help="Delete elements whose "
                                            "field is older than this, e.g. 30s.")],
    map_id: MapId = None, pinned: Pinned = None, name: Name = None,
    every: Annotated[Optional[str], typer.Option("--every", help="Prune again every DURATION "
                                                 "until SIGINT/SIGTERM.")] = None,
    where: Annotated[Optional[str], typer.Option("--where",
                                                 help="Extra condition, and-ed.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count, delete nothing.")] = False,
    max_deleted: Annotated[int, typer.Option("--max", help="Delete at most N per round "
                                             "(0: no limit).")] = 0,
    mode: Mode = "auto",
) -> None:
    """Delete flow-table elements idle for longer than --older-than, once or every --every.

    Each round prints what it deleted and how long it took; per-CPU maps go by the newest
    timestamp across CPUs.
    """
    from ..exec import prune
    from ..exec.predicate import parse_duration

    older_ns = parse_duration(older_than, "--older-than")
    every_ns = parse_duration(every, "--every") if every is not None else None
    if max_deleted < 0:
        raise InputError(f"must not be negative, got {max_deleted}", obj="--max")
    verb = "would delete" if dry_run else "deleted"
    rounds = total = 0
    with _stop_on_signals() as stop, open_map(map_id, pinned, name, read_only=dry_run) as m:
        predicate = prune.prune_predicate(m, field, older_ns, where)
        for r in prune.prune_rounds(m, predicate, every_ns=every_ns, max_deleted=max_deleted,
                                    dry_run=dry_run, mode=mode, stop=stop):
            res = r.result
            n = res.selected if dry_run else res.deleted
            rounds, total = r.number, total + n
            say(f"round {r.number}: {verb} {n} of {res.visited}, {res.kept} refreshed and "
                f"kept, {res.superseded} superseded in {res.seconds * 1e3:.1f} ms "
                f"({res.mode})")
        stop.interrupted(f"{rounds} round{'s' if rounds != 1 else ''}: {verb} {total}",
                         m.info.label)


@commands.command("prune-demo")
def prune_demo(
    flows: Annotated[int, typer.Option("--flows", help="UDP flows to open.")] = 2000,
    active: Annotated[int, typer.Option("--active", help="Flows that keep sending.")] = 200,
    older_than: Annotated[str, typer.Option("--older-than")] = "2s",
    rounds: Annotated[int, typer.Option("--rounds", help="Prune rounds, one a second.")] = 5,
    mode: Mode = "auto",
) -> None:
    """A real flow table kept trimmed: a tc program records UDP flows on a veth pair between
    two throwaway network namespaces; every flow sends once, --active of them keep sending
    (every 100 ms), and a prune round each second deletes the idle ones. Needs root; removes
    everything on exit."""
    from ..exec import prune, walker
    from ..exec.predicate import EVERY_ELEMENT, parse_duration
    from ..labs.flowtable import FlowTableLab

    if not 0 <= active <= flows or flows <= 0 or rounds <= 0:
        raise InputError("need 0 <= --active <= --flows, --flows > 0 and --rounds > 0",
                         obj="--flows")
    older_ns = parse_duration(older_than, "--older-than")
    if older_ns <= 2 * _DEMO_TRAFFIC_NS:
        raise InputError(f"must be longer than {2 * _DEMO_TRAFFIC_NS // 10**6} ms (twice the "
                         f"active flows' send interval)", obj="--older-than")
    with FlowTableLab() as lab, _stop_on_signals() as stop:
        table = lab.table
        opened = lab.open_flows(flows)
        opened.send()
        keep_sending = threading.Thread(target=_send_until, daemon=True,
                                        args=(opened, opened.sockets[:active], stop))
        keep_sending.start()
        say(f"{table.info.label}: LRU hash on {lab.receiver}'s ingress; {flows} flows sent "
             f"once, {active} keep sending; pruning last_seen_ns older than {older_than}")
        predicate = prune.prune_predicate(table, "last_seen_ns", older_ns)
        r = None
        try:
            for r in prune.prune_rounds(table, predicate, every_ns=10**9, mode=mode, stop=stop):
                held = walker.exec_map(table, EVERY_ELEMENT, "count", mode="user").selected
                say(f"round {r.number}: deleted {r.result.deleted} in "
                     f"{r.result.seconds * 1e3:.1f} ms ({r.result.mode}); {held} flows left")
                if r.number >= rounds:
                    stop.set()
        finally:
            stop.set()
            keep_sending.join()
    stop.interrupted(f"{r.number if r else 0} rounds", "prune-demo")


_DEMO_TRAFFIC_NS = 100 * 10**6


def _send_until(opened, sockets, stop: threading.Event) -> None:
    while not stop.wait(_DEMO_TRAFFIC_NS / 1e9):
        opened.send(sockets)
