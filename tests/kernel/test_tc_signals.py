"""SIGINT/SIGTERM in the middle of a batch: the command stops after the send in flight (undone
as a failure would be) and says how far it got; the kernel holds exactly the lines it names."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest

from tc_helpers import action_indexes, veth_netns

COUNT = 150_000


@pytest.fixture(scope="module")
def big_batch(tmp_path_factory):
    path = tmp_path_factory.mktemp("sig") / "big.tc"
    with path.open("w") as out:
        for i in range(1, COUNT + 1):
            out.write(f"actions add action mirred egress redirect dev vethB index {i}\n")
    return path


def _any_action(ns: str) -> bool:
    listed = subprocess.run(["ip", "netns", "exec", ns, "tc", "actions", "get", "action", "mirred",
                             "index", "1"], capture_output=True)
    return listed.returncode == 0


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.3])
@pytest.mark.parametrize("extra", [(), ("--coalesce",)], ids=["plain", "coalesce"])
def test_signal_reports_exactly_what_was_applied(big_batch, signum, delay, extra):
    """With --coalesce a message carries 32 lines: the report still counts lines, not messages."""
    with veth_netns() as ns:
        child = subprocess.Popen([sys.executable, "-c", "from bpfbatch.cli import main; main()",
                                  "tc", "-b", str(big_batch), "-n", ns, "--batch-bytes", "16384",
                                  *extra], stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not _any_action(ns) and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # the batch is being sent: now the moments that matter
        time.sleep(delay)
        child.send_signal(signum)
        _, stderr = child.communicate(timeout=120)
        applied = action_indexes(ns)
    if child.returncode == 0:  # finished before the signal landed
        assert applied == list(range(1, COUNT + 1))
        return
    assert child.returncode == 1, stderr
    found = re.search(r"interrupted by SIG(?:INT|TERM).*; (\d+) applied, up to line (\d+)", stderr)
    assert found, stderr
    count, last = int(found.group(1)), int(found.group(2))
    assert count == last
    assert applied == list(range(1, last + 1))
    assert "Traceback" not in stderr
