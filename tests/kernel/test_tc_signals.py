"""SIGINT/SIGTERM/SIGHUP in the middle of a batch: the command stops after the send in flight
(its replies read, undone as a failure would be), says in one line how far it got and exits
128 + the signal; the kernel holds exactly the lines it names, judged by ``tc -j``."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from fault_helpers import communicate
from tc_helpers import action_indexes, veth_netns

COUNT = 150_000
FILTERS = 20_000
_REPORT = re.compile(r"^bpfbatch: \S+: interrupted \((SIG[A-Z]+)\) (?:after .*?(\d+) applied, up to "
                     r"line (\d+)|before any line was sent)[^\n]*\n\Z")


@pytest.fixture(scope="module")
def big_batch(tmp_path_factory):
    path = tmp_path_factory.mktemp("sig") / "big.tc"
    with path.open("w") as out:
        for i in range(1, COUNT + 1):
            out.write(f"actions add action mirred egress redirect dev vethB index {i}\n")
    return path


@pytest.fixture(scope="module", params=["handle", "auto"])
def filter_batch(request, tmp_path_factory):
    """A u32 hash layout (three lines) then FILTERS key nodes, with explicit handles or with
    handles the kernel picks (echoed back to the sender)."""
    path = tmp_path_factory.mktemp("sigf") / f"filters-{request.param}.tc"
    head = "filter add dev vethA ingress protocol ip prio 1"
    with path.open("w") as out:
        out.write("qdisc add dev vethA ingress\n"
                  f"{head} handle 1: u32 divisor 256\n"
                  f"{head} u32 ht 800:: match ip dst 10.0.0.0/8 hashkey mask 0x000000ff at 16 link 1:\n")
        for i in range(FILTERS):
            bucket, node = i & 0xFF, (i >> 8) + 1
            handle = f" handle 1:{bucket:x}:{node:x}" if request.param == "handle" else ""
            out.write(f"{head}{handle} u32 ht 1:{bucket:x}: match ip dst 10.0.{i >> 8}.{bucket}/32 "
                      "flowid 1:1\n")
    return path


def _tc(ns: str, *query: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", ns, "tc", *query], capture_output=True, text=True)


def _mirred_one(ns: str) -> bool:
    return _tc(ns, "actions", "get", "action", "mirred", "index", "1").returncode == 0


def _ingress(ns: str) -> bool:
    return "ingress" in _tc(ns, "qdisc", "show", "dev", "vethA").stdout


def _interrupt(path, ns: str, signum: int, delay: float, probe, extra=()) -> tuple[int, str]:
    """Run bpfbatch tc on ``path``; ``delay`` s after ``probe(ns)`` holds, send ``signum``."""
    child = subprocess.Popen([sys.executable, "-c", "from bpfbatch.cli import main; main()",
                              "tc", "-b", str(path), "-n", ns, "--batch-bytes", "16384", *extra],
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not probe(ns) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)  # the batch is being sent: now the moments that matter
    time.sleep(delay)
    child.send_signal(signum)
    _, stderr = communicate(child, 120)
    return child.returncode, stderr


def _reported(returncode: int, stderr: str, signum: int) -> int | None:
    """The lines the report says were applied (None: the run was over when the signal came:
    it exited 0, or — past the command, in the interpreter's exit, where the CLI's handlers
    are no longer set — the signal's default action ended it, silently)."""
    if returncode in (0, -signum):
        assert stderr == ""
        return None
    assert returncode == 128 + signum, stderr
    found = _REPORT.match(stderr)
    assert found, stderr
    assert found.group(1) == signal.Signals(signum).name
    if found.group(2) is None:
        return 0
    count, last = int(found.group(2)), int(found.group(3))
    assert count == last  # nothing failed: every line up to the last accounted was applied
    return last


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.3])
@pytest.mark.parametrize("extra", [(), ("--coalesce",)], ids=["plain", "coalesce"])
def test_signal_reports_exactly_what_was_applied(big_batch, signum, delay, extra):
    """With --coalesce a message carries 32 lines: the report still counts lines, not messages."""
    with veth_netns() as ns:
        returncode, stderr = _interrupt(big_batch, ns, signum, delay, _mirred_one, extra)
        applied = action_indexes(ns)
    last = _reported(returncode, stderr, signum)
    assert applied == list(range(1, (COUNT if last is None else last) + 1))


def _key_nodes(ns: str) -> int:
    out = _tc(ns, "-j", "filter", "show", "dev", "vethA", "ingress").stdout
    return sum(1 for f in json.loads(out or "[]")
               if "match" in f.get("options", {}) and f["options"]["fh"].startswith("1:"))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("moment", range(8))
def test_signal_report_equals_the_filters_the_kernel_holds(filter_batch, signum, moment):
    """Signals swept over the send (each run a different moment, up to and past its end): the
    report's count is what ``tc -j filter show`` lists — the last send's replies are read first."""
    with veth_netns() as ns:
        returncode, stderr = _interrupt(filter_batch, ns, signum, moment * 0.35, _ingress)
        held = _key_nodes(ns)
    last = _reported(returncode, stderr, signum)
    # lines 1-3 are the qdisc and the tables; key node k is line k + 3
    assert held == (FILTERS if last is None else max(last - 3, 0)), stderr
