"""Loss-free interval read-outs: swap a one-slot array-of-maps, then drain the idle map.

bcc and libbpf-tools read a map and then clear it; whatever the programs count between the
read and the clear is lost. Draining with ``BPF_MAP_LOOKUP_AND_DELETE_BATCH`` alone is not
enough either: a program that looked an element up just before the drain deleted it still adds
to the deleted element afterwards, and that add is lost.

Here the programs never write a map user space is draining. They fetch the map they write from
slot 0 of a one-slot ``BPF_MAP_TYPE_ARRAY_OF_MAPS`` (``active``) at every event, and user space
owns two identical inner maps (``progs/maps.bpf.h``'s ``DOUBLE_BUFFERED_HASH`` declares all
three):

1. point the slot at the idle map B (``bpf_map_update_elem`` on the outer map). The kernel
   calls ``synchronize_rcu()`` before a map-in-map update returns (``maybe_wait_bpf_programs``
   in ``kernel/bpf/syscall.c``; the kernel's ``btf_map_in_map`` selftest relies on it), and
   tracing programs run inside ``rcu_read_lock()``: once the update returns, every program
   that fetched A has finished, and every later one fetches B;
2. drain A with one ``LOOKUP_AND_DELETE_BATCH`` pass. Nobody writes A any more, so the pass
   sees every element with its final value, and leaves A empty for its next turn.

Each event is therefore counted in exactly one interval: the first whose swap came after the
program fetched the slot. What the programs could not count at all (the active map was full)
they count in a global, which the tools report instead of hiding, together with the events the
kernel did not run a program for at all (a tracing program is not re-entered on a CPU where
it is running: ``recursion_misses`` of each program's ``bpf_prog_info``).

Limits: the wait covers non-sleepable programs only (the kernel does not wait for sleepable
ones; the tools have none), and it costs one RCU grace period per interval (about 10 ms here;
``tools/bench/tools_readout.py`` measures it, and shows what a drain without the swap loses).
"""

from __future__ import annotations

import numpy as np

from ..api import Map
from ..errors import InputError
from ..loader import HOOK_KINDS, BpfObject
from ..map.cursor import read_all

_SLOT = (0).to_bytes(4, "little")


class SwappedMaps:
    """Two inner maps behind a one-slot array-of-maps; :meth:`drain` returns what was counted
    since the previous drain (or since construction)."""

    def __init__(self, selector: Map, buffers: tuple[Map, Map]):
        self.selector = selector
        self.buffers = buffers
        self.active = 0
        self._point_at(0)

    def _point_at(self, index: int) -> None:
        self.selector.update(_SLOT, self.buffers[index].fd.to_bytes(4, "little"))
        self.active = index

    def drain(self) -> tuple[np.ndarray, np.ndarray]:
        """Swap, then drain the map that was active: ``(keys, values)`` as ``uint8`` arrays of
        shape ``(n, key_size)`` and ``(n, value_size)``."""
        idle = self.active
        self._point_at(1 - idle)  # returns after synchronize_rcu(): no writer holds `idle`
        return read_all(self.buffers[idle], delete=True)


class IntervalTool:
    """A package object loaded with ``rodata``, attached, and read out through
    :class:`SwappedMaps` over its ``active`` slot and the two maps named in ``buffers``.
    Closing detaches the programs and frees the maps.

    ``pid`` (positive) becomes the object's ``target_pid`` (0: every process); ``records``
    names the structs whose numpy dtypes the tool needs (:attr:`dtypes`); ``capacity``, if
    given, resizes both buffers (and the slot's template) to that many entries. Everything
    that can fail happens before the constructor returns, and a failure leaves nothing
    attached.
    """

    def __init__(self, name: str, buffers: tuple[str, str], rodata: dict[str, int], *,
                 records: tuple[str, ...], pid: int | None = None,
                 hook_kinds: tuple[str, ...] = HOOK_KINDS, capacity: int | None = None):
        if pid is not None and pid <= 0:
            raise InputError(f"PID must be positive, got {pid}", obj="pid")
        self.obj = BpfObject.package(name)
        self._totals: dict[str, int] = {}
        try:
            self.dtypes = {record: self.obj.dtype(record) for record in records}
            self.obj.set_rodata(target_pid=pid or 0, **rodata)
            if capacity is not None:
                for buffer in buffers:
                    self.obj.configure_map(buffer, max_entries=capacity)
                self.obj.configure_map("active", inner_max_entries=capacity)
            self.obj.load(hook_kinds=hook_kinds)
            self.obj.attach()
            self.maps = SwappedMaps(self.obj.map("active"),
                                    (self.obj.map(buffers[0]), self.obj.map(buffers[1])))
        except BaseException:
            self.obj.close()
            raise

    def dropped(self, counter: str) -> int:
        """How much the ``.bss`` counter ``counter`` (what the programs could not record) grew
        since the previous call for it (since loading, the first time)."""
        return self._grown(counter, self.obj.global_value(".bss", counter))

    def missed(self) -> int:
        """Events the kernel did not run the programs for (recursion on a CPU), since the
        previous call: counted nowhere else, so the tools add them to what they dropped."""
        return self._grown("recursion misses", self.obj.recursion_misses())

    def _grown(self, name: str, total: int) -> int:
        grown, self._totals[name] = total - self._totals.get(name, 0), total
        return grown

    def close(self) -> None:
        self.obj.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
