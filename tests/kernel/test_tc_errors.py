"""Failing batches: the right lines, exit status, and an exact applied / not-applied report —
checked against the kernel's resulting state and against what the installed tc reports."""

from __future__ import annotations

import re
import sys

import pytest

from tc_helpers import (bpfbatch_tc, failed_lines, run, side_by_side, tc_state,
                        veth_netns)


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


@pytest.mark.parametrize("mode", [(), ("-force",)], ids=["stop", "force"])
def test_mixed_failures_leave_what_tc_leaves(tmp_path, mode):
    batch = tmp_path / "mixed.tc"
    batch.write_text(MIXED)
    theirs, their_state, ours, our_state = side_by_side(batch, mode)
    assert (ours.returncode, failed_lines(ours.stderr), our_state) == \
        (theirs.returncode, failed_lines(theirs.stderr), their_state)
    assert failed_lines(ours.stderr) == ([3, 6, 8] if mode else [3])


@pytest.mark.parametrize("batch_bytes", ["1024", "4096", str(256 << 10)])
def test_lines_after_a_failure_in_the_same_sendmsg_are_undone(tmp_path, batch_bytes):
    """tc stops after line 3; the lines after it that travelled in the same sendmsg were
    applied by the kernel and must be undone: the same state, messages and status as tc."""
    batch = tmp_path / "dup.tc"
    batch.write_text(_add(1) + _add(2) + _add(1) + "".join(_add(i) for i in range(3, 60)))
    theirs, their_state, ours, our_state = side_by_side(batch, ours=("--batch-bytes", batch_bytes))
    assert our_state == their_state
    assert (ours.returncode, ours.stderr) == (theirs.returncode, theirs.stderr.replace(str(batch), str(batch)))


def test_missing_device_is_caught_before_sending(tmp_path):
    batch = tmp_path / "dev.tc"
    batch.write_text(_add(1) + _add(2) + _add(3, "nosuchdev") + _add(4))
    theirs, their_state, ours, our_state = side_by_side(batch)
    assert (ours.returncode, ours.stderr, our_state) == (theirs.returncode, theirs.stderr, their_state)
    assert ours.stderr.startswith('Cannot find device "nosuchdev"\nbad action parsing\n')


@pytest.mark.parametrize("line", [
    "filter add dev vethA ingress prio 1 protocol ip u32 match ip dst 10.0.0.300",
    "filter add dev vethA ingress u32 match ip dst 10.0.0.1 bogus",
    "qdisc add dev vethA ingress bogus",
])
def test_refused_lines_are_reported_like_tc(tmp_path, line):
    """Lines tc's own parser refuses: the same words, the same line, nothing after it."""
    batch = tmp_path / "bad.tc"
    batch.write_text("qdisc add dev vethA ingress\n\n" + line + "\n" + _add(9))
    theirs, their_state, ours, our_state = side_by_side(batch)
    assert failed_lines(theirs.stderr) == [3]
    assert (ours.returncode, ours.stderr, our_state) == (theirs.returncode, theirs.stderr, their_state)


def test_a_form_we_do_not_parse_fails_where_tc_fails(tmp_path):
    """``police`` is not implemented; tc refuses this line too (bad police spec): the same
    line fails and the same state is left, only the words differ."""
    batch = tmp_path / "police.tc"
    batch.write_text("qdisc add dev vethA ingress\n"
                     "filter add dev vethA ingress u32 match ip dst 10.0.0.1 police rate 1mbit\n" + _add(9))
    theirs, their_state, ours, our_state = side_by_side(batch)
    assert (ours.returncode, failed_lines(ours.stderr), our_state) == \
        (theirs.returncode, failed_lines(theirs.stderr), their_state) == (1, [2], their_state)


@pytest.mark.parametrize("mode", [(), ("-force",)], ids=["stop", "force"])
def test_coalesced_failure_is_retried_line_by_line(tmp_path, mode):
    """Lines 1-32 share one message, 33-40 a second, both in one sendmsg. Index 20 exists: the
    kernel refuses message one whole; 33-40 are undone, 1-19 applied one by one, 20 fails —
    and without -force nothing more is applied, as with tc."""
    batch = tmp_path / "many.tc"
    batch.write_text("".join(_add(i) for i in range(1, 41)))
    setup = [["actions", "add", "action", "mirred", "egress", "redirect", "dev", "vethA", "index", "20"]]
    theirs, their_state, ours, our_state = side_by_side(batch, mode, ("--coalesce",), setup)
    assert (ours.returncode, ours.stderr, our_state) == (theirs.returncode, theirs.stderr, their_state)
    assert failed_lines(ours.stderr) == [20]


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


def test_a_file_or_netns_that_cannot_be_opened_is_said_as_tc_says_it(tmp_path):
    """tc's words and status before any line: a netns it cannot enter (255, checked first, as
    tc enters it while reading its options), a file it cannot open (1), a directory (read as
    an empty file: 0)."""
    batch = tmp_path / "ok.tc"
    batch.write_text(_add(1))
    with veth_netns() as ns:
        cases = [("bpfb-no-such-netns", batch), ("bpfb-no-such-netns", tmp_path / "nope.tc"),
                 (ns, tmp_path / "nope.tc"), (ns, tmp_path)]
        for netns, path in cases:
            theirs = run(["tc", "-n", netns, "-b", str(path)], check=False)
            ours = bpfbatch_tc(netns, path)
            assert (ours.returncode, ours.stdout, ours.stderr) == \
                (theirs.returncode, theirs.stdout, theirs.stderr), (netns, path)
        assert [run(["tc", "-n", n, "-b", str(p)], check=False).returncode
                for n, p in cases] == [255, 255, 1, 0]


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
    theirs, their_state, ours, our_state = side_by_side(batch)
    assert theirs.stderr.startswith("Error: ")
    assert (ours.returncode, ours.stderr, our_state) == (theirs.returncode, theirs.stderr, their_state)


def test_kernel_warning_on_success_is_printed_like_tc(tmp_path):
    batch = tmp_path / "htb.tc"
    batch.write_text("qdisc add dev vethA root handle 1: htb\n"
                     "class add dev vethA parent 1: classid 1:1 htb rate 10gbit\n")
    theirs, their_state, ours, our_state = side_by_side(batch)
    assert "Warning: sch_htb: quantum of class 10001 is big" in theirs.stderr
    assert (ours.returncode, ours.stderr, our_state) == (theirs.returncode, theirs.stderr, their_state)


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
    assert ours.returncode == 1
