"""``bpfbatch tc apply``: N htb classes + N u32 filters (a 256-bucket hash, each filter sending
to its own class) on one device, in a throwaway network namespace.

Rows, in one run, as ratios to ``bpfbatch tc -b`` of the same file on an empty device:

* ``tc -b`` and ``bpfbatch tc apply`` of that file on an empty device (a first apply);
* ``tc apply`` of the same file again: nothing to change (the goal: no message, <= 0.5 s);
* ``tc apply`` of the file with 1% of its objects changed (half class rates, half filter
  targets): messages = that 1%.

Each case's messages are counted by its ``--plan`` (the lines apply sends) and checked against
the summary line of a real apply. Whole processes, interleaved rounds, the device's state set
up untimed before each run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.bench.harness import Command, interleave, report, summarize
from tools.bench.tc import Lab, _bpfbatch, _tc

ROOT = Path(__file__).resolve().parents[2]
BASELINE = "bpfbatch tc -b (empty device)"


def write_state(path: Path, count: int, changed: int = 0) -> None:
    """The desired state; ``changed`` objects differ (every ``count // changed``-th class gets
    another rate, as many filters another class)."""
    step = count // changed if changed else 0
    with path.open("w") as out:
        out.write("qdisc add dev vethA root handle 1: htb default 1\n")
        for i in range(1, count + 1):
            rate = 1 + i % 100 + (1000 if step and i % step == 0 and (i // step) % 2 else 0)
            out.write(f"class add dev vethA parent 1: classid 1:{i:x} htb rate {rate}mbit\n")
        out.write("filter add dev vethA parent 1: protocol ip prio 1 handle 2: u32 divisor 256\n"
                  "filter add dev vethA parent 1: protocol ip prio 1 handle ::1 u32 match ip dst "
                  "10.0.0.0/8 hashkey mask 0x000000ff at 16 link 2:\n")
        for i in range(count):
            a, b, c = (i >> 16) & 255, (i >> 8) & 255, i & 255
            target = i + 1
            if step and (i + 1) % step == 0 and not ((i + 1) // step) % 2:
                target = count + 1 - target
            out.write(f"filter add dev vethA parent 1: protocol ip prio 1 handle "
                      f"2:{c:x}:{(i >> 8) + 1:x} u32 ht 2:{c:x}: match ip dst 10.{a}.{b}.{c}/32 "
                      f"flowid 1:{target:x}\n")


def _lines_planned(ours: list[str], path: Path, netns: str) -> int:
    plan = subprocess.run([*ours, "tc", "apply", str(path), "-n", netns, "--plan"],
                          capture_output=True, text=True, check=True)
    return len(plan.stdout.splitlines())


def _lines_sent(ours: list[str], path: Path, netns: str) -> int:
    done = subprocess.run([*ours, "tc", "apply", str(path), "-n", netns], capture_output=True,
                          text=True, check=True)
    return int(re.search(r"(\d+) lines sent", done.stderr).group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench tc_apply",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--count", type=int, default=10_000,
                        help="htb classes, and as many u32 filters")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results")
    args = parser.parse_args(argv)
    if os.geteuid() != 0 or not shutil.which("tc"):
        print("tc_apply bench: needs root and iproute2's tc", file=sys.stderr)
        return 2
    ours = _bpfbatch()
    with tempfile.TemporaryDirectory() as tmp, Lab() as lab:
        full, changed = Path(tmp) / "state.tc", Path(tmp) / "changed.tc"
        write_state(full, args.count)
        write_state(changed, args.count, changed=max(1, args.count * 2 // 100))
        ns = lab.netns

        def empty() -> None:
            _tc(ns, "qdisc", "del", "dev", "vethA", "root", check=False)

        def applied() -> None:
            if _lines_planned(ours, full, ns):
                _lines_sent(ours, full, ns)

        applied()
        noop = _lines_planned(ours, full, ns)
        one_percent = _lines_planned(ours, changed, ns)
        assert _lines_sent(ours, changed, ns) == one_percent
        objects = 2 * args.count + 3
        cases = {
            "tc -b (empty device)": Command(["tc", "-netns", ns, "-b", str(full)], setup=empty),
            BASELINE: Command([*ours, "tc", "-b", str(full), "--netns", ns], setup=empty),
            f"bpfbatch tc apply (empty device, {objects} messages)": Command(
                [*ours, "tc", "apply", str(full), "-n", ns], setup=empty),
            f"bpfbatch tc apply (nothing to change, {noop} messages)": Command(
                [*ours, "tc", "apply", str(full), "-n", ns], setup=applied),
            f"bpfbatch tc apply (1% changed, {one_percent} messages)": Command(
                [*ours, "tc", "apply", str(changed), "-n", ns], setup=applied),
        }
        rows = summarize(interleave(cases, rounds=args.rounds, warmup=args.warmup), BASELINE)
        report(f"tc apply: {args.count:,} htb classes + {args.count:,} u32 filters", rows,
               BASELINE, out_dir=args.out, params=dict(count=args.count, noop_messages=noop,
                                                       one_percent_messages=one_percent))
    return 0
