"""tc's number readers (``bpfbatch.tc.numbers``) against C itself: libc's ``strtoul``/``strtol``
called through ctypes on the same words, and iproute2's ``get_u32``/``get_u16``/``get_u8``/
``get_u64``/``get_integer`` rebuilt over them line by line (``lib/utils.c``), so every word —
signs, blanks, prefixes, overflow, trailing junk — is judged by C, not by our model."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno

import pytest
from hypothesis import example, given, settings, strategies as st

from bpfbatch.tc import grammar, numbers

_LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_LIBC.strtoul.restype = ctypes.c_ulong
_LIBC.strtoul.argtypes = (ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int)
_LIBC.strtol.restype = ctypes.c_long
_LIBC.strtol.argtypes = (ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int)


def _c_call(function, word: str, base: int) -> tuple[int, int, bool]:
    """(value, end offset, errno == ERANGE) of libc's ``function(word, &end, base)``."""
    raw = word.encode()
    buffer = ctypes.create_string_buffer(raw)
    end = ctypes.c_char_p()
    ctypes.set_errno(0)
    value = function(ctypes.cast(buffer, ctypes.c_char_p), ctypes.byref(end), base)
    overflowed = ctypes.get_errno() == errno.ERANGE
    offset = ctypes.cast(end, ctypes.c_void_p).value - ctypes.addressof(buffer)
    return value, offset, overflowed


def _c_get_unsigned(word: str, base: int, bits: int) -> int | None:
    """iproute2's get_u32 (and its 8/16/64-bit siblings) over libc's strtoul."""
    if not word:
        return None
    res, end, overflowed = _c_call(_LIBC.strtoul, word, base)
    if end == 0 or end != len(word.encode()):
        return None
    if res == numbers.ULONG_MAX and overflowed:
        return None
    return None if res > (1 << bits) - 1 else res


def _c_get_integer(word: str, base: int) -> int | None:
    """iproute2's get_integer over libc's strtol."""
    if not word:
        return None
    res, end, overflowed = _c_call(_LIBC.strtol, word, base)
    if end == 0 or end != len(word.encode()):
        return None
    if res in (numbers.LONG_MAX, -numbers.LONG_MAX - 1) and overflowed:
        return None
    return res if -(1 << 31) <= res < 1 << 31 else None


#: Words built from what strtoul reacts to: blanks, signs, prefixes, digits of each base, junk.
WORDS = st.text(alphabet=" \t+-0x0X1789aAfFgG_.:", max_size=24) | st.integers(
    -(1 << 70), 1 << 70).map(lambda n: f"{n}" if n % 3 else f"{n:#x}")
BASES = st.sampled_from([0, 10, 16, 8])

#: Words tc's readers meet in real lines, each a quirk of C's reading.
PROBES = ["+5", "-0", "-1", "+0x10", "0x", "0x1g", "010", "08", " 7", "7 ", "1_0", "0X1F", "",
          "-18446744073709551615", "18446744073709551615", "18446744073709551616", "4294967295",
          "4294967296", "-4294967296", "+", "-", "0x-1", "00x1", "\t0x1", "99999999999999999999999"]


@settings(max_examples=400, derandomize=True, deadline=None)
@given(word=WORDS, base=BASES)
@example(word="0x", base=16)
def test_strtoul_and_strtol_equal_libc(word, base):
    assert numbers.strtoul(word, base) == _c_call(_LIBC.strtoul, word, base)
    assert numbers.strtol(word, base) == _c_call(_LIBC.strtol, word, base)


@pytest.mark.parametrize("bits", [8, 16, 32, 64])
@pytest.mark.parametrize("base", [0, 10, 16])
@pytest.mark.parametrize("word", PROBES)
def test_reader_table_equals_iproute2(word, base, bits):
    assert numbers.unsigned(word, base, bits) == _c_get_unsigned(word, base, bits)
    assert numbers.integer(word, base) == _c_get_integer(word, base)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(word=WORDS, base=BASES, bits=st.sampled_from([8, 16, 32, 64]))
def test_readers_equal_iproute2_on_any_word(word, base, bits):
    assert numbers.unsigned(word, base, bits) == _c_get_unsigned(word, base, bits)
    assert numbers.integer(word, base) == _c_get_integer(word, base)


def _c_classid(word: str) -> int | None:
    """iproute2's get_tc_classid over libc's strtoul (``__u32`` parts)."""
    if word == "root":
        return 0xFFFFFFFF
    if word == "none":
        return 0
    major, end, _ = _c_call(_LIBC.strtoul, word, 16)
    major &= 0xFFFFFFFF
    if end == 0:
        major = 0
        if word[:1] != ":":
            return None
    if word[end:end + 1] == ":":
        if major >= 1 << 16:
            return None
        minor, minor_end, _ = _c_call(_LIBC.strtoul, word[end + 1:], 16)
        minor &= 0xFFFFFFFF
        if end + 1 + minor_end != len(word) or minor >= 1 << 16:
            return None
        return major << 16 | minor
    return major if end == len(word) else None


@settings(max_examples=300, derandomize=True, deadline=None)
@given(word=st.text(alphabet="+-0x1fF:g ", max_size=14))
@example(word="100000001:1")
@example(word="fffffffff")
def test_classid_equals_iproute2(word):
    assert grammar.parse_classid(word) == _c_classid(word)


@pytest.mark.parametrize(("word", "value"), [
    ("1:2:3", 0x00102003), ("1:2:3:4", 0x00102003), ("1x2:3", 0x00102003), ("800:", 0x80000000),
    (":1", 0x1000), ("0x80000000", 0x80000000), ("1000:", None), ("1:100:", None), ("g:", None),
    ("12", None), ("1:2:zz", None), ("+1:-0:+2", 0x00100002)])
def test_u32_handle_reads_as_f_u32(word, value):
    assert grammar.parse_u32_handle(word) == value


def _c_addr_ipv4(word: str) -> bytes | None:
    """iproute2's get_addr_ipv4 over libc's strtoul."""
    out, rest = bytearray(4), word
    for i in range(4):
        value, end, _ = _c_call(_LIBC.strtoul, rest, 0)
        if value > 255 or end == 0:
            return None
        out[i] = value
        if end == len(rest):
            return bytes(out)
        if i == 3 or rest[end] != ".":
            return None
        rest = rest[end + 1:]
    return None


@settings(max_examples=300, derandomize=True, deadline=None)
@given(word=st.lists(st.sampled_from(["0", "1", "10", "255", "256", "010", "0x1f", "+3", "-0",
                                      "-1", "", " 2", "9x"]), min_size=1, max_size=5).map(".".join))
@example(word="10.0.0.1")
def test_ipv4_address_equals_iproute2(word):
    assert grammar.ipv4_address(word) == _c_addr_ipv4(word)


def test_ipv4_parts_read_with_strtoul():
    assert grammar.ipv4_address("+1.-0.0x2.010") == bytes((1, 0, 2, 8))
    assert grammar.ipv4_address("1.2.3.-1") is None
    assert grammar.ipv4_address("1._2") is None
