"""The numbers tc's kinds read, against C itself: :func:`bpfbatch.tc.grammar.unsigned` must
accept and refuse exactly what iproute2's ``get_u32``/``get_u16``/``get_u8`` accept and refuse
(``strtoul`` over the whole word: blanks, a sign, 0x/0 prefixes, wrap-around of ``-N``), with
the same value — the oracle is libc's ``strtoul`` through ctypes, wrapped as ``utils.c`` wraps
it."""

from __future__ import annotations

import ctypes
import ctypes.util

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bpfbatch.tc.grammar import unsigned

_LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_LIBC.strtoul.restype = ctypes.c_ulong
_LIBC.strtoul.argtypes = (ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int)


def get_unsigned(word: str, base: int, bits: int) -> int | None:
    """``get_u32``/``get_u16``/``get_u8`` of iproute2 6.1 (lib/utils.c), on libc's strtoul."""
    raw = word.encode()
    if not raw:
        return None
    arg = ctypes.c_char_p(raw)
    end = ctypes.c_char_p()
    ctypes.set_errno(0)
    res = _LIBC.strtoul(arg, ctypes.byref(end), base)
    consumed = ctypes.cast(end, ctypes.c_void_p).value - ctypes.cast(arg, ctypes.c_void_p).value
    if consumed == 0 or consumed != len(raw):  # no digits, or trailing characters
        return None
    if res == 2**64 - 1 and ctypes.get_errno() == 34:  # ERANGE
        return None
    return res if res < 1 << bits else None


#: Words near what tc's users write, and the characters strtoul treats specially.
_WORDS = st.text(alphabet="0123456789abcdefxX+- \t_o", max_size=12) | \
    st.integers(-2**65, 2**65).map(str) | st.integers(0, 2**40).map(hex)


@settings(max_examples=500, deadline=None, derandomize=True)
@given(word=_WORDS, base=st.sampled_from((0, 10, 16)), bits=st.sampled_from((8, 16, 32)))
@example(word="-18446744069414584321", base=10, bits=32)
@example(word="0x", base=0, bits=32)
@example(word="0o7", base=0, bits=32)
@example(word="1_0", base=10, bits=32)
def test_unsigned_reads_as_tcs_get_u32(word, base, bits):
    assert unsigned(word, base, bits) == get_unsigned(word, base, bits)


@pytest.mark.parametrize("word", ["+5", "-0", " 7", "010", "0x1F"])
def test_unsigned_takes_what_strtoul_takes(word):
    assert unsigned(word) is not None and unsigned(word) == get_unsigned(word, 0, 32)
