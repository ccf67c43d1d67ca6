"""The Arrow columns' own format and parse of the decoders a flow table meets by the million
(``ipv4``, ``be16``/``be32``/``be64``) against the decoders' value-by-value ones
(:mod:`bpfbatch.records.decoders`), which are the reference: the same display values out, and
in, the same bytes for every value the reference takes, nothing for one it refuses."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfbatch.errors import InputError
from bpfbatch.formats import columnar
from bpfbatch.records.decoders import get

SETTINGS = settings(max_examples=300, derandomize=True, deadline=None)


@SETTINGS
@given(st.lists(st.binary(min_size=4, max_size=4), min_size=1, max_size=20),
       st.sampled_from(["ipv4", "be16", "be32", "be64"]))
def test_a_column_formats_as_the_decoder(rows, kind):
    decoder = get(kind)
    size = decoder.sizes[0]
    raw = np.frombuffer(b"".join(r * 2 for r in rows), np.uint8).reshape(len(rows), 8)[:, :size]
    column = columnar._COLUMN_FORMATS[kind](pa, np.ascontiguousarray(raw))
    assert column.to_pylist() == decoder.format(raw)


_QUADS = st.one_of(
    st.tuples(*[st.integers(0, 255)] * 4).map(lambda q: ".".join(map(str, q))),
    st.text(st.sampled_from("0123456789.1 x\u0661-"), max_size=16),
    st.sampled_from(["01.2.3.4", "256.1.1.1", "1.2.3", "1.2.3.4.5", " 1.2.3.4", "1.2.3.4\n",
                     "\u0661.2.3.4", "0.0.0.0", "255.255.255.255", ""]))


@SETTINGS
@given(st.lists(_QUADS, min_size=1, max_size=8))
def test_an_address_column_parses_as_the_decoder(texts):
    decoder = get("ipv4")
    parsed = columnar._COLUMN_PARSES["ipv4"](pa, pa.array(texts, pa.string()), 4)
    try:
        reference = b"".join(decoder.parse(t, 4) for t in texts)
    except InputError:
        assert parsed is None
        return
    if parsed is not None:  # declining is allowed: the value-by-value path reads it
        assert parsed.tobytes() == reference


@SETTINGS
@given(st.lists(st.integers(0, (1 << 64) - 1), min_size=1, max_size=8),
       st.sampled_from([2, 4, 8]), st.sampled_from([2, 4, 8]))
def test_a_number_column_parses_as_the_decoder(numbers, size, width):
    decoder = get(f"be{size * 8}")
    numbers = [n % (1 << (8 * width)) for n in numbers]
    column = pa.array(numbers, pa.from_numpy_dtype(np.dtype(f"u{width}")))
    parsed = columnar._COLUMN_PARSES[f"be{size * 8}"](pa, column, size)
    try:
        reference = b"".join(decoder.parse(n, size) for n in numbers)
    except InputError:
        assert parsed is None
        return
    if parsed is not None:
        assert parsed.tobytes() == reference


def test_the_column_parses_take_what_the_dumps_write():
    """Not declining all: a dump's own columns take the fast path."""
    quads = pa.array(["10.0.0.1", "192.168.255.0", "0.0.0.0"], pa.string())
    assert columnar._COLUMN_PARSES["ipv4"](pa, quads, 4).tobytes() == \
        bytes([10, 0, 0, 1, 192, 168, 255, 0, 0, 0, 0, 0])
    ports = pa.array([443, 80], pa.uint16())
    assert columnar._COLUMN_PARSES["be16"](pa, ports, 2).tobytes() == b"\x01\xbb\x00\x50"
