"""Every map on the node at a glance: how many elements each holds, how full it is, the memory
it pins and the programs that use it (``bpfbatch list --count``).

bpftool has no count, and the kernel keeps none that user space can read for every map type,
so each map is counted the way ``count`` counts it: one pass of batch lookups
(:class:`~.cursor.BatchCursor`), which copies every element once. Arrays are not walked:
their elements always exist, so they hold ``max_entries``.

What a pass costs follows the map's *buckets*, not its elements: a batch lookup walks bucket
after bucket until it has filled its batch, so an empty hash of 16M ``max_entries`` still
costs a walk of its 16M buckets (README, "Every map at a glance"). A time ``budget`` bounds
the whole inventory: maps are counted cheapest first (fewest ``max_entries``), the clock is
read after every batch call, and a map not finished when the budget is spent is reported
with ``entries = None`` and the reason — so one huge map costs at most one batch call past
the budget and cannot keep the small ones from being counted. A map that cannot be counted
at all (ring buffers, bloom filters, ...) says why, with the type matrix's reason
(:func:`~.handle.refusal`).

A count is not a snapshot: elements added or evicted while the pass runs (an LRU map under
load) may or may not be seen, as in any dump.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import os
import time
from collections.abc import Iterable

from .._sys import abi, libbpf
from ..errors import BpfBatchError, NotFoundError
from ..interrupts import Tally
from .handle import DEFAULT_BATCH, MapHandle, MapInfo, iter_infos, pinned_paths, refusal


@dataclasses.dataclass
class Program:
    """A program that uses a map (its id and name, as ``bpftool prog show`` lists them)."""

    id: int
    name: str


@dataclasses.dataclass
class Row:
    """One map's line of the inventory. ``entries`` is ``None`` when it was not counted, and
    ``reason`` then says why."""

    info: MapInfo
    entries: int | None = None
    reason: str | None = None
    programs: list[Program] = dataclasses.field(default_factory=list)
    #: A map of maps: the ids of the inner maps it holds, as counted.
    inner: list[int] = dataclasses.field(default_factory=list)

    @property
    def fill(self) -> float | None:
        """Elements per ``max_entries``, in percent (``None`` when not counted)."""
        if self.entries is None or not self.info.max_entries:
            return None
        return 100.0 * self.entries / self.info.max_entries


def inventory(infos: Iterable[MapInfo] | None = None, *, budget_s: float | None = None,
              batch_size: int = DEFAULT_BATCH, tally: Tally | None = None) -> list[Row]:
    """A :class:`Row` for each of ``infos`` (every map on the system by default), counted
    within ``budget_s`` seconds in all (no bound when ``None``), sorted fullest first; maps
    that cannot be counted come last. Maps that vanish meanwhile are left out. ``tally``
    counts the maps done, for a caller that says how far it got when a signal stops it."""
    infos = list(iter_infos() if infos is None else infos)
    users = map_programs()
    deadline = None if budget_s is None else time.monotonic() + budget_s
    rows = []
    for info in sorted(infos, key=lambda i: (i.max_entries, i.id)):
        row = Row(info, programs=users.get(info.id, []))
        try:
            count_into(row, deadline, budget_s, batch_size)
        except _Vanished:
            row = None
        if tally is not None:
            tally.add(1)
        if row is not None:
            rows.append(row)
    rows.sort(key=lambda r: (r.fill is None, -(r.fill or 0.0), r.info.id))
    return rows


class _Vanished(Exception):
    """The map was freed between listing it and counting it."""


def count_into(row: Row, deadline: float | None, budget_s: float | None,
               batch_size: int = DEFAULT_BATCH) -> None:
    """Count ``row``'s map into ``row.entries`` (and its inner map ids into ``row.inner``),
    or say in ``row.reason`` why not: the map cannot be counted, or the ``deadline`` (a
    :func:`time.monotonic` time, ``budget_s`` after the start) came first."""
    info = row.info
    why = refusal(info, "count")
    if why is not None:
        row.reason = f"{info.type_name} maps: {why}"
        return
    if info.type in abi.ELEMENTS_ALWAYS_EXIST:
        row.entries = info.max_entries
        return
    if deadline is not None and time.monotonic() >= deadline:
        row.reason = f"budget of {budget_s:g}s spent before this map"
        return
    from .cursor import BatchCursor

    try:
        m = MapHandle.open_id(info.id, read_only=True)
    except NotFoundError:
        raise _Vanished from None
    total, holds_maps = 0, info.type in abi.MAP_IN_MAP_TYPES
    try:
        with m:
            for batch in BatchCursor(m, batch_size=batch_size):
                total += batch.count
                if holds_maps:  # values are the inner maps' ids
                    row.inner += memoryview(batch.values).cast("I")[:batch.count].tolist()
                if deadline is not None and time.monotonic() >= deadline:
                    row.reason = (f"budget of {budget_s:g}s spent after {total} entries of a "
                                  f"walk over {info.max_entries} slots")
                    return
    except BpfBatchError as exc:
        row.reason = str(exc)
        return
    row.entries = total


def bpffs_pins(deadline: float | None = None) -> dict[int, list[str]]:
    """Map id → its pins on every bpffs mounted (``/proc/self/mounts``), each mount walked
    once. Each pin costs one ``BPF_OBJ_GET`` and one read of its fdinfo; with ``deadline``
    (a :func:`time.monotonic` time) the walk stops there, and the maps it did not reach
    have no pins in the result."""
    found: dict[int, list[str]] = {}
    for root in bpffs_mounts():
        for map_id, paths in pinned_paths(root, deadline).items():
            found.setdefault(map_id, []).extend(paths)
    return found


def bpffs_mounts() -> list[str]:
    """The mount points of bpffs, in mount order (a space in a path is ``\\040`` there)."""
    with open("/proc/self/mounts", encoding="utf-8", errors="surrogateescape") as mounts:
        return [_unescape(fields[1]) for fields in map(str.split, mounts)
                if len(fields) > 2 and fields[2] == "bpf"]


def _unescape(path: str) -> str:
    import re

    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), path)


def map_programs() -> dict[int, list[Program]]:
    """Map id → the programs that use it (``bpf_prog_info.map_ids``), in program id order.
    Programs that vanish meanwhile are skipped."""
    users: dict[int, list[Program]] = {}
    for prog_id in libbpf.prog_ids():
        try:
            fd = libbpf.prog_fd_by_id(prog_id)
        except BpfBatchError as exc:
            if exc.errno == errno.ENOENT:
                continue
            raise
        try:
            name, map_ids = _prog_maps(fd, prog_id)
        finally:
            os.close(fd)
        for map_id in map_ids:
            users.setdefault(map_id, []).append(Program(prog_id, name))
    return users


def _prog_maps(fd: int, prog_id: int) -> tuple[str, list[int]]:
    """A program's name and the ids of the maps it uses: one info call for the count, one for
    the ids (the kernel fills ``map_ids`` only up to ``nr_map_ids``)."""
    what = f"program id {prog_id}"
    info = abi.BpfProgInfo()
    libbpf.obj_info(fd, info, what)
    count = info.nr_map_ids
    ids = (ctypes.c_uint32 * max(count, 1))()
    if count:
        info = abi.BpfProgInfo(nr_map_ids=count, map_ids=ctypes.addressof(ids))
        libbpf.obj_info(fd, info, what)
    return info.name.decode(errors="replace"), list(ids[:min(count, info.nr_map_ids)])
