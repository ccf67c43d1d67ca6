"""Failing batches: the right lines, exit status, and an exact applied / not-applied report —
checked against the kernel's resulting state and against what the installed tc reports."""

from __future__ import annotations

import re
import sys

import pytest

from tc_helpers import action_indexes, bpfbatch_tc, run, tc_batch, tc_state, veth_netns


def _add(index: int, dev: str = "vethB") -> str:
    return f"actions add action mirred egress redirect dev {dev} index {index}\n"


def _failed_lines(stderr: str) -> list[int]:
    return [int(n) for n in re.findall(r"^Command failed .*:(\d+)$", stderr, re.M)]


MIXED = (_add(1) + _add(2) + _add(1)                           # 3: duplicate
         + "# a comment line\n"
         + _add(3)
         + _add(4, "nosuchdev")                                # 6: missing device
         + "actions add action mirred egress \\\n  redirect dev vethB index 2\n"  # 8: duplicate, continued
         + _add(5) + "\n" + _add(6))


def test_force_reports_the_lines_tc_reports(tmp_path):
    batch = tmp_path / "mixed.tc"
    batch.write_text(MIXED)
    with veth_netns() as ns_tc, veth_netns() as ns_ours:
        theirs = tc_batch(ns_tc, batch, "-force")
        ours = bpfbatch_tc(ns_ours, batch, "--force")
        assert theirs.returncode != 0 and ours.returncode == 1
        assert _failed_lines(ours.stderr) == _failed_lines(theirs.stderr) == [3, 6, 8]
        assert action_indexes(ns_ours) == action_indexes(ns_tc) == [1, 2, 3, 5, 6]
    assert "RTNETLINK answers: File exists" in ours.stderr
    assert 'cannot find device "nosuchdev"' in ours.stderr
    assert ours.stderr.strip().splitlines()[-1].startswith(
        f"bpfbatch: error: {batch}: tc batch: 3 of 8 commands failed (first at line 3: File exists); 5 applied")


def test_stop_reports_lines_applied_anyway_from_the_same_sendmsg(tmp_path):
    """tc stops after line 3; we sent lines 1-9 in one sendmsg, so 4-9 went in regardless."""
    batch = tmp_path / "dup.tc"
    batch.write_text(_add(1) + _add(2) + _add(1) + "".join(_add(i) for i in range(3, 9)))
    with veth_netns() as ns_tc, veth_netns() as ns_ours:
        theirs = tc_batch(ns_tc, batch)
        ours = bpfbatch_tc(ns_ours, batch)
        assert _failed_lines(theirs.stderr) == _failed_lines(ours.stderr) == [3]
        assert action_indexes(ns_tc) == [1, 2]
        assert action_indexes(ns_ours) == list(range(1, 9))
    assert ours.returncode == 1
    assert ("stopped at the first failure; applied anyway from the same sendmsg: lines 4-9; "
            "not sent: every command after line 9") in ours.stderr
    assert ours.stderr.rstrip().endswith("(EEXIST)")


def test_stop_with_small_sendmsgs_leaves_later_batches_unsent(tmp_path):
    """1,024-byte sends hold 13 of these 76-byte messages: the failure on line 5 lets 6-13 in."""
    batch = tmp_path / "dup.tc"
    batch.write_text("".join(_add(i if i != 5 else 1) for i in range(1, 41)))
    with veth_netns() as ns:
        ours = bpfbatch_tc(ns, batch, "--batch-bytes", "1024")
        assert action_indexes(ns) == [i for i in range(1, 14) if i != 5]
    assert _failed_lines(ours.stderr) == [5]
    assert "applied anyway from the same sendmsg: lines 6-13; not sent: every command after line 13" \
        in ours.stderr


def test_missing_device_is_caught_before_sending(tmp_path):
    batch = tmp_path / "dev.tc"
    batch.write_text(_add(1) + _add(2) + _add(3, "nosuchdev") + _add(4))
    with veth_netns() as ns:
        ours = bpfbatch_tc(ns, batch)
        assert action_indexes(ns) == [1, 2]
    assert ours.returncode == 1
    assert ours.stderr.splitlines()[:2] == ['cannot find device "nosuchdev"', f"Command failed {batch}:3"]
    assert "not sent: every command after line 3" in ours.stderr


@pytest.mark.parametrize("line,token", [
    ("filter add dev vethA ingress u32 match ip dst 10.0.0.1 police rate 1mbit", "'police'"),
    ("filter add dev vethA ingress basic action drop", "'basic'"),
    ("chain add dev vethA ingress chain 3", "'chain'"),
    ("actions add action police rate 1mbit burst 10k", "'police'"),
    ("filter add dev vethA ingress prio 1 protocol ip u32 match ip dst 10.0.0.300", "10.0.0.300"),
])
def test_unsupported_input_names_file_line_and_token(tmp_path, line, token):
    batch = tmp_path / "bad.tc"
    batch.write_text("qdisc add dev vethA ingress\n\n" + line + "\n" + _add(9))
    with veth_netns() as ns:
        ours = bpfbatch_tc(ns, batch)
        assert action_indexes(ns) == []
    assert ours.returncode == 1
    first = ours.stderr.splitlines()[0]
    assert token in first
    assert f"Command failed {batch}:3" in ours.stderr


def test_coalesced_failure_is_retried_line_by_line(tmp_path):
    """Lines 1-32 share one message, 33-40 a second, both in one sendmsg. Index 20 exists:
    the kernel refuses message one whole; the retry applies 1-19, fails 20 and stops, so
    21-32 are not applied, while 33-40 were applied in the same sendmsg."""
    batch = tmp_path / "many.tc"
    batch.write_text("".join(_add(i) for i in range(1, 41)))
    with veth_netns() as ns:
        run(["ip", "netns", "exec", ns, "tc", "actions", "add", "action", "mirred", "egress",
             "redirect", "dev", "vethA", "index", "20"])
        ours = bpfbatch_tc(ns, batch, "--coalesce")
        assert action_indexes(ns) == [*range(1, 21), *range(33, 41)]
    assert _failed_lines(ours.stderr) == [20]
    assert ("applied anyway from the same sendmsg: lines 33-40; sent but not applied: lines 21-32; "
            "not sent: every command after line 40") in ours.stderr


def test_coalesced_failure_with_force_applies_the_rest(tmp_path):
    batch = tmp_path / "many.tc"
    batch.write_text("".join(_add(i) for i in range(1, 41)))
    with veth_netns() as ns:
        run(["ip", "netns", "exec", ns, "tc", "actions", "add", "action", "mirred", "egress",
             "redirect", "dev", "vethA", "index", "20"])
        ours = bpfbatch_tc(ns, batch, "--coalesce", "--force")
        state = tc_state(ns, ["actions", "list", "action", "mirred"])
    assert _failed_lines(ours.stderr) == [20]
    # tc prints one {"actions": [...]} object per dump message (32 actions each)
    actions = [a for chunk in state["actions list action mirred"] for a in chunk.get("actions", ())]
    assert sorted(a["index"] for a in actions) == list(range(1, 41))
    # index 20 is still the pre-existing rule (to vethA), not line 20's
    assert [a["to_dev"] for a in actions if a["index"] == 20] == ["vethA"]


def test_missing_file_and_netns(tmp_path):
    with veth_netns() as ns:
        missing = bpfbatch_tc(ns, tmp_path / "nope.tc")
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"bpfbatch: error: {tmp_path / 'nope.tc'}: cannot open batch file: No such file or directory"
    batch = tmp_path / "ok.tc"
    batch.write_text(_add(1))
    no_ns = bpfbatch_tc("bpfb-no-such-netns", batch)
    assert no_ns.returncode == 1
    assert "no such network namespace 'bpfb-no-such-netns'" in no_ns.stderr


_REPORT_HWM = ("import atexit, re\n"
               "atexit.register(lambda: print(re.search(r'VmHWM:\\s+(\\d+)',"
               " open('/proc/self/status').read()).group(1)))\n"
               "from bpfbatch.cli import main; main()")


def test_memory_stays_bounded_as_the_file_grows(tmp_path):
    """Streaming: ten times the lines must not mean more memory (8 MB slack for the allocator;
    tc 6.1 grows by 32 KiB per line). Measured as the child's own VmHWM: ru_maxrss would also
    count the address space it was forked from."""
    peaks = []
    with veth_netns() as ns:
        for count in (20_000, 200_000):
            batch = tmp_path / f"{count}.tc"
            with batch.open("w") as out:
                out.writelines(_add(i) for i in range(1, count + 1))
            run(["ip", "netns", "exec", ns, "tc", "actions", "flush", "action", "mirred"])
            done = run([sys.executable, "-c", _REPORT_HWM, "tc", "-b", str(batch), "--netns", ns,
                        "--coalesce"])
            peaks.append(int(done.stdout))
            batch.unlink()
    assert peaks[1] - peaks[0] < 8 << 10, peaks


def test_kernel_explanation_is_printed_like_tc(tmp_path):
    """flower is absent from this kernel: its refusal carries extack text (NETLINK_EXT_ACK)."""
    batch = tmp_path / "flower.tc"
    batch.write_text("qdisc add dev vethA ingress\n"
                     "filter add dev vethA ingress protocol ip prio 1 handle 1 flower skip_hw "
                     "src_mac e4:11:00:00:00:00 action drop\n")
    with veth_netns() as ns_tc, veth_netns() as ns_ours:
        theirs = tc_batch(ns_tc, batch)
        ours = bpfbatch_tc(ns_ours, batch)
    explanation = theirs.stderr.splitlines()[0]
    assert explanation.startswith("Error: ") and len(explanation) > len("Error: .")
    assert ours.stderr.splitlines()[:2] == [explanation, f"Command failed {batch}:2"]
    assert ours.returncode == 1


def test_every_reply_of_an_all_failing_sendmsg_fits(tmp_path):
    """3,000 refused messages in one sendmsg mean 3,000 error replies queued at once; the
    forced receive buffer holds them all (no ENOBUFS, no lost line)."""
    count = 3000
    batch = tmp_path / "dups.tc"
    batch.write_text("".join(_add(1) for _ in range(count)))
    with veth_netns() as ns:
        run(["ip", "netns", "exec", ns, "tc", "actions", "add", "action", "mirred", "egress",
             "redirect", "dev", "vethA", "index", "1"])
        ours = bpfbatch_tc(ns, batch, "--force", "--batch-bytes", str(1 << 20))
    assert _failed_lines(ours.stderr) == list(range(1, count + 1))
    assert f"{count} of {count} commands failed" in ours.stderr.splitlines()[-1]
