"""``bpf obj FILE [sec NAME]``: the object file is loaded through the package's loader and the
filter equals what tc makes of the same line — same program (tag), name, bytes on the wire."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tc_helpers import captured_messages, failed_lines, masked, side_by_side, veth_netns

_SOURCE = """\
#include <linux/bpf.h>
#define SEC(n) __attribute__((section(n), used))
SEC("action-ok") int ok(struct __sk_buff *skb) { return 0; }
SEC("classifier") int cls(struct __sk_buff *skb) { return -1; }
char LICENSE[] SEC("license") = "GPL";
"""


@pytest.fixture(scope="module")
def tc_object(tmp_path_factory):
    """A two-section tc object file, built with clang."""
    out = tmp_path_factory.mktemp("obj")
    (out / "act.c").write_text(_SOURCE)
    arch = subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True).stdout.strip()
    built = subprocess.run(["clang-16", "-O2", "-target", "bpf", f"-I/usr/include/{arch}", "-c",
                            str(out / "act.c"), "-o", str(out / "act.o")], capture_output=True, text=True)
    if built.returncode:
        pytest.skip(f"cannot build a BPF object here: {built.stderr.strip()}")
    return out / "act.o"


def test_object_file_filters_equal_tc(tmp_path, tc_object):
    batch = tmp_path / "obj.tc"
    batch.write_text("qdisc add dev vethA ingress\n"
                     f"filter add dev vethA ingress prio 1 handle 1 bpf obj {tc_object} sec action-ok\n"
                     f"filter add dev vethA ingress prio 2 handle 2 bpf object-file {tc_object} da\n")
    theirs, their_state, ours, our_state = side_by_side(batch)
    assert theirs.returncode == 0, theirs.stderr
    assert (ours.returncode, ours.stderr, our_state) == (0, "", their_state)
    names = [f["options"]["bpf_name"] for f in our_state["filter show dev vethA ingress"] if "options" in f]
    assert names == ["act.o:[action-ok]", "act.o:[classifier]"]


def test_object_file_bytes_equal_tc(tmp_path, tc_object):
    batch = tmp_path / "obj.tc"
    batch.write_text(f"filter add dev vethA ingress prio 1 handle 1 bpf obj {tc_object} sec action-ok da\n")
    with veth_netns() as ns:
        theirs = captured_messages(["ip", "netns", "exec", ns, "tc", "-b", str(batch)])
        ours = captured_messages([sys.executable, "-c", "from bpfbatch.cli import main; main()",
                                  "tc", "-b", str(batch), "-n", ns])
    fd_attr = b"\x08\x00\x06\x00"  # TCA_BPF_FD: each process has its own fd number

    def comparable(message: bytes) -> bytes:
        message = masked(message)
        at = message.find(fd_attr)
        return message[:at + 4] + b"\0" * 4 + message[at + 8:]
    assert [comparable(m) for m in ours] == [comparable(m) for m in theirs[-len(ours):]]


def test_missing_section_fails_where_tc_fails(tmp_path, tc_object):
    batch = tmp_path / "obj.tc"
    batch.write_text("qdisc add dev vethA ingress\n"
                     f"filter add dev vethA ingress prio 1 bpf obj {tc_object} sec nosuch\n")
    theirs, their_state, ours, our_state = side_by_side(batch)
    assert (ours.returncode, failed_lines(ours.stderr), our_state) == \
        (theirs.returncode, failed_lines(theirs.stderr), their_state)
    assert failed_lines(ours.stderr) == [2]
