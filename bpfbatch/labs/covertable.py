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
from ..api import Map
from ..errors import BpfBatchError, InputError
from ..map import cursor, writes

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


Samples = dict[tuple[str, str], list[float]]


def measure(entries: int, rounds: int) -> Samples:
    """Seconds of every round of every (operation, mode label) on a fresh ``entries``-entry
    hash."""
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
    return results


def _medians(samples: Samples) -> dict[tuple[str, str], float]:
    return {cell: statistics.median(times) for cell, times in samples.items()}


def render(samples: Samples, entries: int) -> str:
    """The cover letter's table: median seconds, and the speed-up over no batching."""
    results = _medians(samples)
    labels = [mode.label for mode in modes(entries)]
    rows = []
    for op in OPERATIONS:
        base = results[(op, labels[0])]
        rows.append([op] + [f"{results[(op, label)]:.3f} s"
                            + ("" if label == labels[0] else f" ({speedup(base, results[(op, label)])})")
                            for label in labels])
    return tabulate(rows, headers=["operation"] + labels, tablefmt="github")


def speedup(base: float, seconds: float) -> str:
    """``seconds`` against the unbatched ``base``, in words: ``120× faster``, ``1.3× faster``,
    ``1.6× slower``, or ``same`` within 5% (a cell slower than its base never reads "faster",
    and two digits are kept below 10 so 1.4× does not round to 1×)."""
    ratio = base / seconds
    if 1 / 1.05 < ratio < 1.05:
        return "same"
    words, factor = ("faster", ratio) if ratio > 1 else ("slower", 1 / ratio)
    return f"{factor:.0f}× {words}" if factor >= 10 else f"{factor:.1f}× {words}"


def check_plot(path: str) -> None:
    """Refuse ``--plot`` before anything is measured: matplotlib missing, or a folder that
    does not exist."""
    import os

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError("drawing needs matplotlib: pip install 'bpfbatch[plot]'",
                         obj="plot") from None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise InputError(f"no such folder {folder}", obj="plot")


def machine() -> str:
    """``Linux 6.18, 2 × Intel(R) Xeon(R) ...``: what the chart ran on."""
    import os

    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), model)
    except OSError:
        pass
    return f"Linux {os.uname().release}, {os.cpu_count()} × {model}"


def plot(samples: Samples, entries: int, path: str) -> None:
    """One panel per operation: each mode's median as a dot on a log axis (three decades
    apart), its rounds' range as a bar through it, and the speed-up over no batching written
    beside it; the machine in the title."""
    check_plot(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = _medians(samples)
    labels = [mode.label for mode in modes(entries)]
    fig, axes = plt.subplots(1, len(OPERATIONS), figsize=(11, 4.2), sharey=True)
    for ax, op in zip(axes, OPERATIONS):
        base = results[(op, labels[0])]
        for x, label in enumerate(labels):
            runs = samples[(op, label)]
            median = results[(op, label)]
            ax.vlines(x, min(runs), max(runs), color="0.6", linewidth=6)
            ax.plot(x, median, "o", color="C0" if x else "C3", markersize=8)
            shown = f"{median:.2g} s" if median >= 0.1 else f"{median * 1e3:.2g} ms"
            text = shown if not x else f"{shown}\n{speedup(base, median)}"
            ax.annotate(text, (x, median), xytext=(9, 0), textcoords="offset points",
                        va="center", fontsize=8)
        ax.set_xticks(range(len(labels)), labels, rotation=20)
        ax.set_xlim(-0.4, len(labels) + 0.1)
        ax.set_title(op)
        ax.set_yscale("log")
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0].set_ylabel("seconds (log scale; bar: range of the rounds)")
    rounds = len(next(iter(samples.values())))
    fig.suptitle(f"{entries:,}-entry BPF hash map: per key vs batches, median of {rounds} "
                 f"round(s)\n{machine()}", fontsize=10)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise InputError(f"cannot write the chart: {exc.strerror}", obj=path,
                         errno=exc.errno) from None
    finally:
        plt.close(fig)
