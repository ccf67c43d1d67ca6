"""A small batch is read without numpy (:class:`ByteRows`), a large one with it: every column
read of :mod:`bpfbatch.records.columns` gives the same values both ways, through any chain of
row and column slices, and every record text and layout renders the same bytes."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfbatch.records import columns
from bpfbatch.records.codec import PerCpuCodec, RawCodec
from bpfbatch.records.columns import (ByteRows, any_set, batch_rows, bits, byte_list, raw_bytes,
                                      scalar_list)
from bpfbatch.formats.render import RENDERERS, make_renderer
from tests.unit.test_codecs_batch import compile_types, flow, mixed, with_union

DTYPES = ["<u1", "<i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8", "<e", "<f", "<d"]


@st.composite
def batches(draw):
    """A buffer of ``count`` records of ``size`` bytes, and a chain of slices into it."""
    size = draw(st.integers(1, 40))
    count = draw(st.integers(0, 12))
    data = draw(st.binary(min_size=count * size, max_size=count * size))
    cuts = draw(st.lists(st.tuples(st.booleans(), st.integers(-2, 45), st.integers(-2, 45)),
                         max_size=3))
    return data, count, size, cuts


def both(data, count, size, cuts):
    """The same rows as a numpy array and as ByteRows, after the same slices."""
    array = np.frombuffer(data, np.uint8, count * size).reshape(count, size)
    rows = ByteRows(memoryview(data), count, size)
    for by_column, a, b in cuts:
        index = (slice(None), slice(a, b)) if by_column else slice(a, b)
        array, rows = array[index], rows[index]
    return array, rows


@settings(max_examples=400, deadline=None)
@given(batches(), st.integers(0, 40), st.sampled_from(DTYPES), st.integers(0, 9))
def test_every_column_read_is_the_same_without_numpy(batch, offset, dtype, width):
    array, rows = both(*batch)
    assert rows.shape == array.shape and len(rows) == len(array)
    assert rows.tobytes() == array.tobytes()
    assert np.array_equal(np.asarray(rows), array)
    if offset + width <= array.shape[1]:  # a field inside the record, as layouts read
        assert raw_bytes(rows, offset, width) == raw_bytes(array, offset, width)
    assert any_set(rows, offset, width) == any_set(array, offset, width)
    if offset < array.shape[1]:
        assert byte_list(rows, offset) == byte_list(array, offset)
    if 1 <= width <= 8 and offset + width <= array.shape[1]:  # whole bytes, then a bitfield
        assert bits(rows, offset, 0, 8 * width) == bits(array, offset, 0, 8 * width)
        assert bits(rows, offset, 3, 8 * width - 3) == bits(array, offset, 3, 8 * width - 3)
    if offset + np.dtype(dtype).itemsize <= array.shape[1]:
        got, want = scalar_list(rows, offset, dtype), scalar_list(array, offset, dtype)
        assert [repr(v) for v in got] == [repr(v) for v in want]  # NaNs, -0.0 too


def test_byte_rows_refuse_what_they_do_not_do():
    rows = ByteRows(bytes(8), 2, 4)
    for index in (0, (0, 1), (slice(None), 1), slice(0, 2, 2), (slice(1), slice(0, 1))):
        with pytest.raises(TypeError):
            rows[index]


def test_batch_rows_chooses_by_size(monkeypatch):
    data = bytes(64)
    assert isinstance(batch_rows(data, 4, 16), ByteRows)
    monkeypatch.setattr(columns, "SMALL_BATCH_BYTES", 63)
    assert isinstance(batch_rows(data, 4, 16), np.ndarray)
    assert isinstance(batch_rows(data, 4, 16, small=True), ByteRows)


def test_a_large_output_reads_only_its_start_without_numpy(monkeypatch):
    """The renderer reads batches as ByteRows while the output so far is small, then with
    numpy for good: a small dump never imports numpy, a large one imports it once."""
    monkeypatch.setattr(columns, "SMALL_BATCH_BYTES", 100)
    key, value = RawCodec(4), RawCodec(6)
    renderer = make_renderer("json", _Info(key, value), key, value, io.BytesIO())
    kinds = [type(renderer._rows(_Batch(bytes(n * 4), bytes(n * 6), n))[1]).__name__
             for n in (4, 5, 2, 1)]
    assert kinds == ["ByteRows", "ByteRows", "ndarray", "ndarray"]  # 40, 90, 110, 120 bytes


class _Info:
    """What the renderers read of a map's info."""

    def __init__(self, key, value):
        self.key_size = key.size
        self.value_size = value.base.size if isinstance(value, PerCpuCodec) else value.size
        self.value_stride = value.size


class _Batch:
    def __init__(self, keys: bytes, values: bytes, count: int):
        self.keys, self.values, self.count, self.failed = keys, values, count, ()


def _render(fmt, key, value, batches) -> tuple[bytes, list]:
    out = io.BytesIO()
    renderer = make_renderer(fmt, _Info(key, value), key, value, out)
    ends = [list(renderer.render(b).ends) for b in batches]
    for b in batches:
        renderer.write_batch(b)
    renderer.close()
    return out.getvalue(), ends


LAYOUTS = {"flow": flow, "mixed": mixed, "union": with_union}
TEXT_FORMATS = [fmt for fmt in RENDERERS if fmt not in ("arrow", "parquet")]


@pytest.mark.parametrize("fmt", TEXT_FORMATS)
@pytest.mark.parametrize("layout", [*LAYOUTS, "raw", "percpu"])
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), counts=st.lists(st.integers(1, 9), min_size=1,
                                                      max_size=3))
def test_small_and_large_batches_render_the_same_bytes(layout, fmt, seed, counts):
    key = RawCodec(3) if layout == "raw" else compile_types(flow)
    value = (RawCodec(5) if layout == "raw" else
             PerCpuCodec(compile_types(mixed), 3) if layout == "percpu" else
             compile_types(LAYOUTS[layout]))
    rng = np.random.default_rng(seed)
    batches = [_Batch(rng.bytes(n * key.size), rng.bytes(n * value.size), n) for n in counts]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(columns, "SMALL_BATCH_BYTES", 1 << 30)
        small = _render(fmt, key, value, batches)
        patch.setattr(columns, "SMALL_BATCH_BYTES", -1)
        large = _render(fmt, key, value, batches)
    assert small == large
