"""flower's own keys (``bpfbatch.tc.kinds.flower``): the quirks of ``f_flower.c`` that the
kernel tests (tc_probes, tc_batches and tc_bytes ``flower.txt``, against tc itself) hold only
by example — which key a prefix names, the running ethertype, the readers' C arithmetic — and
``ll_addr_a2n``'s ``sscanf("%x")`` judged by libc's own sscanf through ctypes."""

from __future__ import annotations

import ctypes
import ctypes.util
import socket
import struct

import pytest
from hypothesis import example, given, settings, strategies as st

from bpfbatch.tc.grammar import BadLladdr, CommandError, lladdr
from bpfbatch.tc.kinds import flower_values as V
from bpfbatch.tc.parse import parse_command

_LIBC = ctypes.CDLL(ctypes.util.find_library("c"))


def _attrs(line: str) -> list[tuple[int, bytes]]:
    """The flower attributes (number, bytes) a filter line sends, actions left out."""
    return [(type_, value) for type_, value in parse_command(line).classifier.attrs
            if type_ != 3]


def _error(line: str) -> CommandError:
    with pytest.raises(CommandError) as caught:
        parse_command(line)
    return caught.value


LINE = "filter add dev a ingress protocol {} prio 1 flower {}"


@pytest.mark.parametrize("word,number", [
    ("c", 1),  # classid before anything else
    ("ip", 47),  # ip_flags, the first key "ip" abbreviates (its attribute comes after FLAGS)
    ("t", 71),  # tcp_flags before type
    ("s", None),  # skip_hw: a flag, no value
    ("d", 4),  # dst_mac before dst_ip and dst_port
])
def test_a_prefix_is_the_first_key_in_tcs_order(word, number):
    value = {"c": "1:1", "ip": "frag", "t": "0x1", "d": "1:2:3:4:5:6"}.get(word, "")
    attrs = dict(_attrs(LINE.format("ip", f"ip_proto tcp {word} {value}".strip())))
    if number is None:
        assert attrs[22] == struct.pack("=I", 1)
    else:
        assert number in attrs


@pytest.mark.parametrize("word", ["num_of_vlan", "pppoe_si", "ppp_prot", "actions", "he", "''"])
def test_words_tc_compares_whole_are_not_abbreviated(word):
    assert _error(LINE.format("ppp_ses", f"{word} 1")).args[0].startswith(
        f'What is "{word.strip(chr(39))}"?\nUsage: ... flower')


def test_the_attributes_after_the_keys_flags_ip_flags_then_the_ethertype():
    attrs = _attrs(LINE.format("802.1q", "verbose skip_sw ip_flags nofrag/firstfrag vlan_id 7"))
    assert attrs == [(23, struct.pack("=H", 7)), (22, struct.pack("=I", 0x12)),
                     (47, struct.pack("!I", 2)), (48, struct.pack("!I", 3)),
                     (8, struct.pack("!H", 0x8100))]


def test_change_without_protocol_reads_any_family_and_sends_ethertype_zero():
    """tc's default protocol is 0 unless the verb creates: addresses of either family, and a
    KEY_ETH_TYPE of 0 after FLAGS."""
    attrs = _attrs("filter change dev a ingress prio 1 handle 1 flower dst_ip 1.2.3.4 src_ip any")
    assert attrs == [(12, socket.inet_aton("1.2.3.4")), (13, b"\xff" * 4), (14, b""), (15, b""),
                     (22, bytes(4)), (8, bytes(2))]


def test_the_running_ethertype_follows_vlan_and_ppp_words():
    # vlan_ethtype makes the ethertype IPv6 for the keys after it; ppp_proto ip makes it IPv4
    assert (16, socket.inet_pton(socket.AF_INET6, "1::")) in _attrs(
        LINE.format("802.1ad", "vlan_ethtype ipv6 dst_ip 1::/64"))
    assert (10, socket.inet_aton("10.0.0.1")) in _attrs(
        LINE.format("ppp_ses", "ppp_proto ip src_ip 10.0.0.1"))
    assert _error(LINE.format("802.1q", "vlan_ethtype ip cvlan_id 1")).args[0] == (
        'Can\'t set "cvlan_id" if inner vlan ethertype isn\'t 802.1Q or 802.1AD and '
        "num_of_vlans is less than 2")


def test_hw_tc_builds_a_class_of_the_parent_as_a_32_bit_number():
    ingress = dict(_attrs(LINE.format("ip", "hw_tc 3")))[1]
    assert ingress == struct.pack("=I", 0xFFFF0000 | 0xFFE3)
    assert dict(_attrs(LINE.format("ip", "hw_tc 4294967296")))[1] == struct.pack("=I", 0xFFFFFFE0)
    assert _error(LINE.format("ip", "hw_tc 16")).args[0] == "TC index exceeds max range"


@pytest.mark.parametrize("text,address,mask", [
    ("1:2:3:4:5:6/24", "010203040506", "ffffff000000"),
    ("1:2:3:4:5:6/0", "010203040506", "0000ffffffff"),  # a shift by 64, taken modulo 64
    ("1:2:3:4:5:6/100", "010203040506", "fffffffff000"),  # 64 - 100, modulo 64: 28
    ("1:2:3:4:5:6/ff:ff", "010203040506", "ffff03040506"),  # the mask read over the address
    ("1:2:3:4:5:6/9.8.7.6", "010203040506", "090807060506"),
    ("0x1:+2:-0:3:4:5:6:7", "010200030405", "ffffffffffff"),  # %x's prefix and signs; a 7th part unread
])
def test_mac_and_its_mask_as_tc_reads_them(text, address, mask):
    assert V.eth_addr(text, 4, 5) == [(4, bytes.fromhex(address)), (5, bytes.fromhex(mask))]


@pytest.mark.parametrize("text,attrs", [
    ("80", [(18, struct.pack("!H", 80))]),
    ("5-0", [(18, struct.pack("!H", 5))]),  # a range ending at 0 is its first port
    ("10-20", [(87, struct.pack("!H", 10)), (88, struct.pack("!H", 20))]),
    ("80/0xff00", [(18, struct.pack("!H", 80)), (35, struct.pack("!H", 0xFF00))]),
    ("1/2-3", [(18, struct.pack("!H", 1)), (35, struct.pack("!H", 2))]),  # cut at its "-"
])
def test_ports(text, attrs):
    assert V.port(text, (18, 35, 87, 88)) == attrs


@pytest.mark.parametrize("text", ["0", "0-5", "10-x", "10-20/5", "70000", "20-10"])
def test_ports_tc_refuses(text):
    with pytest.raises(V.Bad):
        V.port(text, (18, 35, 87, 88))


def test_ct_state_reads_each_flag_as_a_prefix_of_what_follows_its_sign():
    assert V.ct_state("+trk-new+rpl", 91, 92) == [(91, struct.pack("=H", 8 | 32)),
                                                  (92, struct.pack("=H", 8 | 1 | 32))]
    for bad in ("trk", "+", "+tr", "+trkx"):
        with pytest.raises(V.Bad):
            V.ct_state(bad, 91, 92)


def test_ip_flags_skip_empty_parts_and_accumulate():
    assert V.ip_flags("//frag//", 0, 0) == (1, 1)
    assert V.ip_flags("nofrag/firstfrag", 1, 1) == (2, 3)


def _c_scan_hex(part: str) -> int | None:
    """libc's ``sscanf(part, "%x", &int)``: the int, or None where it matches nothing."""
    value = ctypes.c_int()
    if _LIBC.sscanf(part.encode(), b"%x", ctypes.byref(value)) != 1:
        return None
    return value.value


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.text(alphabet="0123456789abcdefABCDEFxX+- \tg", max_size=12))
@example("0x")
@example("-1")
@example("100000001")
@example("")
def test_mac_parts_read_as_libcs_sscanf_reads_them(part):
    """A one-part MAC: what ``ll_addr_a2n`` (the reader flower, vlan and pedit share) takes
    (0..255 from sscanf) or refuses."""
    want = _c_scan_hex(part)
    out = bytearray(6)
    try:
        assert lladdr(part, out) == 1
        got = out[0]
    except BadLladdr:
        got = None
    assert got == (want if want is not None and 0 <= want <= 255 else None)


@pytest.mark.parametrize("text, count, written", [
    ("1:2:3:4:5:6", 6, b"\x01\x02\x03\x04\x05\x06"),
    ("1:2:3:4:5:6:7", 7, b"\x01\x02\x03\x04\x05\x06"),  # tc counts one more, reads no 7th
    ("1:2", 2, b"\x01\x02\xee\xee\xee\xee"),  # the rest of the buffer kept
    ("10.0.0.1", 4, b"\x0a\x00\x00\x01\xee\xee"),
])
def test_lladdr_counts_and_writes_as_ll_addr_a2n(text, count, written):
    out = bytearray(b"\xee" * 6)
    assert lladdr(text, out) == count
    assert bytes(out) == written


@pytest.mark.parametrize("text, said, word", [
    ("1:zz:3", '"zz" is invalid lladdr.', "1"),  # tc cut the word at its first ':'
    ("1.2.3.400", '"1.2.3.400" is invalid lladdr.', "1.2.3.400"),
])
def test_lladdr_refusal_names_what_tc_printed_and_left(text, said, word):
    with pytest.raises(BadLladdr) as bad:
        lladdr(text, bytearray(6))
    assert (bad.value.said, bad.value.word) == (said, word)
