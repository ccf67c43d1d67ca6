"""Loss-free interval read-outs: swap a one-slot array-of-maps, then drain the idle map.

bcc and libbpf-tools read a map and then clear it; whatever the programs count between the
read and the clear is lost. Draining with ``BPF_MAP_LOOKUP_AND_DELETE_BATCH`` alone is not
enough either: a program that looked an element up just before the drain deleted it still adds
to the deleted element afterwards, and that add is lost.

Here the programs never write a map user space is draining. They fetch the map they write from
slot 0 of a one-slot ``BPF_MAP_TYPE_ARRAY_OF_MAPS`` (``active``) at every event, and user space
owns two identical inner maps:

1. point the slot at the idle map B (``bpf_map_update_elem`` on the outer map). The kernel
   calls ``synchronize_rcu()`` before a map-in-map update returns (``maybe_wait_bpf_programs``
   in ``kernel/bpf/syscall.c``; the kernel's ``btf_map_in_map`` selftest relies on it), and
   tracing programs run inside ``rcu_read_lock()``: once the update returns, every program
   that fetched A has finished, and every later one fetches B;
2. drain A with one ``LOOKUP_AND_DELETE_BATCH`` pass. Nobody writes A any more, so the pass
   sees every element with its final value, and leaves A empty for its next turn.

Each event is therefore counted in exactly one interval: the first whose swap came after the
program fetched the slot. What the programs could not count at all (the active map was full)
they count in a global, which the tools report instead of hiding.

Limits: the wait covers non-sleepable programs only (the kernel does not wait for sleepable
ones; the tools have none), and it costs one RCU grace period per interval (about 10 ms here;
``tools/bench/tools_readout.py`` measures it, and shows what a drain without the swap loses).
"""

from __future__ import annotations

import numpy as np

from ..cursor import read_all
from ..maps import Map
from ..objects import BpfObject

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
    Closing detaches the programs and frees the maps."""

    def __init__(self, name: str, buffers: tuple[str, str], rodata: dict[str, int],
                 hook_kinds: tuple[str, ...] | None = None):
        self.obj = BpfObject.package(name)
        try:
            self.obj.set_rodata(**rodata)
            self.obj.load(**({"hook_kinds": hook_kinds} if hook_kinds else {}))
            self.obj.attach()
            self.maps = SwappedMaps(self.obj.map("active"),
                                    (self.obj.map(buffers[0]), self.obj.map(buffers[1])))
        except BaseException:
            self.obj.close()
            raise

    def close(self) -> None:
        self.obj.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
