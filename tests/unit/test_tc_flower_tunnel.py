"""flower's tunnel and MPLS keys (:func:`bpfbatch.tc.kinds.flower_tunnel.parse_key`) on their
own: the attributes equal those iproute2 6.1's tc put in TCA_OPTIONS for the same words
(captured with strace, flags and eth_type left out), the errors are tc's words, and the cursor
is left where tc's loop goes on. The whole lines, through the CLI and against the installed
tc, are in tests/kernel/data/tc_probes/flower_tunnel.txt and tc_bytes/flower_tunnel.txt."""

from __future__ import annotations

import pytest

from bpfbatch.tc.encoding import encode
from bpfbatch.tc.grammar import CommandError, Words
from bpfbatch.tc.kinds.flower_tunnel import parse_key

ETH_TYPES = {"ip": 0x800, "ipv6": 0x86DD, "mpls_uc": 0x8847, "mpls_mc": 0x8848}


def parsed(words: str, protocol: str = "ip") -> tuple[bytes, str | None]:
    """The keys read from the start of ``words`` while parse_key takes them: (their encoded
    attributes, the first word not taken)."""
    w = Words(words.split())
    attrs: list = []
    while w.peek() is not None and parse_key(w, attrs, (ETH_TYPES[protocol], 0, 0)):
        pass
    return encode(attrs), w.peek()


#: (protocol, words, what tc 6.1 sent for them).
TC_SENT = [
    ("ip", "enc_key_id 5 enc_dst_ip 10.0.0.0/8 enc_src_ip 2001:db8::1/64 enc_dst_port 4789",
     "08001a000000000508001d000a00000008001e00ff00000014001f0020010db80000000000000000000000"
     "0114002000ffffffffffffffff000000000000000006002d0012b50000"),
    ("ip", "enc_src_ip any enc_tos 0x10/f0 enc_ttl ff",
     "04001f0004002000050050001000000005005100f000000005005200ff00000005005300ff000000"),
    ("ipv6", "enc_dst_ip default", "0400210004002200"),
    # get_prefix's netmasks: get_addr_1's (any is 0), dotted for IPv6 too; get_addr_ipv4's parts
    ("ip", "enc_dst_ip 1.2.3.4/any enc_src_ip 1::/255.255.0.0",
     "08001d000102030408001e000000000014001f00000100000000000000000000000000001400200"
     "0ffff0000000000000000000000000000"),
    ("ip", "enc_dst_ip 0x1.2/0x18 enc_src_ip all",
     "08001d000102000008001e00ffffff0004001f0004002000"),
    ("ip", "geneve_opts 0102:80:00880022,0103:81:abc/ff:0:f0f,1:2:33/::",
     "580054001c0001000600010001020000050002008000000008000300008800221c00010006000100010300"
     "00050002008100000005000300ab0000001c000100060001000001000005000200020000000500030033"
     "000000400055001c00010006000100ffff000005000200ff00000008000300ffffffff1c000100060001"
     "0000ff0000050002000000000005000300f000000004000100"),
    ("ip", "vx 010/0xf00 erspan_opts :7 er 1:2/3",
     "100054800c0002800800010008000000100055800c00028008000100000f0000100054800c000380080002"
     "0000000007200055801c00038008000200ffffffff05000300ff00000005000400ff000000180054801400"
     "038005000100010000000800020000000002100055800c0003800500010003000000"),
    ("ip", "gtp_opts 1:2:3 gtp_opts :ff/f:f",
     "180054801400048005000100010000000500020002000000180055801400048005000100ff000000050002"
     "00ff000000100054800c00048005000200ff0000001800558014000480050001000f000000050002000f00"
     "0000"),
    ("mpls_uc", "m l d 1 l 100 t 3 b 1 tt 64 lse depth 2",
     "3c0063802c000180050001000100000008000500640000000500040003000000050003000100000005000200"
     "400000000c0001800500010002000000"),
    ("mpls_mc", "mpls_label 1048575 mpls_tc 7 mpls_bos 1 mpls_ttl 0",
     "08004600ffff0f00050045000700000005004400010000000500430000000000"),
]


@pytest.mark.parametrize(("protocol", "words", "sent"), TC_SENT)
def test_attributes_are_what_tc_sent(protocol, words, sent):
    assert parsed(words, protocol) == (bytes.fromhex(sent), None)


#: A line a case: protocol | words | tc's words (" / " between its lines) [| exits STATUS, where
#: tc exits there]. erspan's extra field: tc says geneve (a copy-paste in f_flower.c); the
#: gtp_opts and erspan_opts values where tc crashes (a NULL field, a buffer overrun) are refused
#: as illegal.
TC_SAID = """
ip | enc_key_id 4294967296 | Illegal "enc_key_id"
ip | enc_key_id 0x10 | Illegal "enc_key_id"
ip | enc_key_id | Command line is not complete. Try option "help" | exits 255
ip | enc_dst_ip 10.0.0.0/33 | Error: any valid prefix is expected rather than "10.0.0.0/33". | exits 1
ip | enc_src_ip default/8 | Error: any valid prefix is expected rather than "default/8". | exits 1
ip | enc_dst_port 65536 | Illegal "enc_dst_port"
ip | enc_tos 256 | Illegal "enc_tos"
ip | enc_ttl 64/zz | Illegal "enc_ttl"
ip | geneve_opts 0102::00 | Illegal "geneve_opts"
ip | geneve_opts 1:2:33, | Illegal "geneve_opts"
ip | geneve_opts 0102:80:00/ff:ff:ff:ff | Unknown "geneve_opts" type / Illegal "geneve_opts"
ip | geneve_opts 0102:80:00/zz:ff:ff:ff | Illegal "geneve_opts"
ip | vxlan_opts 1/x | Illegal "vxlan_opts"
ip | erspan_opts 1:2:3:4:5 | Unknown "geneve_opts" type / Illegal "erspan_opts"
ip | erspan_opts 256:1 | Illegal "erspan_opts"
ip | gtp_opts zz:1 | Illegal "gtp_opts"
ip | gtp_opts 1 | Illegal "gtp_opts"
ip | gtp_opts 1:2/3 | Illegal "gtp_opts"
ip | erspan_opts 1 | Illegal "erspan_opts"
mpls_uc | mpls lse depth 0 | Illegal "depth"
mpls_uc | mpls lse label 5 action drop | Error: argument "depth" is required | exits 255
mpls_uc | mpls lse | Command line is not complete. Try option "help" | exits 255
mpls_uc | mpls lse depth 1 label 1048576 | Illegal "label"
mpls_uc | mpls lse depth 1 tc 8 | Illegal "tc"
ip | mp lse depth 1 | Can't set "mpls" if ethertype isn't MPLS
ip | mpls | Command line is not complete. Try option "help" | exits 255
mpls_uc | mpls_label 5 mpls lse depth 1 | Can't set "mpls" if "mpls_label", "mpls_tc", "mpls_bos" or "mpls_ttl" is set
mpls_uc | mpls lse depth 1 mpls_t 2 | Can't set "mpls_tc" if "mpls" is set
mpls_uc | mpls_label 1048576 | Illegal "mpls_label"
mpls_uc | mpls_bos 2 | Illegal "mpls_bos"
ip | mpls_ttl 5 | Can't set "mpls_ttl" if ethertype isn't MPLS
"""


def _cases(table: str) -> list[tuple[str, str, str, bool, int]]:
    cases = []
    for line in table.strip().splitlines():
        protocol, words, said, *exits = line.split(" | ")
        status = int(exits[0].split()[1]) if exits else 255
        cases.append((protocol, words, said.replace(" / ", "\n"), bool(exits), status))
    return cases


@pytest.mark.parametrize(("protocol", "words", "said", "fatal", "status"), _cases(TC_SAID))
def test_errors_are_tcs_words(protocol, words, said, fatal, status):
    with pytest.raises(CommandError) as failed:
        parsed(words, protocol)
    assert (str(failed.value), failed.value.fatal, failed.value.status) == (said, fatal, status)


@pytest.mark.parametrize(("words", "left"), [
    ("v 5", "v"),  # verbose's, earlier in tc's chain
    ("verbose", "verbose"), ("gtp_o 1:2", "gtp_o"),  # gtp_opts only whole (strcmp)
    ("dst_ip 1.2.3.4", "dst_ip"), ("action drop", "action"), ("help", "help"),
    ("enc_key_id 1 action drop", "action"),
    ("mpls depth 1", "depth"),  # no lse: an empty MPLS_OPTS, the loop goes on at depth
    ("mpls lse depth 1 lse depth 2 label 3 classid 1:1", "classid"),
])
def test_other_words_are_left_unmoved(words, left):
    assert parsed(words, "mpls_uc")[1] == left
