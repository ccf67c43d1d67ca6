"""Side-by-side timing: peers and bpfbatch on the same data, in the same run, interleaved.

These machines are shared and noisy, so absolute seconds mean little; what is reported is the
median of several interleaved rounds and, for each case, its ratio to a named baseline (each
case ÷ the baseline: above 1 is slower than it).
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
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tabulate import tabulate

#: The bpfbatch CLI as a peer command, run by this interpreter.
BPFBATCH = [sys.executable, "-m", "bpfbatch"]
C_SOURCES = Path(__file__).parent / "c"


def build_c(source_name: str, tmp: Path) -> str:
    """Compile the C peer ``c/<source_name>`` with ``gcc -O2 -Wall -pthread … -lbpf`` into
    ``tmp``; returns the binary's path."""
    binary = tmp / Path(source_name).stem
    subprocess.run(["gcc", "-O2", "-Wall", "-pthread", "-o", str(binary),
                    str(C_SOURCES / source_name), "-lbpf"], check=True)
    return str(binary)


@dataclasses.dataclass
class Sample:
    wall: float
    user: float
    sys: float
    max_rss_mb: float | None = None


# Runs in a small fresh interpreter: forks the command, waits for it, reports its resources.
# The detour is what makes peak RSS right: a child spawned straight from this (large) process
# inherits its high-water mark, so ru_maxrss would never be below the benchmark's own size.
_REPORTER = """
import os, sys, time
fd, argv = int(sys.argv[1]), sys.argv[2:]
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - start
os.write(fd, f"{os.waitstatus_to_exitcode(status)} {wall} {ru.ru_utime} {ru.ru_stime} {ru.ru_maxrss}".encode())
"""


@dataclasses.dataclass
class Command:
    """An external program. ``setup`` runs untimed before every round (e.g. refill a map)."""

    argv: Sequence[str]
    stdin: str | None = None
    setup: Callable[[], None] | None = None

    def run(self) -> Sample:
        if self.setup:
            self.setup()
        read_fd, write_fd = os.pipe()
        try:
            with open(self.stdin, "rb") if self.stdin else open(os.devnull, "rb") as stdin:
                proc = subprocess.run(
                    [sys.executable, "-S", "-c", _REPORTER, str(write_fd), *self.argv],
                    stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                    pass_fds=(write_fd,))
            os.close(write_fd)
            write_fd = -1
            with os.fdopen(read_fd, "rb") as report:
                read_fd = -1
                fields = report.read().split()
        finally:
            for fd in (read_fd, write_fd):
                if fd >= 0:
                    os.close(fd)
        if proc.returncode or not fields or int(fields[0]):
            raise RuntimeError(f"{' '.join(self.argv)} failed: "
                               f"{proc.stderr.decode(errors='replace').strip()[:300]}")
        _, wall, user, sys_, rss_kb = (float(f) for f in fields)
        return Sample(wall, user, sys_, rss_kb / 1024)


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
