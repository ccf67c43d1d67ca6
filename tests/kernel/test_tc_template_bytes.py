"""Lines sent from templates (repeated shapes) against the installed iproute2 ``tc``: the
messages are captured with strace and compared byte for byte, as test_tc_bytes does for lines
that each appear once (and so always take the full parser)."""

from __future__ import annotations

import sys

import pytest

from tc_helpers import captured_messages, masked, veth_netns


def _repeated_shapes() -> str:
    lines = ["qdisc add dev vethA ingress",
             "filter add dev vethA ingress protocol ip prio 1 handle 1: u32 divisor 256",
             "filter add dev vethA ingress protocol ip prio 1 u32 ht 800:: match ip dst 10.0.0.0/8 "
             "hashkey mask 0x000000ff at 16 link 1:"]
    for i in range(1, 7):
        lines.append(f"actions add action mirred egress redirect dev vethB index {i * 4099}")
        lines.append(f"filter add dev vethA ingress protocol ip prio 1 handle 1:{i:x}:{i + 1:x} u32 "
                     f"ht 1:{i:x}: match ip dst 10.{i}.{i * 7}.{i}/32 action mirred egress redirect "
                     f"dev vethB")
        lines.append(f"filter add dev vethA ingress protocol ip prio {i + 2} u32 match ip src "
                     f"192.168.{i}.0/24 action gact drop index {i}")
        lines.append(f"filter add dev vethA prio 1 protocol ip ingress handle {i}  flower skip_hw "
                     f"src_mac e4:11:00:00:{i:02x}:00 dst_mac e4:12:00:00:00:{i:02x} action drop ")
        lines.append(f"actions del action gact index {i}")
    return "".join(f"{line}\n" for line in lines)


@pytest.mark.parametrize("extra", [(), ("--coalesce",)], ids=["plain", "coalesce"])
def test_template_lines_send_what_tc_sends(tmp_path, extra):
    batch = tmp_path / "shapes.tc"
    batch.write_text(_repeated_shapes())
    with veth_netns() as ns_tc, veth_netns() as ns_ours:
        theirs = captured_messages(["ip", "netns", "exec", ns_tc, "tc", "-force", "-b", str(batch)])
        ours = captured_messages([sys.executable, "-c", "from bpfbatch.cli import main; main()",
                                  "tc", "--force", "-b", str(batch), "--netns", ns_ours, *extra])
    assert len(theirs) == len(batch.read_text().splitlines())
    assert [masked(m).hex() for m in ours] == [masked(m).hex() for m in theirs]
