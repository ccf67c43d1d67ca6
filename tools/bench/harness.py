"""Side-by-side timing: peers and bpfbatch on the same data, in the same run, interleaved.

These machines are shared and noisy, so absolute seconds mean little; what is reported is the
median of several interleaved rounds and the ratio *peer / bpfbatch* against a named baseline.
Each case is either an external command (timed with ``wait4``: wall, user, sys, peak RSS of that
child alone) or an in-process callable (wall and this process's CPU time).
Results print as a table and are written as JSON so runs can be compared over time.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tabulate import tabulate


@dataclasses.dataclass
class Sample:
    wall: float
    user: float
    sys: float
    max_rss_mb: float | None = None


@dataclasses.dataclass
class Command:
    """An external program. ``setup`` runs untimed before every round (e.g. refill a map)."""

    argv: Sequence[str]
    stdin: str | None = None
    setup: Callable[[], None] | None = None

    def run(self) -> Sample:
        if self.setup:
            self.setup()
        stdin = open(self.stdin, "rb") if self.stdin else subprocess.DEVNULL
        try:
            start = time.perf_counter()
            proc = subprocess.Popen(self.argv, stdin=stdin, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
        finally:
            if self.stdin:
                stdin.close()
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(self.argv)} exited {proc.returncode}: "
                               f"{proc.stderr.read().decode(errors='replace').strip()[:300]}")
        proc.stderr.close()
        return Sample(wall, usage.ru_utime, usage.ru_stime, usage.ru_maxrss / 1024)


@dataclasses.dataclass
class InProcess:
    """A Python callable timed in this process. ``setup`` runs untimed before every round."""

    fn: Callable[[], object]
    setup: Callable[[], None] | None = None

    def run(self) -> Sample:
        if self.setup:
            self.setup()
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        self.fn()
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
        return Sample(wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime)


Case = Command | InProcess


def interleave(cases: dict[str, Case], *, rounds: int = 3, warmup: int = 1) -> dict[str, list[Sample]]:
    """Run every case once per round, in turn, after ``warmup`` untimed rounds."""
    samples: dict[str, list[Sample]] = {name: [] for name in cases}
    for index in range(warmup + rounds):
        for name, case in cases.items():
            sample = case.run()
            if index >= warmup:
                samples[name].append(sample)
    return samples


def summarize(samples: dict[str, list[Sample]], baseline: str) -> list[dict]:
    """Median of each metric per case, and ``ratio`` = case wall / baseline wall."""
    base = statistics.median(s.wall for s in samples[baseline])
    rows = []
    for name, runs in samples.items():
        wall = statistics.median(s.wall for s in runs)
        rss = [s.max_rss_mb for s in runs if s.max_rss_mb is not None]
        rows.append({
            "case": name,
            "wall_s": wall,
            "min_s": min(s.wall for s in runs),
            "max_s": max(s.wall for s in runs),
            "user_s": statistics.median(s.user for s in runs),
            "sys_s": statistics.median(s.sys for s in runs),
            "max_rss_mb": max(rss) if rss else None,
            "ratio": wall / base if base else None,
        })
    return rows


def report(title: str, rows: list[dict], baseline: str, *, out_dir: Path | None = None,
           params: dict | None = None) -> str:
    """Print the table (ratio column: how many times slower than ``baseline``) and save JSON."""
    table = tabulate(
        [[r["case"], f"{r['wall_s']:.3f}", f"{r['min_s']:.3f}–{r['max_s']:.3f}", f"{r['user_s']:.2f}",
          f"{r['sys_s']:.2f}", "" if r["max_rss_mb"] is None else f"{r['max_rss_mb']:.0f}",
          f"{r['ratio']:.2f}×"] for r in rows],
        headers=["case", "wall s (median)", "min–max", "user", "sys", "peak RSS MB",
                 f"÷ {baseline}"],
        tablefmt="github")
    text = f"## {title}\n\n{table}\n"
    print(text, flush=True)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        slug = "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")
        record = {"title": title, "baseline": baseline, "params": params or {},
                  "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "kernel": os.uname().release, "rows": rows}
        (out_dir / f"{slug}.json").write_text(json.dumps(record, indent=2) + "\n")
    return text
