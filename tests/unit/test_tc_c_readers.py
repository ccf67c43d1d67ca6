"""The C number readers tc's kinds use, against the C library itself (ctypes): ``get_u32``/
``get_u16``/``get_u8`` over ``strtoul`` (every kind's numbers), skbmod's and ife's
``sscanf("%hhx:...")`` MAC reader, gate's ``strtod``, ``strtol`` and the x86-64 conversions of
its doubles. Random words from the characters those readers look at."""

from __future__ import annotations

import ctypes
import ctypes.util
import math

import pytest
from hypothesis import example, given, settings, strategies as st

from bpfbatch.tc.grammar import unsigned
from bpfbatch.tc.kinds import gate, skbmod
from bpfbatch.tc.numbers import integer

_LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_LIBC.strtoul.restype = ctypes.c_ulong
_LIBC.strtoul.argtypes = (ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int)
_LIBC.strtod.restype = ctypes.c_double
_LIBC.strtod.argtypes = (ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p))
_LIBC.strtol.restype = ctypes.c_long
_LIBC.strtol.argtypes = (ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int)

#: A part as %hhx reads it (blanks, sign, 0x, up to 18 digits: past 64 bits too), or junk.
_MAC_PART = st.builds("".join, st.tuples(st.sampled_from(["", " ", "+", "-", " -"]),
                                         st.sampled_from(["", "0x", "0X"]),
                                         st.text("0123456789abcdefABCDEF", max_size=18))) \
    | st.text("0123456789abcdefxX+- g", max_size=4)
_MACS = st.lists(_MAC_PART, min_size=5, max_size=7).map(":".join) | st.text("0x1:f-+ ", max_size=20)
_NUMBER = st.text("0123456789.eEpPxXabcf+- infatyINF()", max_size=12)


def _sscanf_mac(text: str) -> bytes | None:
    out = (ctypes.c_ubyte * 6)()
    count = _LIBC.sscanf(text.encode(), b"%hhx:%hhx:%hhx:%hhx:%hhx:%hhx",
                         *(ctypes.byref(out, i) for i in range(6)))
    return bytes(out) if count == 6 else None


def _libc_strtod(text: str) -> tuple[float, str] | None:
    raw = text.encode()
    end = ctypes.c_char_p()
    value = _LIBC.strtod(raw, ctypes.byref(end))
    used = ctypes.cast(end, ctypes.c_void_p).value - ctypes.cast(ctypes.c_char_p(raw), ctypes.c_void_p).value
    return None if used == 0 else (value, raw[used:].decode())


@settings(max_examples=200, derandomize=True)
@given(_MACS)
@example("123456789abcdef012:-0x1:+2: 3:0x:4x")  # past 64 bits, signs, 0x alone, a tail
def test_mac_reader_reads_as_sscanf(text):
    assert skbmod.scan_mac(text) == _sscanf_mac(text)


@settings(max_examples=200, derandomize=True)
@given(_NUMBER)
def test_strtod_reads_as_the_c_library(text):
    theirs, ours = _libc_strtod(text), gate._strtod(text)
    if theirs is None or ours is None:
        assert theirs == ours
        return
    assert ours[1] == theirs[1]
    assert (math.isnan(ours[0]) and math.isnan(theirs[0])) or ours[0] == theirs[0]


@settings(max_examples=150, derandomize=True)
@given(st.text("0123456789xXabcdef+- ", min_size=1, max_size=12))
def test_s32_reads_as_strtol_of_the_whole_word(text):
    raw = text.encode()
    end = ctypes.c_char_p()
    value = _LIBC.strtol(raw, ctypes.byref(end), 0)
    used = ctypes.cast(end, ctypes.c_void_p).value - ctypes.cast(ctypes.c_char_p(raw), ctypes.c_void_p).value
    whole = used == len(raw) and used > 0 and -(1 << 31) <= value < 1 << 31
    assert integer(text) == (value if whole else None)  # get_s32, get_integer: one reader


def test_sizes_and_times_convert_as_x86_64_does():
    # a double past 64 bits (or NaN) becomes INT64_MIN, and 0 stored in an unsigned int; a
    # negative one wraps; a size that is not its floor is refused, its stored value kept
    assert gate._time64("1e400") == -(1 << 63)
    assert gate._time64("nan") == -(1 << 63)
    assert gate._time64("-1.5ns") == -1
    assert gate._time64("1.5s") == 1_500_000_000
    assert gate._time64("2 ms") is None
    assert gate._size("-1.5") == (False, 0xFFFFFFFF)
    assert gate._size("1e10") == (False, 1410065408)
    assert gate._size("1.5") == (True, 1)
    assert gate._size("2gbit") == (True, 1 << 28)
    assert gate._size("1e20") == (False, 0)
    assert gate._size("x") == (False, 0)


def _get_unsigned(word: str, base: int, bits: int) -> int | None:
    """``get_u32``/``get_u16``/``get_u8`` of iproute2 6.1 (lib/utils.c), on libc's strtoul."""
    raw = word.encode()
    if not raw:
        return None
    arg = ctypes.c_char_p(raw)
    end = ctypes.c_char_p()
    ctypes.set_errno(0)
    res = _LIBC.strtoul(arg, ctypes.byref(end), base)
    used = ctypes.cast(end, ctypes.c_void_p).value - ctypes.cast(arg, ctypes.c_void_p).value
    if used == 0 or used != len(raw):  # no digits, or trailing characters
        return None
    if res == 2**64 - 1 and ctypes.get_errno() == 34:  # ERANGE
        return None
    return res if res < 1 << bits else None


#: Words near what tc's users write, and the characters strtoul treats specially.
_UNSIGNED = st.text(alphabet="0123456789abcdefxX+- \t_o", max_size=12) | \
    st.integers(-2**65, 2**65).map(str) | st.integers(0, 2**40).map(hex)


@settings(max_examples=500, deadline=None, derandomize=True)
@given(word=_UNSIGNED, base=st.sampled_from((0, 10, 16)), bits=st.sampled_from((8, 16, 32)))
@example(word="-18446744069414584321", base=10, bits=32)  # -N wraps into range
@example(word="0x", base=0, bits=32)
@example(word="0o7", base=0, bits=32)  # Python's prefix, not C's
@example(word="1_0", base=10, bits=32)  # Python's digit separator, not C's
def test_unsigned_reads_as_get_u32(word, base, bits):
    assert unsigned(word, base, bits) == _get_unsigned(word, base, bits)


@pytest.mark.parametrize("word", ["+5", "-0", " 7", "010", "0x1F"])
def test_unsigned_takes_what_strtoul_takes(word):
    assert unsigned(word) is not None and unsigned(word) == _get_unsigned(word, 0, 32)
