"""For every supported line form, the netlink messages ``bpfbatch tc`` sends equal, byte for
byte, what the installed iproute2 ``tc`` sends for the same line (captured with strace).

Masked: sequence numbers and port ids, NLM_F_ACK (we ask only on each sendmsg's last message)
and the program fd in bpf filters and actions (each process opens its own). flower, matchall and
gact are refused by this kernel (modules absent), but tc still sends them, so they are compared
too.
htb classes carry rate tables computed from /proc/net/psched, compared whole.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tc_helpers import captured_messages, masked, pinned_program, veth_netns

LINES = """\
qdisc add dev vethA ingress
qdisc add dev vethB clsact
qdisc add dev vethB root handle 1: htb default 10
qdisc add dev vethA root handle 2: htb r2q 5
class add dev vethB parent 1: classid 1:1 htb rate 100mbit
class add dev vethB parent 1:1 classid 1:10 htb rate 1mbit ceil 10mbit prio 2 quantum 1500
class change dev vethB parent 1:1 classid 1:10 htb rate 700kbit ceil 1gbit
class replace dev vethB parent 1:1 classid 1:30 htb rate 40gbit
class add dev vethB parent 1:1 classid 1:40 htb rate 1000000 ceil 2mibit
class del dev vethB classid 1:30
class add dev vethB parent 1:1 classid 1:50 htb rate 20kbit burst 1000 cburst 2kb mtu 2048 mpu 64
class add dev vethB parent 1:1 classid 1:51 htb rate 20Kbit cburst 2000
qdisc add dev vethA root handle 3: htb direct_qlen 1024
qdisc replace dev vethA ingress
filter add dev vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.1/32 action mirred egress redirect dev vethB
filter add dev vethA ingress protocol ip prio 1 handle 1: u32 divisor 256
filter add dev vethA ingress protocol ip prio 1 u32 ht 800:: match ip dst 10.0.0.0/8 hashkey mask 0x000000ff at 16 link 1:
filter add dev vethA ingress protocol ip prio 1 handle 1:1:2 u32 ht 1:1: match ip dst 10.0.1.1/32 action mirred egress redirect dev vethB index 7 no_percpu
filter add dev vethA parent ffff: protocol ip prio 2 u32 match ip src 1.2.3.0/24 match ip sport 80 0xffff match ip dport 443 0xffff match ip protocol 6 0xff classid 1:10
filter add dev vethA ingress protocol ip prio 3 u32 match ip dst 10.0.0.2 action drop
filter add dev vethA ingress protocol ip prio 3 u32 match ip dst 10.0.0.3 action gact pass index 4
filter change dev vethA ingress protocol ip prio 1 handle 1:1:2 u32 ht 1:1: match ip dst 10.0.1.1/32 action mirred ingress mirror dev vethB
filter replace dev vethA ingress protocol ip prio 1 handle 1:1:2 u32 ht 1:1: match ip dst 10.0.1.1/32 action mirred egress mirror dev vethB
filter del dev vethA ingress protocol ip prio 1 handle 1:1:2 u32
filter add dev vethA ingress protocol all prio 7 u32 match u32 0 0 action continue
filter add dev vethA ingress prio 8 protocol ip u32 match ip tos 0x10 0xff action pipe action reclassify action ok
filter add dev vethA ingress protocol ip prio 10 u32 match u16 0x10 0xffff at 2 match u8 6 0xff at 9
filter add dev vethA ingress protocol ip prio 10 u32 match tcp src 22 FFFF match udp dst 53 0xffff classid 1:3
filter add dev vethA ingress protocol ip prio 10 u32 match u32 0x1 0xff at nexthdr+4 match icmp type 8 0xff
filter add dev vethA ingress protocol ip prio 10 u32 match ip dst 10.1.0.0/255.255.0.0 match ip ihl 5 0xf
filter add dev vethA ingress prio 11 u32 ht 800: sample u32 0x10203040 ff00f0 match u8 0 0 classid 1:1
filter add dev vethA ingress prio 11 u32 ht 800: sample ip dst 10.0.0.7 divisor 16 match u8 0 0 flowid 1:1
filter add dev vethA ingress protocol ip prio 12 u32 match ip src 127.0.0.1/32 indev vethB flowid 1:1 action drop
filter add dev vethA ingress prio 9 protocol ip u32 match u32 0x0a000000 0xff000000 at 12 skip_sw action mirred egress redirect dev vethB pass
filter add dev vethB egress bpf da pinned PROG
filter add dev vethA ingress prio 4 protocol ip handle 7 bpf object-pinned PROG classid 1:2
filter add dev vethA ingress bpf pinned PROG action mirred egress redirect dev vethB
filter add dev vethA ingress matchall action drop
filter add dev vethA ingress prio 6 handle 0x1z matchall skip_hw skip_hw action drop classid 1:2
filter add dev vethA ingress prio 13 bpf da
filter add dev vethA parent ffff: handle 1 protocol ip prio 100 bpf bytecode '4,40 0 0 12,21 0 1 2048,6 0 0 262144,6 0 0 0' classid 1:1
filter add dev vethA ingress protocol ip prio 14 handle 5/0xff fw classid 1:1 indev vethB action mirred egress redirect dev vethB
filter add dev vethA ingress protocol ip prio 14 handle 6 fw
filter add dev vethA ingress protocol ip prio 14 fw police rate 1mbit burst 10k drop flowid 1:3
filter add dev vethA ingress protocol ip prio 15 handle 0x10 basic classid 1:1 action drop
filter add dev vethA ingress protocol ip prio 15 basic
filter add dev vethA ingress protocol ip prio 16 route to 5 classid 1:1
filter add dev vethA ingress protocol ip prio 16 route from cosmos order 3 fromif vethB action pass
filter add dev vethA ingress protocol ip prio 16 handle 9 route to 7
actions add action nat ingress 10.0.0.0/8 192.168.1.1 index 3
actions add action nat egress 10.1.1.1 10.2.2.2 drop
actions add action nat egress 0.0.0.0/0 10.2.2.2
actions add action nat ingress 10.2/255.255.0.0 0x0a.1 pass
actions add action nat egress default 1
actions add action tunnel_key set src_ip 10.0.0.1 dst_ip 10.0.0.2 id 7 dst_port 4789 tos 0x10 ttl 64 nocsum index 3
actions add action tunnel_key unset drop
actions add action tunnel_key set dst_ip 2001:db8::1 src_ip 10.1 id 1 csum pipe cookie aa
filter add dev vethA parent ffff: handle 2 protocol IP prio 100 chain 7 bpf bytecode '1,6 0 0 0' skip_sw da
filter del dev vethA ingress prio 4 protocol 802.1Q handle 7 bpf
qdisc add dev vethB parent 1:1 handle 10:0 htb
filter add dev vethA ingress prio 5 matchall skip_sw action mirred egress redirect dev vethB
filter add dev vethA prio 1 protocol ip ingress handle 1  flower skip_hw src_mac e4:11:00:00:00:00 dst_mac e4:12:00:00:00:00 action drop 
filter add dev vethA prio 1 protocol ip ingress handle 2  flower skip_hw src_mac e4:11:00:00:00:01 dst_mac e4:12:00:00:00:01 action drop index 1
filter replace dev vethA prio 1 protocol ip ingress handle 1  flower skip_hw src_mac e4:11:00:00:00:00 dst_mac e4:12:00:00:00:00 action drop 
filter del dev vethA prio 1 protocol ip ingress handle 1 flower
actions add action gact drop index 1
actions add action pass random determ drop 2 index 90
actions add action pass random netrand goto chain 1 2 index 91
actions add action gact index 1
actions add action gact goto chain 5 index 4 action trap action dr i 3 action rec
actions replace action goto chain 42 random determ drop 5 index 90 cookie c1a0c1a0
filter add dev vethA ingress protocol ip prio 14 u32 match ip dst 10.0.0.9/32 flowid 1:6 classid 1:5 action drop flowid 1:7
actions add action pass
actions add action gact reclassify index 3 no_percpu
actions add action gact pass index 5 skip_sw skip_hw
actions add action mirred egress redirect dev vethB index 21 no_percpu skip_hw
actions add action mirred egress redirect dev vethB index 9 no_percpu
actions change action mirred egress mirror dev vethB index 9
actions replace action mirred ingress redirect dev vethB index 9
actions add action skbedit mark 0x10/0xff priority 1:2 queue_mapping 3 ptype host inheritdsfield index 7
actions add action skbedit mark 5 drop index 9 cookie 1234 no_percpu
filter add dev vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.1/32 action skbedit priority 1:3 pipe action mirred egress redirect dev vethB
actions add action police rate 1mbit burst 10k conform-exceed drop/pipe index 4
actions add action police rate 10gbit burst 100k/64 mtu 9000 mpu 64 overhead 14 linklayer atm peakrate 20gbit pass
actions add action police avrate 1mbit pipe
actions add action police pkts_rate 1000 pkts_burst 100 drop
actions add action police index 5 conform-exceed 3
filter add dev vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.1/32 police rate 1mbit burst 10k drop flowid 1:1
filter add dev vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.1/32 action police rate 1mbit burst 10k action mirred egress redirect dev vethB
actions add action vlan push protocol 802.1ad id 10 priority 3 drop index 4
actions add action vlan modify id 0x20 protocol 802.1Q
actions add action vlan push_eth dst_mac 1:2 src_mac 0x3:+4:5:6:7:8:9 pass
actions add action vlan pop_eth cookie 12 no_percpu
filter add dev vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.1/32 action vlan pop action mirred egress redirect dev vethB
actions add action csum iph and tcp or udp + sctp drop index 5
actions add action csum i ic ig t u udpl s cookie 12 no_percpu
filter add dev vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.1/32 action csum udp action mirred egress redirect dev vethB
actions add action connmark zone 5 drop index 9
actions add action connmark c conn zone 1 shot cookie 12 no_percpu
actions add action sample rate 100 group 5 trunc 128 drop index 4
actions add action sample r 10 g 2 t 64 cookie 12 no_percpu
actions add action sample index 7
actions del action mirred index 9
actions add action mirred egress mirror index 11 dev vethB
actions add action mirred ingress mirror dev vethB jump 10 index 12
actions add action mirred ingress mirror dev vethB reclassify cookie aa11bb22cc33dd44ee55
actions add action mirred egress redirect dev vethB index 13 cookie 0102 no_percpu
actions add action mirred ingress mirror dev vethB goto chain 42 index 14
actions add action mirred index 15
actions add action mirred egress redirect index 16 dev vethB action pipe
actions add action mirred egress redirect dev vethB index 10 action mirred egress redirect dev vethB index 11
actions add action mirred egress redirect dev vethB index 17 cookie aabb action mirred egress redirect dev vethB index 18 action mirred egress redirect dev vethB index 19 cookie cc action pass index 20
"""
#: More forms, a file per kind (``data/tc_bytes/<kind>.txt``, ``#`` comments), sent before the
#: qdiscs are deleted.
LINES += "".join(line + "\n" for path in sorted((Path(__file__).parent / "data" / "tc_bytes").glob("*.txt"))
                 for line in path.read_text().splitlines() if line and not line.startswith("#"))
LINES += """\
qdisc del dev vethB clsact
qdisc del dev vethA ingress
"""

#: The program fd of a bpf filter (TCA_BPF_FD) or action (TCA_ACT_BPF_FD, before its name).
_BPF_FD = re.compile(rb"(\x08\x00\x06\x00)....|(\x08\x00\x05\x00)....(?=..\x06\x00)", re.DOTALL)


def _comparable(message: bytes) -> bytes:
    message = masked(message)
    if b"\x08\x00\x01\x00bpf\x00" in message:
        message = _BPF_FD.sub(lambda m: (m[1] or m[2]) + bytes(4), message)
    return message


@pytest.fixture(scope="module")
def both_sent(tmp_path_factory):
    """(tc's messages, ours) for LINES, each sent with --force in its own fresh netns."""
    with pinned_program() as prog:
        batch = tmp_path_factory.mktemp("tc") / "forms.tc"
        batch.write_text(LINES.replace("PROG", prog))
        with veth_netns() as ns_tc, veth_netns() as ns_ours:
            theirs = captured_messages(["ip", "netns", "exec", ns_tc, "tc", "-force", "-b", str(batch)])
            ours = captured_messages([sys.executable, "-c", "from bpfbatch.cli import main; main()",
                                      "tc", "--force", "-b", str(batch), "--netns", ns_ours])
    return theirs, ours


def test_one_message_per_line(both_sent):
    theirs, ours = both_sent
    assert len(theirs) == len(LINES.splitlines())
    assert len(ours) == len(theirs)


@pytest.mark.parametrize("index", range(len(LINES.splitlines())),
                         ids=[line.split(" dev ")[0] + f"#{n + 1}" for n, line in enumerate(LINES.splitlines())])
def test_same_bytes_as_tc(both_sent, index):
    theirs, ours = both_sent
    assert _comparable(ours[index]).hex() == _comparable(theirs[index]).hex(), LINES.splitlines()[index]


def test_ours_batches_many_messages_per_sendmsg(tmp_path):
    """2,000 lines of 76-byte messages (~150 KiB, well below the batch size) go out in five
    sendmsgs: the first of 8 KiB, so that the kernel starts on them while the rest are parsed,
    each next one twice as large (8 + 16 + 32 + 64 KiB, then the rest); tc sends 2,000."""
    batch = tmp_path / "actions.tc"
    batch.write_text("".join(f"actions add action mirred egress redirect dev vethB index {i}\n"
                             for i in range(1, 2001)))
    with veth_netns() as ns:
        out = _strace_sendmsg_count([sys.executable, "-c", "from bpfbatch.cli import main; main()",
                                     "tc", "-b", str(batch), "--netns", ns])
    assert out == 5


def _strace_sendmsg_count(argv: list[str]) -> int:
    proc = subprocess.run(["strace", "-f", "-qq", "-c", "-e", "trace=sendmsg,sendto", *argv],
                          capture_output=True, text=True, check=True)
    calls = re.findall(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(sendmsg|sendto)$",
                       proc.stderr, re.M)
    return sum(int(n) for n, _ in calls)
