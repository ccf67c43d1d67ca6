"""Probe lines beyond the tdc cases, each the first line of a batch whose second line must then
run (or not) as in tc: gact's and mirred's whole grammar, the action kinds tc falls back to
gact for, and the words tc uses for a bad id, a missing program or device. Stdout, stderr, exit
status and kernel state must equal ``tc -b``'s, with and without ``-force``."""

from __future__ import annotations

import pytest

from tc_helpers import side_by_side

AFTER = "actions add action mirred egress redirect dev vethB index 5\n"

PROBES = [
    # gact (tdc 8e47, ca89, 2241 forms and their refusals)
    "actions add action pass random determ drop 2 index 90",
    "actions add action gact index 1",
    "actions add action pump",
    "actions add action mpls",
    "actions add action gact bogus",
    "actions add action drop index 99999999999",
    "actions add action pass random foo drop 2",
    "actions add action pass random determ drop 20000",
    "actions add action pass random determ",
    "actions add action pass help",
    "actions add action drop index x",
    "actions add action drop cookie 12 index 3",
    "actions add action gact goto chain 5 index 4",
    "actions add action gact goto 5",
    "actions add action jump x",
    "actions add action trap",
    "actions add action p",
    # mirred
    "actions add action mirred egress redirect dev vethB index 7 drop",
    "actions add action mirred egress mirror dev vethB pipe index 8",
    "actions add action mirred egress redirect dev vethB index x",
    "actions add action mirred egress egress redirect dev vethB index 7",
    "actions add action mirred egress ingress redirect dev vethB",
    "actions add action mirred egress redirect mirror dev vethB",
    "actions add action mirred egress foo redirect dev vethB index 8",
    "actions add action mirred egress redirect action drop",
    "actions add action mirred egress redirect",
    "actions add action mirred index 9 foo",
    "actions add action mirred index 9 index 10",
    "actions add action mirred sideways",
    "actions add action mirred help",
    "actions add action mirred i redirect dev vethB index 11",
    "actions add action mirred egress mirror dev vethB goto 5",
    "actions add action mirred egress mirror dev vethB index 3 index 4",
    "actions add action mirred egress redirect dev nosuch index 3 bogus",
    # skbedit (m_skbedit.c: absent from this kernel, the kernel's refusal is the error)
    "actions add action skbedit mark 5",
    "actions add action skbedit ptype m",
    "actions add action skbedit ptype foo",
    "actions add action skbedit mark x",
    "actions add action skbedit mark 5/y",
    "actions add action skbedit queue_mapping 70000",
    "actions add action skbedit priority zz",
    "actions add action skbedit",
    "actions add action skbedit index 3",
    "actions add action skbedit foo",
    "actions add action skbedit help",
    "actions add action skbedit mark 1 index x",
    "actions add action skbedit mark 1 goto 5",
    "actions add action skbedit mark 1 foo",
    # police (m_police.c; also u32's police shorthand)
    "actions add action police rate 1mbit burst 10k drop",
    "actions add action police rate 1mbit burst 10k conform-exceed drop/foo",
    "actions add action police rate 1mbit burst 10k conform-exceed foo",
    "actions add action police rate 1mbit burst 10k conform-exceed goto chain 3",
    "actions add action police avrate 1mbit rate 1mbit burst 10k",
    "actions add action police pkts_rate 100",
    "actions add action police pkts_rate 100 pkts_burst 10 rate 1mbit burst 1k",
    "actions add action police peakrate 2mbit rate 1mbit burst 10k",
    "actions add action police peakrate 2mbit burst 10k",
    "actions add action police rate 1mbit burst 10k overhead x",
    "actions add action police rate 1mbit burst 10k linklayer foo",
    "actions add action police rate 1mbit burst 10k index x",
    "actions add action police rate 1mbit burst 10k burst 5k",
    "actions add action police rate 1mbit burst zz",
    "actions add action police rate 1mbit burst 10k/3",
    "actions add action police rate x burst 1k",
    "actions add action police rate 1mbit",
    "actions add action police mtu 1500",
    "actions add action police foo",
    "actions add action police",
    "actions add action police help",
    "actions add action police rate 1mbit burst 10k goto 5",
    "actions add action police rate 1mbit burst 10k jump 5",
    "actions add action police rate 1mbit burst 10k d i 7",
    "filter add dev vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.1/32 police rate 1mbit",
    "filter add dev vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.1/32 police foo",
    "filter add dev vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.1/32 police",
    "filter add dev vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.1/32 police rate x burst 1k",
    "filter add dev vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.1/32 police avrate 1mbit classid 1:1",
    # vlan (m_vlan.c)
    "actions add action vlan pop",
    "actions add action vlan push id 10",
    "actions add action vlan push",
    "actions add action vlan push protocol ip id 3",
    "actions add action vlan push protocol foo id 3",
    "actions add action vlan pop id 3",
    "actions add action vlan push id 70000",
    "actions add action vlan push id 3 priority 8",
    "actions add action vlan push_eth dst_mac 02:00:00:00:00:01",
    "actions add action vlan push_eth dst_mac zz",
    "actions add action vlan push_eth dst_mac 1:300 src_mac 1:2",
    "actions add action vlan pop dst_mac 02:00:00:00:00:01",
    "actions add action vlan pop push",
    "actions add action vlan",
    "actions add action vlan help",
    "actions add action vlan foo",
    "actions add action vlan pop index x",
    "actions add action vlan pop goto 3",
    "actions add action vlan pop foo",
    "actions add action vlan push goto 5",
    "actions add action skbedit goto chain chain 4294967295",
    # csum (m_csum.c)
    "actions add action csum ip4h",
    "actions add action csum index 7",
    "actions add action csum ip4h index x",
    "actions add action csum foo",
    "actions add action csum and",
    "actions add action csum",
    "actions add action csum help",
    "actions add action csum tcp c udp",
    "actions add action csum tcp h",
    "actions add action csum tcp goto 5",
    # connmark (m_connmark.c)
    "actions add action connmark",
    "actions add action connmark zone 70000",
    "actions add action connmark zone x",
    "actions add action connmark zone",
    "actions add action connmark p index 3",
    "actions add action connmark help",
    "actions add action connmark index x",
    "actions add action connmark goto 5",
    "actions add action connmark foo",
    # sample (m_sample.c)
    "actions add action sample rate 100 group 5",
    "actions add action sample rate x group 5",
    "actions add action sample rate 100 group y",
    "actions add action sample rate 100 group 5 trunc z",
    "actions add action sample rate 100",
    "actions add action sample group 100",
    "actions add action sample",
    "actions add action sample help",
    "actions add action sample foo",
    "actions add action sample rate 100 group 5 index x",
    "actions add action sample rate 100 group 5 goto 5",
    "actions add action sample rate 100 goto 5",
    # no action at all
    "actions add action",
    "actions add",
    # filters
    "filter add dev vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.1/32 action drop index 3 flowid 1:5",
    "filter add dev vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.1/32 flowid 1:6 classid 1:5",
    "filter add dev vethA vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.1/32 action pipe",
    "filter add dev nosuch ingress protocol ip prio 1 u32 match bogus",
    "filter add dev vethA ingress protocol ip prio 2 u32 match u8 0 0 flowid 1:6 classid",
    "filter add dev vethA ingress protocol ip prio 2 u32 divisor",
    "filter add dev vethA ingress protocol ip prio 2 u32 match u8 0 0 indev",
    "filter add dev vethA ingress protocol ip prio 1 foo bar",
    # tc's words for bad ids, a missing program or object
    "filter add dev vethA ingress bpf pinned /nonexistent/prog da",
    "filter add dev vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.1/32 classid 1:zz",
    "class add dev vethA parent 1: classid zz htb rate 1mbit",
    "filter add dev vethA ingress matchall classid xyz action drop",
    "qdisc add dev vethA root handle zz: htb",
    "filter add dev vethA ingress bpf obj /nonexistent.o sec foo",
]


@pytest.mark.parametrize("mode", [(), ("-force",)], ids=["stop", "force"])
@pytest.mark.parametrize("line", PROBES)
def test_probe_line_like_tc(tmp_path, line, mode):
    batch = tmp_path / "probe.tc"
    batch.write_text(f"qdisc add dev vethA ingress\n{line}\n{AFTER}")
    theirs, their_state, ours, our_state = side_by_side(batch, mode)
    assert (ours.returncode, ours.stdout, ours.stderr) == \
        (theirs.returncode, theirs.stdout, theirs.stderr)
    assert our_state == their_state
