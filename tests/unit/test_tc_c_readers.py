"""The C number readers some tc kinds use, against the C library itself (ctypes): skbmod's and
ife's ``sscanf("%hhx:...")`` MAC reader, gate's ``strtod``, ``strtol`` and the x86-64
conversions of its doubles. Random words from the characters those readers look at."""

from __future__ import annotations

import ctypes
import ctypes.util
import math

from hypothesis import example, given, settings, strategies as st

from bpfbatch.tc.kinds import gate, skbmod

_LIBC = ctypes.CDLL(ctypes.util.find_library("c"))
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
    assert gate._c_long(text, 32) == (value if whole else None)


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
