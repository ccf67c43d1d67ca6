"""TCP receive zero-copy on loopback: N parallel flows, plain recv() vs mmap, 4 KiB vs huge-page
alignment of each receiver's mapping.

``python -m tools.bench tcp_mmap [--flows 1,2,4,8] [--size 256M] [--rounds 5] [--out DIR]``

One run = one :class:`~bpfbatch.tcp_mmap.Server` in this process (one receiving thread per
flow, all in one address space, which is what the alignment is about) and one sender process
whose N threads start together. Every case uses the same sender, the loopback recipe for
mappable payload (``MSG_ZEROCOPY`` and MSS 4096 + 12), so only the receiver differs:

- ``recv``: plain recv() into a buffer;
- ``zerocopy a=4K``: mmap + ``TCP_ZEROCOPY_RECEIVE``, mappings aligned to one page only;
- ``zerocopy a=<huge>``: the same, aligned to the huge page size (the selftest's default).

A fourth case, ``recv, 64K MSS``, is loopback at its best for plain copies (default MSS, plain
send()), to show what the one-page MSS costs. Cases and flow counts are interleaved round by
round; the table shows medians over rounds of: the aggregate rate (all bytes over the span from
the first flow's start to the last flow's end), the share of bytes mapped, the receivers' CPU
per MB (all receiving threads' user + sys over all MB; the selftest's "usec per MB") with its
spread over rounds, its ratio to ``recv`` at the same N, and receiver context switches per MB.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import threading
import time
from pathlib import Path

from tabulate import tabulate

from bpfbatch.tcp_mmap import Config, Server, default_alignment, parse_size, send
from bpfbatch.tcp_mmap.receiver import Report

from .harness import InProcess, interleave

LOOPBACK_MSS = 4096 + 12
BASELINE = "recv"


def _sender(port: int, flows: int, options: dict, ready, go, failures) -> None:
    """Sender process: N threads, each one flow of ``options``, all released by ``go``."""
    config = Config(host="::1", port=port, **options).validate()

    def flow() -> None:
        go.wait()
        try:
            send(config)
        except Exception as exc:  # reported to the parent, which fails the run
            failures.put(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=flow) for _ in range(flows)]
    for thread in threads:
        thread.start()
    ready.set()
    for thread in threads:
        thread.join()


class Run:
    """One case at one flow count; every call of :meth:`__call__` is one timed transfer whose
    per-flow reports are kept in :attr:`rounds`."""

    def __init__(self, flows: int, size: int, receiver: dict, sender: dict):
        self.flows = flows
        self.receiver = Config(server=True, host="::1", port=0, **receiver).validate()
        self.sender = dict(sender, size=size)
        self.rounds: list[tuple[list[Report], float]] = []

    def __call__(self) -> None:
        context = multiprocessing.get_context("spawn")
        ready, go, failures = context.Event(), context.Event(), context.Queue()
        ends: list[float] = []
        with Server(self.receiver) as server:
            results: list = []
            serving = threading.Thread(target=lambda: results.extend(
                server.serve(self.flows, on_result=lambda _: ends.append(time.perf_counter()))))
            serving.start()
            process = context.Process(target=_sender, args=(
                server.address[1], self.flows, self.sender, ready, go, failures))
            process.start()
            try:
                ready.wait(60)
                go.set()
                process.join(300)
            finally:
                if process.is_alive():
                    process.kill()
                    process.join()
                serving.join(30)  # the receivers end at their senders' FIN
                if serving.is_alive():  # a sender never connected
                    server.stop()
                    serving.join()
        errors = [str(r) for r in results if not isinstance(r, Report)]
        while not failures.empty():
            errors.append(failures.get())
        if errors or len(results) != self.flows:
            raise RuntimeError(f"{self.flows} flows, {len(results)} reports: {'; '.join(errors)}")
        # A flow's start is its end minus its duration; the span covers all flows.
        span = max(ends) - min(end - r.seconds for end, r in zip(ends, results))
        self.rounds.append((results, span))


def _gbit_per_s(reports: list[Report], span: float) -> float:
    return sum(r.received for r in reports) * 8 / span / 1e9


def _mapped_percent(reports: list[Report], _span: float) -> float:
    return 100 * sum(r.mapped for r in reports) / sum(r.received for r in reports)


def _cpu_per_mb(reports: list[Report], _span: float) -> float:
    return sum(r.user + r.sys for r in reports) * 1e6 / sum(r.megabytes for r in reports)


def _switches_per_mb(reports: list[Report], _span: float) -> float:
    return sum(r.voluntary_switches for r in reports) / sum(r.megabytes for r in reports)


def _row(case: str, run: Run, baseline: Run) -> dict:
    """The medians over rounds of one case at one flow count (machine keys, for the JSON)."""
    def median(metric) -> float:
        return statistics.median(metric(*one) for one in run.rounds)

    cpu = [_cpu_per_mb(*one) for one in run.rounds]
    return {"flows": run.flows, "receiver": case, "gbit_per_s": median(_gbit_per_s),
            "mapped_percent": median(_mapped_percent), "cpu_us_per_mb": statistics.median(cpu),
            "cpu_us_per_mb_rounds": cpu,
            "ratio": statistics.median(cpu) / statistics.median(
                _cpu_per_mb(*one) for one in baseline.rounds),
            "switches_per_mb": median(_switches_per_mb)}


def _table(rows: list[dict]) -> str:
    return tabulate(
        [[r["flows"], r["receiver"], r["gbit_per_s"], r["mapped_percent"], r["cpu_us_per_mb"],
          f"{min(r['cpu_us_per_mb_rounds']):.0f}–{max(r['cpu_us_per_mb_rounds']):.0f}",
          f"{r['ratio']:.2f}×", r["switches_per_mb"]] for r in rows],
        headers=["flows", "receiver", "Gbit/s", "% mmap'ed", "µs CPU per MB", "min–max",
                 f"÷ {BASELINE}", "c-switches per MB"],
        tablefmt="github", floatfmt=".3g")


def _flow_counts(text: str) -> list[int]:
    counts = [int(n) for n in text.split(",")]  # ValueError: argparse names the option
    if min(counts) < 1:
        raise ValueError(text)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench tcp_mmap",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--flows", default="1,2,4,8", type=_flow_counts,
                        help="flow counts, comma-separated")
    parser.add_argument("--size", default="256M", help="bytes per flow (K/M/G suffixes)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("bench-results"),
                        help="directory for the JSON record")
    args = parser.parse_args(argv)
    flow_counts = args.flows
    size = parse_size(args.size, "--size")
    huge = default_alignment()
    recipe = dict(zerocopy=True, mss=LOOPBACK_MSS)
    cases = {
        BASELINE: (dict(mss=LOOPBACK_MSS), recipe),
        "zerocopy a=4K": (dict(recipe, align=4096), recipe),
        f"zerocopy a={huge >> 20}M": (dict(recipe, align=huge), recipe),
        "recv, 64K MSS": ({}, {}),
    }
    runs = {(n, case): Run(n, size, receiver, sender)
            for n in flow_counts for case, (receiver, sender) in cases.items()}
    interleave({f"{n} {case}": InProcess(run) for (n, case), run in runs.items()},
               rounds=args.rounds, warmup=args.warmup)
    for run in runs.values():
        del run.rounds[:args.warmup]

    rows = [_row(case, runs[n, case], runs[n, BASELINE]) for n, case in runs]
    title = "tcp_mmap: receive zero-copy on loopback, parallel flows"
    print(f"## {title}\n\nsender: MSG_ZEROCOPY, MSS {LOOPBACK_MSS} (last case: plain send, "
          f"default MSS); {args.size} per flow; median of {args.rounds} interleaved rounds; "
          f"{multiprocessing.cpu_count()} CPUs\n\n{_table(rows)}\n", flush=True)
    _save(args.out, title, rows, dict(flows=flow_counts, size=size, rounds=args.rounds,
                                      huge_page=huge, mss=LOOPBACK_MSS))
    return 0


def _save(out_dir: Path, title: str, rows: list[dict], params: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    record = {"title": title, "baseline": BASELINE, "params": params,
              "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "kernel": os.uname().release, "rows": rows}
    (out_dir / "tcp-mmap.json").write_text(json.dumps(record, indent=2) + "\n")
