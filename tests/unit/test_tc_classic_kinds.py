"""flow, rsvp and tcindex as ``f_flow.c``, ``f_rsvp.c`` and ``f_tcindex.c`` read them: the
quirks each reproduces, checked on the attributes sent (the kernel tests compare the whole
message with tc's; these name the quirk that would break)."""

from __future__ import annotations

import struct

import pytest

from bpfbatch.tc.grammar import CommandError
from bpfbatch.tc.parse import parse_command

HEAD = "filter add dev vethA ingress protocol ip prio 1 "


def options(line: str) -> dict[int, list[bytes]]:
    """The classifier's attributes by type (a type given twice keeps both, in order)."""
    out: dict[int, list[bytes]] = {}
    for type_, value in parse_command(HEAD + line).classifier.options(None, 0x0800) or ():
        out.setdefault(type_, []).append(value)
    return out


def refusal(line: str) -> str:
    with pytest.raises(CommandError) as caught:
        parse_command(HEAD + line)
    return str(caught.value)


def u32(value: bytes) -> int:
    return struct.unpack("=I", value)[0]


def test_flow_folds_and_or_xor_into_mask_and_xor_after_mode():
    attrs = options("flow map key dst and 0xff0 or 0x3 xor 0x5")
    assert list(attrs) == [1, 2, 6, 7]  # KEYS, then MODE, MASK, XOR
    assert u32(attrs[6][0]) == 0xFF0 & ~0x3 & 0xFFFFFFFF
    assert u32(attrs[7][0]) == (0x3 ^ 0x5)


def test_flow_addend_reads_an_address_only_after_tcs_enum_as_bits_keys():
    assert u32(options("flow keys proto-src addend -1.2.3.4")[5][0]) == -0x01020304 & 0xFFFFFFFF
    assert refusal("flow keys nfct-src addend 1.2.3.4") == 'Illegal "addend"'


def test_flow_counts_a_key_named_twice_and_sends_an_empty_line_its_mode():
    assert refusal("flow keys src,s") == 'Invalid mode "map" for multiple keys'
    assert options("flow") == {2: [struct.pack("=I", 0)]}


def test_flow_match_sends_the_tree_before_mode():
    assert list(options("flow hash keys src match 'cmp(u8 at 0 layer link eq 1)' divisor 4")) \
        == [1, 11, 8, 2]  # KEYS, EMATCHES, DIVISOR, MODE


def test_rsvp_sized_gpi_keeps_tcs_swapped_default_masks():
    pinfo = options("rsvp session 1.2.3.4 u32 5 at 8 classid 1:1")[4][0]
    key, mask, offset = struct.unpack("!II", pinfo[:8]) + struct.unpack("=i", pinfo[8:12])
    assert (key, mask, offset) == (5, 0xFFFF, 8)


def test_rsvp_tunnel_sends_its_id_as_the_classid_and_nothing_without_options():
    assert u32(options("rsvp tunnel 7 skip 2")[1][0]) == 7
    assert parse_command(HEAD + "rsvp").classifier.options(None, 0x0800) is None


def test_rsvp_refuses_the_line_tc_crashes_on():
    assert "tc crashes" in refusal("rsvp session 1.2.3.4 u8 5")


def test_tcindex_reads_bare_strtoul_into_c_ints():
    attrs = options('tcindex hash -1 mask 0x1ffff shift ""')
    assert attrs == {1: [struct.pack("=i", -1)], 2: [struct.pack("=H", 0xFFFF)],
                     3: [struct.pack("=i", 0)]}
    assert refusal("tcindex hash 0x100000000").startswith(" Usage: ... tcindex")
    assert parse_command(HEAD + 'handle " 0x10" tcindex').handle == 0x10
