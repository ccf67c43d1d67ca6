"""pedit's keys against an oracle other than tc's bytes: the kernel's tc-testing cases
(tools/testing/selftests/tc-testing/tc-tests/actions/pedit.json) say, for each line, the keys
``tc actions list`` shows: header, offset, command, value and mask. The kernel here lacks
act_pedit, so those listings cannot be read back; these are the expectations the selftests
hold for them, checked on the keys this package builds."""

from __future__ import annotations

import pytest

from bpfbatch.tc.parse import parse_command

#: (line, keys as tc lists them: "[HEADER+]OFF CMD VAL MASK").
CASES = [
    ("pedit ex munge ip ttl set 10", ["ipv4+8 val 0a000000 00ffffff"]),
    ("pedit munge offset 12 u16 set 0x1234 munge offset 14 u16 set 0x5678",
     ["12 val 12340000 0000ffff", "12 val 00005678 ffff0000"]),
    ("pedit ex munge offset 16 u8 add 0xf", ["16 add 0f000000 00ffffff"]),
    ("pedit munge offset 0 u8 set 0x12 munge offset 1 u16 set 0x3456 munge offset 3 u8 set 0x78",
     ["0 val 12000000 00ffffff", "0 val 00345600 ff0000ff", "0 val 00000078 ffffff00"]),
    ("pedit munge offset 0 u32 set 0x12345678 munge offset 1 u16 clear munge offset 2 u8 invert",
     ["0 val 12345678 00000000", "0 val 00000000 ff0000ff", "0 val 0000ff00 ffffffff"]),
    ("pedit munge offset 12 u32 set 0x12345678 retain 0xff00", ["12 val 00005600 ffff00ff"]),
    ("pedit munge offset 0 u16 set 0x1122 retain 0xff00", ["0 val 11000000 00ffffff"]),
    ("pedit munge offset 0 u8 preserve", ["0 val 00000000 ffffffff"]),
    ("pedit munge offset -14 u16 set 0x0000 munge offset -12 u32 set 0x00000100",
     ["-16 val 00000000 ffff0000", "-12 val 00000100 00000000"]),
    ("pedit ex munge eth src set 11:22:33:44:55:66 munge eth dst set ff:ee:dd:cc:bb:aa",
     ["eth+4 val 00001122 ffff0000", "eth+8 val 33445566 00000000",
      "eth+0 val ffeeddcc 00000000", "eth+4 val bbaa0000 0000ffff"]),
    ("pedit ex munge eth src invert", ["eth+4 val 0000ff00 ffff0000", "eth+8 val 00000000 00000000"]),
    ("pedit ex munge eth type add 0x1", ["eth+12 add 00010000 0000ffff"]),
    ("pedit munge ip ihl set 0xff munge ip dsfield set 0xff",
     ["0 val 0f000000 f0ffffff", "0 val 00ff0000 ff00ffff"]),
    ("pedit munge ip ce set 0xff munge ip firstfrag set 0xff munge ip nofrag set 0xff",
     ["4 val 00008000 ffff7fff", "4 val 00001f00 ffffe0ff", "4 val 00003f00 ffffc0ff"]),
    ("pedit munge ip precedence invert", ["0 val 00ff0000 ffffffff"]),
    ("pedit munge ip dport set 0x1234 munge ip sport set 0x5678",
     ["20 val 00001234 ffff0000", "20 val 56780000 0000ffff"]),
    ("pedit ex munge ip6 src set 2001:0db8:0:f101::1",
     ["ipv6+8 val 20010db8 00000000", "ipv6+12 val 0000f101 00000000",
      "ipv6+16 val 00000000 00000000", "ipv6+20 val 00000001 00000000"]),
    ("pedit ex munge ip6 flow_lbl set 0xfffff", ["ipv6+0 val 0007ffff fff80000"]),
    ("pedit ex munge ip6 hoplimit preserve", ["ipv6+4 val 00000000 ffffffff"]),
    ("pedit ex munge tcp dport set 4789 munge tcp flags set 0x16",
     ["tcp+0 val 000012b5 ffff0000", "tcp+12 val 00160000 ff00ffff"]),
    ("pedit ex munge offset 15 u8 add 40 retain 0xf0 munge udp dport add 1",
     ["12 add 00000020 ffffff0f", "udp+0 add 00000001 ffff0000"]),
]
_HEADERS = ("", "eth+", "ipv4+", "ipv6+", "tcp+", "udp+")


def _listed(key: tuple) -> str:
    mask, val, off, _at, _offmask, _shift, htype, cmd = key
    signed = off - (1 << 32) if off >> 31 else off
    return f"{_HEADERS[htype]}{signed} {('val', 'add')[cmd]} {val:08x} {mask:08x}"


@pytest.mark.parametrize("line,keys", CASES, ids=[line[:60] for line, _ in CASES])
def test_keys_as_the_kernel_selftests_expect(line, keys):
    (action,) = parse_command(f"actions add action {line}").actions
    assert [_listed(key) for key in action.keys] == keys
    assert action.extended == line.startswith("pedit ex")
