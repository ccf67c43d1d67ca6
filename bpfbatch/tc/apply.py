"""``tc apply`` and ``tc dump``: read a desired state and the live one, plan the difference
(:mod:`.plan`), send it through a :class:`~.session.Session`; or write the live state as a
batch file that gives it back (:mod:`.render`, every line checked by encoding it again).

The plan's phases go through one session: the deletes, then — only when deleted filters held
actions that are to be deleted — a wait until the kernel has released them (it does so after
an RCU grace period), the action deletes, and the changes and adds. Lines are numbered across
the phases as ``--plan`` prints them, so a report's "up to line N" names a printed line. The
file's own adds are sent as the reader encoded them while planning (a first apply costs what
``tc -b`` of the file costs, not that twice); only changes and replaces are encoded anew.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from ..errors import BpfBatchError, InputError, Interrupted
from ..interrupts import deferred
from . import render
from .grammar import read_commands
from .netns import entered
from .plan import Plan, difference
from .release import RELEASE_TIMEOUT
from .resolve import Resolver
from .sender import Report
from .session import BatchInterrupted, Session
from .state import ROOT, Dumper, Live, TcObject, desired, read_live
from .templates import TemplateReader


def read_desired(lines: Iterable[str], source: str, netns: str | None) -> list[TcObject]:
    """The objects a batch file of adds describes (InputError naming ``source:line``)."""
    texts = dict(read_commands(lines))
    if any(text is None for text in texts.values()):
        raise InputError("ends inside a continuation line", obj=source)
    with entered(netns):
        resolver = Resolver()
    try:
        numbered = list(texts.items())
        items = TemplateReader(resolver).read([text for _, text in numbered], source)
        # the reader numbers the texts it was given 1..n: back to the file's own lines
        return desired(((numbered[i - 1][0], parsed) for i, parsed in items), texts, source)
    finally:
        resolver.close()


def devices_of(objects: list[TcObject], names: dict[int, str]) -> list[str]:
    """The devices a desired state names (actions belong to the namespace, not a device)."""
    seen = dict.fromkeys(obj.key[0] for obj in objects if obj.kind != "action")
    return [names[index] for index in seen]


def plan_for(lines: Iterable[str], source: str, netns: str | None, devices: list[str]
             ) -> tuple[Plan, Live]:
    """Read FILE and the live state of its devices (or ``devices``), and plan."""
    wanted = read_desired(lines, source, netns)
    with Dumper(netns) as dumper:
        named = set(devices_of(wanted, dumper.names))
        if devices:
            stray = named - set(devices)
            if stray:
                raise InputError(f"names device {sorted(stray)[0]}, not given with --dev",
                                 obj=source)
        live = read_live(dumper, devices or sorted(named))
    return difference(wanted, live), live


def send_plan(plan: Plan, netns: str | None, *, force: bool, source: str,
              on_failure: Callable | None = None) -> Report:
    """Send the plan's phases through one session; the report counts every line sent, and
    a stop in one phase stops the whole apply. A signal, wherever it lands (in a phase, while
    waiting between two, as the session closes), says what every phase before it applied."""
    total = Report(source)
    offset = 0
    try:
        with Session(netns=netns, force=force, on_failure=on_failure) as session:
            for phase, lines in enumerate((plan.deletes, plan.action_deletes, plan.adds)):
                if phase == 1 and plan.released and lines:
                    _wait_released(netns, plan.released)
                if not lines:
                    continue
                try:
                    if phase == 2:
                        report = session.send_encoded(_encoded(plan, offset, netns, source),
                                                      source)
                    else:
                        report = session.send_batch(
                            [""] * offset + [line + "\n" for line in lines], source)
                except Interrupted as exc:  # the phase's report is part of the whole
                    with deferred():
                        _add(total, getattr(exc, "report", None))
                    raise
                except BatchInterrupted as exc:
                    with deferred():
                        _add(total, exc.report)
                    raise BatchInterrupted(exc.__cause__ or exc, total) from exc
                with deferred():  # counted whole, or not yet: the report says one or the other
                    _add(total, report)
                    offset += len(lines)
                if report.stopped:
                    break
    except Interrupted as exc:
        exc.obj, exc.message = source, f"after {total.summary()}"
        raise
    return total


def _encoded(plan: Plan, offset: int, netns: str | None, source: str) -> list[tuple[int, object]]:
    """The adds phase as ``(plan line, message)``: the file's own adds as read when planning,
    the changes and replaces encoded now (the rest left blank, so lines keep their numbers)."""
    fresh = {}
    if None in plan.add_messages:
        texts = [""] * offset + [line + "\n" if message is None else ""
                                 for line, message in zip(plan.adds, plan.add_messages)]
        with entered(netns):
            resolver = Resolver()
        try:
            fresh = dict(TemplateReader(resolver).read(texts, source))
        finally:
            resolver.close()
    return [(offset + i, fresh[offset + i] if message is None else message)
            for i, message in enumerate(plan.add_messages, 1)]


def _add(total: Report, report: Report | None) -> None:
    if report is None:
        return
    total.commands += report.commands
    total.applied += report.applied
    total.failed += report.failed
    total.first_failure = total.first_failure or report.first_failure
    total.last_line = report.last_line or total.last_line
    total.stopped = report.stopped
    total.undone += report.undone
    total.left += report.left


def _wait_released(netns: str | None, keys: list[tuple[str, int]]) -> None:
    """Until no deleted filter holds any of the actions ``keys`` (standalone ones: the bind
    count reaches 0) — the kernel lets go after a grace period."""
    deadline = time.monotonic() + RELEASE_TIMEOUT
    pause = 0.001
    with Dumper(netns) as dumper:
        while True:
            refs = read_live(dumper, []).action_refs
            if all(refs.get(key, (0, 0))[1] == 0 for key in keys):
                return
            if time.monotonic() > deadline:
                raise BpfBatchError(f"actions still bound {RELEASE_TIMEOUT:g} s after their "
                                    "filters were deleted", obj="tc apply")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)


# --- dump ----------------------------------------------------------------------------------------


def _sort_key(obj: TcObject, live: Live, depth: dict) -> tuple:
    if obj.kind in ("qdisc", "class"):
        return (0, depth[obj.kind, obj.key], obj.kind == "class", obj.key)
    if obj.kind == "action":
        return (1, obj.key)
    table = obj.key[5]
    return (2, obj.key[0], obj.key[1], obj.key[2], live.root_ids.get(obj.key[:5], 0),
            obj.key[3:5], obj.kind == "filter", table != ROOT, -1 if table == ROOT else table,
            obj.key[6], obj.key[7] or 0)


def _depths(objects: list[TcObject]) -> dict:
    """How deep each qdisc and class sits (parents first when sorted by it)."""
    handles = {(o.key[0], o.key[1]): o for o in objects if o.kind in ("qdisc", "class")}
    depth = {}
    for obj in handles.values():
        level, parent = 0, obj.spec[0]
        while (obj.key[0], parent) in handles and level < 64:
            level += 1
            parent = handles[obj.key[0], parent].spec[0]
        if obj.kind == "class" and (obj.key[0], obj.key[1] & 0xFFFF0000) in handles:
            level += 1  # below its qdisc
        depth[obj.kind, obj.key] = level
    return depth


def dump_lines(netns: str | None, devices: list[str]) -> list[str]:
    """The live state of ``devices`` and the namespace's standalone actions as batch lines,
    parents first; Unwritable naming the object when a line would not give it back."""
    with Dumper(netns) as dumper:
        live = read_live(dumper, devices)
    depth = _depths(live.objects)
    ordered = sorted(live.objects, key=lambda o: _sort_key(o, live, depth))
    lines = [render.add_line(obj, live.names) for obj in ordered]
    again = read_desired([line + "\n" for line in lines], "dump", netns)
    ours = {(o.kind, o.key, o.spec) for o in again}
    for obj, line in zip(ordered, lines):
        if (obj.kind, obj.key, obj.spec) not in ours:
            raise render.Unwritable(f"'{line}' would not give it back", obj=f"{obj.kind} {obj.key}")
    return lines
