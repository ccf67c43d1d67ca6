"""``bpf obj FILE [sec NAME]``: the object file is loaded through the package's loader and the
filter equals what tc makes of the same line — same program (tag), name, bytes on the wire. The
bpf action loads its program the same way (this kernel has no act_bpf: the kernel's refusal is
the line's error, as in tc)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest

from tc_helpers import captured_messages, failed_lines, masked, side_by_side, veth_netns

_SOURCE = """\
#include <linux/bpf.h>
#define SEC(n) __attribute__((section(n), used))
SEC("action") int act(struct __sk_buff *skb) { return 0; }
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
    batch.write_text(f"filter add dev vethA ingress prio 1 handle 1 bpf obj {tc_object} sec action-ok da\n"
                     f"actions add action bpf obj {tc_object} index 3 cookie 0a\n"
                     f"actions add action bpf object-file {tc_object} sec action-ok program ok\n")
    with veth_netns() as ns:
        theirs = captured_messages(["ip", "netns", "exec", ns, "tc", "-force", "-b", str(batch)])
        ours = captured_messages([sys.executable, "-c", "from bpfbatch.cli import main; main()",
                                  "tc", "-force", "-b", str(batch), "-n", ns])
    assert [_comparable(m) for m in ours] == [_comparable(m) for m in theirs[-len(ours):]]


#: TCA_BPF_FD, or TCA_ACT_BPF_FD before the action's name: each process has its own fd number.
_FD = re.compile(rb"(\x08\x00\x06\x00)....|(\x08\x00\x05\x00)....(?=..\x06\x00)", re.DOTALL)


def _comparable(message: bytes) -> bytes:
    return _FD.sub(lambda m: (m[1] or m[2]) + bytes(4), masked(message))


def test_missing_section_fails_where_tc_fails(tmp_path, tc_object):
    batch = tmp_path / "obj.tc"
    batch.write_text("qdisc add dev vethA ingress\n"
                     f"filter add dev vethA ingress prio 1 bpf obj {tc_object} sec nosuch\n")
    theirs, their_state, ours, our_state = side_by_side(batch)
    assert (ours.returncode, failed_lines(ours.stderr), our_state) == \
        (theirs.returncode, failed_lines(theirs.stderr), their_state)
    assert failed_lines(ours.stderr) == [2]


def test_action_object_forms_fail_where_tc_fails(tmp_path, tc_object):
    """Each line loads its program while parsed (or fails to, in tc's words), then the kernel
    refuses act_bpf; ``export`` connects to its socket after the tail, and fails the action
    when nothing listens there, naming the words left as tc does."""
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listening.bind(str(tmp_path / "maps.sock"))
    batch = tmp_path / "act.tc"
    batch.write_text(f"actions add action bpf obj {tc_object}\n"
                     f"actions add action bpf obj {tc_object} sec nosuch index 3\n"
                     f"actions add action bpf obj {tc_object} program nosuch\n"
                     f"actions add action bpf obj {tc_object} sec classifier program ok drop\n"
                     f"actions add action bpf obj {tc_object} export {tmp_path}/none index 2 action pass\n"
                     f"actions add action bpf obj {tc_object} export {tmp_path}/maps.sock index 2\n"
                     "actions add action mirred egress redirect dev vethB index 5\n")
    with listening:
        theirs, their_state, ours, our_state = side_by_side(batch, ("-force",))
    assert (ours.returncode, ours.stdout, ours.stderr, our_state) == \
        (theirs.returncode, theirs.stdout, theirs.stderr, their_state)
    assert failed_lines(ours.stderr) == [1, 2, 3, 4, 5, 6]
