"""The table of the 2019 map-batch cover letter, measured on this kernel (``bpfbatch bench``).

The series that added ``BPF_MAP_*_BATCH`` (Linux 5.6) justified itself with one table: a
1M-entry hash map read (``lookup``), drained (``lookup_and_delete``) and emptied by known keys
(``delete``), key by key and in batches of 10, 1000 and the whole map. This command rebuilds
that table here. The per-key column goes through the same Python bindings as the batches, so
it includes about a microsecond of call overhead per syscall; the C floor is in the project's
``tools/bench``.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import numpy as np
from tabulate import tabulate

from .._sys.abi import MapType
from ..errors import BpfBatchError, InputError
from ..map import cursor, writes
from ..map.handle import Map

OPERATIONS = ("lookup", "lookup_and_delete", "delete")


@dataclasses.dataclass(frozen=True)
class Mode:
    label: str
    batch_size: int | None  # None: one syscall per key (get_next_key + lookup/delete)


def modes(entries: int) -> list[Mode]:
    return [Mode("no batching", None), Mode("batch 10", 10), Mode("batch 1000", 1000),
            Mode("batch all", entries)]


def _fill(m: Map, entries: int) -> np.ndarray:
    keys = np.arange(entries, dtype=np.uint32)
    writes.update(m, keys, keys.astype(np.uint64), entries)
    return keys


def _per_key_walk(m: Map, delete: bool) -> int:
    """get_next_key + lookup (+ delete) per element: the cursor's per-key walk, which
    fetches the next key before deleting so the walk stays linear."""
    return sum(b.count for b in cursor.BatchCursor(m, delete=delete, force_fallback=True))


def _run(m: Map, op: str, mode: Mode, keys: np.ndarray) -> Callable[[], int]:
    """The timed part of one (operation, mode) cell; returns elements handled."""
    if op == "delete":
        if mode.batch_size is None:
            rows = [k.tobytes() for k in keys]
            return lambda: sum(m.delete(k) for k in rows)
        return lambda: writes.delete(m, keys, len(keys), batch_size=mode.batch_size).deleted
    if mode.batch_size is None:
        return lambda: _per_key_walk(m, op == "lookup_and_delete")
    return lambda: sum(b.count for b in cursor.BatchCursor(
        m, delete=op == "lookup_and_delete", batch_size=mode.batch_size))


def measure(entries: int, rounds: int) -> dict[tuple[str, str], float]:
    """Median seconds of every (operation, mode label) on a fresh ``entries``-entry hash."""
    results: dict[tuple[str, str], list[float]] = {}
    with Map.create(MapType.HASH, 4, 8, entries, name="bpfbatch_bench") as m:
        for _ in range(rounds):
            for op in OPERATIONS:
                for mode in modes(entries):
                    keys = _fill(m, entries)
                    timed = _run(m, op, mode, keys)
                    start = time.perf_counter()
                    handled = timed()
                    elapsed = time.perf_counter() - start
                    if handled != entries:
                        raise BpfBatchError(f"{op} ({mode.label}) handled {handled} of "
                                            f"{entries} entries: is something else writing "
                                            "the map?", obj=m.info.label)
                    results.setdefault((op, mode.label), []).append(elapsed)
    return {cell: statistics.median(times) for cell, times in results.items()}


def render(results: dict[tuple[str, str], float], entries: int) -> str:
    labels = [mode.label for mode in modes(entries)]
    rows = []
    for op in OPERATIONS:
        base = results[(op, labels[0])]
        rows.append([op] + [f"{results[(op, label)]:.3f} s"
                            + ("" if label == labels[0] else f" ({base / results[(op, label)]:.0f}×)")
                            for label in labels])
    return tabulate(rows, headers=["operation"] + labels, tablefmt="github")


def plot(results: dict[tuple[str, str], float], entries: int, path: str) -> None:
    """Grouped bars, one group per operation, log scale (the spread is three decades)."""
    try:
        import matplotlib
    except ImportError:
        raise InputError("drawing needs matplotlib: pip install 'bpfbatch[plot]'",
                         obj="plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [mode.label for mode in modes(entries)]
    width = 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, label in enumerate(labels):
        xs = [j + i * width for j in range(len(OPERATIONS))]
        ax.bar(xs, [results[(op, label)] for op in OPERATIONS], width, label=label)
    ax.set_xticks([j + width * (len(labels) - 1) / 2 for j in range(len(OPERATIONS))],
                  OPERATIONS)
    ax.set_yscale("log")
    ax.set_ylabel("seconds (log scale)")
    ax.set_title(f"{entries:,} entries in a BPF hash map: per key vs batches")
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as exc:
        raise InputError(f"cannot write the chart: {exc.strerror}", obj=path) from None
    finally:
        plt.close(fig)
