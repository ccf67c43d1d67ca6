"""Per-CPU sums in 64 bits (``dump --sum -o parquet``, ``diff --sum``): numpy's sums of
8-byte integers by halves must equal Python's exact sums wherever they fit, and say exactly
where they do not; every other leaf goes through Python's sums, which must agree."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfbatch.errors import InputError
from bpfbatch.records.cpusum import Summed
from bpfbatch.records.layout import Bits, Int

WIDTHS = [(size, signed) for size in (1, 2, 4, 8) for signed in (False, True)]


def extremes(size: int, signed: bool):
    low, high = (-(1 << (8 * size - 1)), 1 << (8 * size - 1)) if signed else (0, 1 << 8 * size)
    return st.one_of(st.integers(low, high - 1),
                     st.sampled_from([low, high - 1, 0, -1 if signed else 1]))


@st.composite
def slots(draw):
    size, signed = draw(st.sampled_from(WIDTHS))
    ncpus, n = draw(st.integers(1, 5)), draw(st.integers(0, 6))
    values = draw(st.lists(st.lists(extremes(size, signed), min_size=n, max_size=n),
                           min_size=ncpus, max_size=ncpus))
    return size, signed, values


def per_cpu_rows(size: int, signed: bool, values: list[list[int]], stride: int) -> np.ndarray:
    """``values[cpu][row]`` laid out as a per-CPU map's value rows, ``stride`` bytes a CPU,
    the field at byte 2 of each slot (the bytes around it random-looking)."""
    ncpus, n = len(values), len(values[0]) if values else 0
    rows = np.full((n, ncpus * stride), 0xA5, np.uint8)
    for cpu, column in enumerate(values):
        for row, v in enumerate(column):
            at = cpu * stride + 2
            rows[row, at:at + size] = np.frombuffer(v.to_bytes(size, "little", signed=signed),
                                                    np.uint8)
    return rows


@settings(max_examples=400, deadline=None)
@given(slots())
def test_sums_in_64_bits_are_exact_or_refused_naming_the_first_that_does_not_fit(drawn):
    size, signed, values = drawn
    stride = 16
    rows = per_cpu_rows(size, signed, values, stride)
    node = Summed(2, Int(2, size, signed), len(values), stride)
    exact = [sum(column[row] for column in values) for row in range(len(rows))]
    low, high = (-(1 << 63), 1 << 63) if signed else (0, 1 << 64)
    outside = [i for i, total in enumerate(exact) if not low <= total < high]
    where = lambda row: f"row {row}"  # noqa: E731
    if outside:
        with pytest.raises(InputError) as refused:
            node.sums64(rows, where, "why")
        assert refused.value.obj == f"row {outside[0]}"
        assert f"its sum {exact[outside[0]]} does not fit" in refused.value.message
        return
    sums = node.sums64(rows, where, "why")
    assert sums.dtype == (np.int64 if signed else np.uint64)
    assert sums.tolist() == exact
    # the same field as a bitfield of its width: Python's sums agree
    bits = Summed(2, Bits(2, 0, 8 * size, signed), len(values), stride)
    assert bits.sums64(rows, where, "why").tolist() == exact
