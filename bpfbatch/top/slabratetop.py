"""slabratetop: kernel slab allocations per cache, every interval, like bcc's slabratetop.

Counting (``progs/slabratetop.bpf.c``), one per successful allocation, from two tracepoints:
``kmem:kmem_cache_alloc`` for allocations from named caches (bytes are the cache's ``size``,
what it really hands out per object), and ``kmem:kmalloc`` for ``kmalloc()``, which since 6.1
no longer fires the first one. ``kmalloc`` does not say which kmalloc cache served it, only
its object size, so those rows are size classes labelled as the kernel names the caches
(``kmalloc-96``, ``kmalloc-1k``), the ``-cg``/``-rcl``/dma/random variants of a size merged;
kmallocs larger than the biggest kmalloc cache come from the page allocator and are not
counted. bcc's kprobe on ``kmem_cache_alloc`` saw only some of these paths, and it no longer
builds on 6.8+. Counters are keyed by cache address (or size class) and merged here by name,
so caches sharing a name show as one line, as in bcc.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..loader import HOOK_KINDS
from . import screen
from .intervals import IntervalTool

SORT_KEYS = ("name", "count", "size")


@dataclasses.dataclass(frozen=True)
class Sample:
    """One interval: ``caches`` is a structured array (``name``, ``count``, ``bytes``), one
    row per cache name; ``dropped_events`` counts allocations not recorded in the interval
    (cache map full, or the kernel skipped the program)."""

    caches: np.ndarray
    dropped_events: int


class SlabRateTop(IntervalTool):
    """The loaded and attached slabratetop program; ``pid`` filters in the kernel (libbpf-tools'
    ``-p``; the allocating task's process, which is not always who asked for the memory).
    ``capacity`` bounds the caches one interval can hold (default ``SLAB_MAX_CACHES``)."""

    def __init__(self, *, pid: int | None = None, hook_kinds: tuple[str, ...] = HOOK_KINDS,
                 capacity: int | None = None):
        super().__init__("slabratetop", ("slabs_a", "slabs_b"), {}, records=("slab_value",),
                         pid=pid, hook_kinds=hook_kinds, capacity=capacity)
        self._value_dtype = self.dtypes["slab_value"]

    def sample(self) -> Sample:
        _, values = self.maps.drain()
        return Sample(by_name(values.view(self._value_dtype)[:, 0]),
                      self.dropped("dropped_events") + self.missed())


def by_name(records: np.ndarray) -> np.ndarray:
    """Sum ``count`` and ``bytes`` of records sharing a ``name``."""
    names, index = np.unique(records["name"], return_inverse=True)
    out = np.zeros(len(names), dtype=records.dtype)
    out["name"] = names
    np.add.at(out["count"], index, records["count"])
    np.add.at(out["bytes"], index, records["bytes"])
    return out


def table(caches: np.ndarray, *, sort: str = "size", rows: int | None = 20) -> list[str]:
    """bcc's ``CACHE ALLOCS BYTES`` lines: by name ascending, or by count/size descending."""
    if screen.check_choice(sort, SORT_KEYS, "-s/--sort") == "name":
        ranked = caches[np.argsort(caches["name"], kind="stable")]
    else:
        field = "count" if sort == "count" else "bytes"
        ranked = caches[np.argsort(caches[field], kind="stable")[::-1]]
    if rows is not None:
        ranked = ranked[:rows]
    lines = ["%-32s %6s %10s" % ("CACHE", "ALLOCS", "BYTES")]
    for c in ranked:
        lines.append("%-32s %6d %10d" % (c["name"].decode(errors="replace"), c["count"],
                                        c["bytes"]))
    return lines
