"""Scaling: whole-process dump time of bpfbatch and bpftool from 1k to 1M entries, to show
where the crossover is.

``python -m tools.bench scaling [--sizes 1000,10000,...] [--rounds R] [--out DIR]``

At each size a fresh copy of the maps suite's BTF hash map (u32 key, 16-byte struct value)
is filled, and four fresh processes dump it to /dev/null, interleaved: ``bpftool -j map dump``
(the baseline), ``bpftool map dump``, ``bpfbatch dump -o json`` and ``-o bpftool-json``.
Interpreter start-up is part of bpfbatch's time, so bpftool wins on small maps; the summary
prints each case's median per size, the ratios to bpftool, and a least-squares line per case
(fixed cost + cost per entry, relative residuals) from which the crossover size follows.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from tabulate import tabulate

from tools.bench.harness import BPFBATCH, Command, interleave, report, summarize
from tools.bench.maps import btf_map, fill

BASELINE = "bpftool -j map dump"
PLAIN = "bpftool map dump"
OURS = ("bpfbatch dump -o json", "bpfbatch dump -o bpftool-json")


def cases_for(map_id: str) -> dict[str, Command]:
    """The four whole-process dumps of map ``map_id``, baseline first."""
    dump = [*BPFBATCH, "dump", "--map-id", map_id]
    return {
        BASELINE: Command(["bpftool", "-j", "map", "dump", "id", map_id]),
        PLAIN: Command(["bpftool", "map", "dump", "id", map_id]),
        OURS[0]: Command([*dump, "-o", "json"]),
        OURS[1]: Command([*dump, "-o", "bpftool-json"]),
    }


def measure(entries: int, rounds: int, out_dir: Path) -> dict[str, float]:
    """Median wall seconds per case at one size (the per-size table and JSON are reported)."""
    with btf_map(entries) as m:
        fill(m, entries)
        rows = summarize(interleave(cases_for(str(m.info.id)), rounds=rounds), BASELINE)
    report(f"scaling: dump {entries:,} entries (u32 key, 16-byte struct value)", rows, BASELINE,
           out_dir=out_dir, params={"entries": entries, "rounds": rounds})
    return {r["case"]: r["wall_s"] for r in rows}


def crossover(ours: tuple[float, float], peer: tuple[float, float]) -> str:
    """Entries at which two lines ``seconds = fixed + per_entry × n`` meet, as text.

    ``ours`` and ``peer`` are ``(per_entry, fixed)`` as :func:`numpy.polyfit` returns them."""
    (our_slope, our_fixed), (peer_slope, peer_fixed) = ours, peer
    if our_slope >= peer_slope:
        return "none (not cheaper per entry)"
    return f"≈ {max(0.0, (our_fixed - peer_fixed) / (peer_slope - our_slope)):,.0f} entries"


def summary(walls: dict[int, dict[str, float]]) -> str:
    """The scaling table (sizes × cases, ratios to both bpftool modes) and the fitted lines."""
    sizes = sorted(walls)
    table = tabulate(
        [[f"{n:,}", *(f"{walls[n][c]:.3f}" for c in (BASELINE, PLAIN, *OURS)),
          *(f"{walls[n][ours] / walls[n][peer]:.2f}×" for ours in OURS for peer in (BASELINE, PLAIN))]
         for n in sizes],
        headers=["entries", f"{BASELINE} s", f"{PLAIN} s", "-o json s", "-o bpftool-json s",
                 "json ÷ bpftool -j", "json ÷ bpftool", "bpftool-json ÷ bpftool -j",
                 "bpftool-json ÷ bpftool"],
        tablefmt="github")
    text = f"## scaling: median wall seconds per size (ratio below 1: bpfbatch is faster)\n\n{table}\n"
    if len(sizes) >= 2:
        # Weighted by 1/time, so the residual is relative and the small sizes (which set the
        # fixed cost) count as much as the large ones (which set the cost per entry).
        lines = {}
        for case in (BASELINE, PLAIN, *OURS):
            seconds = np.array([walls[n][case] for n in sizes])
            lines[case] = tuple(np.polyfit(sizes, seconds, 1, w=1 / seconds))
        fits = tabulate(
            [[case, f"{fixed * 1e3:.0f}", f"{slope * 1e6:.2f}",
              "" if case not in OURS else crossover(lines[case], lines[BASELINE]),
              "" if case not in OURS else crossover(lines[case], lines[PLAIN])]
             for case, (slope, fixed) in lines.items()],
            headers=["case", "fixed ms", "µs per entry", f"crossover with {BASELINE}",
                     f"crossover with {PLAIN}"],
            tablefmt="github")
        text += f"\nleast-squares line per case (seconds = fixed + per entry × n):\n\n{fits}\n"
    print(text, flush=True)
    return text


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench scaling", description=__doc__)
    parser.add_argument("--sizes", default="1000,10000,100000,1000000",
                        type=lambda text: [int(n) for n in text.split(",")],
                        help="comma-separated entry counts (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)
    summary({n: measure(n, args.rounds, args.out) for n in args.sizes})
    return 0
