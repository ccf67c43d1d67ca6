"""bpfbatch: move data across the user/kernel boundary in batches.

The public Python API is :class:`Map` (``from bpfbatch import Map``): open a map by id,
pinned path or name, then ``count``, ``items``, ``to_numpy``, ``update_items``,
``delete_keys``, ``drain`` and ``batches`` — each one or more batch syscalls per batch, never
one per element. :class:`Ringbuf` reads a ring buffer's events in batches, :class:`PerfBuffer` a perf event array's. Every failure is a :class:`BpfBatchError`. tc rules are sent many netlink
messages per ``sendmsg()`` by :mod:`bpfbatch.tc`. :func:`diff` compares two maps, a map and a
file, or two files, by key (:mod:`bpfbatch.compare`).

Importing the package loads nothing native and no numpy: :class:`Map` (and with it
libbpf.so.1) is imported on first use, so ``bpfbatch tc`` runs where libbpf is missing.
"""

from .errors import BpfBatchError

__version__ = "0.1.0"
__all__ = ["BpfBatchError", "Map", "PerfBuffer", "Ringbuf", "diff", "migrate"]


def __getattr__(name: str):
    if name == "Map":
        from .api import Map

        return Map
    if name == "migrate":  # the package, callable as bpfbatch.migrate.migrate
        import importlib

        return importlib.import_module(".migrate", __name__)
    if name == "Ringbuf":
        from .events.api import Ringbuf

        return Ringbuf
    if name == "PerfBuffer":
        from .events.perf import PerfBuffer

        return PerfBuffer
    if name == "diff":
        from .compare import diff

        return diff
    raise AttributeError(f"module 'bpfbatch' has no attribute '{name}'")
