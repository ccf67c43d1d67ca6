"""Arrow columns built from and read through their buffers (not ``pa.array`` /
``to_numpy``, which import pandas): every leaf kind round-trips through Parquet, also from a
slice of a table (arrays that start at an offset), and a load imports no pandas."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfbatch.btf import Btf, BtfBuilder
from bpfbatch.errors import InputError
from bpfbatch.records.codec import BtfCodec
from bpfbatch.formats.columnar import Columns

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _codecs():
    with BtfBuilder() as b:
        u16, u32 = b.integer("__u16", 2), b.integer("__u32", 4)
        value = b.struct("v", [
            ("on", b.integer("_Bool", 1, boolean=True)), ("share", b.float("double", 8)),
            ("ratio", b.float("float", 4)), ("state", b.enum("st", {"UP": 1, "DOWN": 2})),
            ("delta", b.integer("int", 4, signed=True)), ("ports", b.array(u16, 2)),
            ("flags", b.array(b.integer("_Bool", 1, boolean=True), 3)),
            ("comm", b.array(b.integer("char", 1, signed=True), 8))])
        btf = Btf.from_bytes(b.raw())
    return BtfCodec(btf, u32), BtfCodec(btf, value)


KEY, VALUE = _codecs()
COLUMNS = Columns(KEY, VALUE)


@st.composite
def _records(draw):
    """Packed records whose every field holds a value a dump reads back exactly: bools 0/1,
    finite floats, text without NULs before its end, any enum number."""
    count = draw(st.integers(0, 20))
    values = np.zeros(count, VALUE.dtype)
    values["delta"] = draw(st.lists(st.integers(-(1 << 31), (1 << 31) - 1),
                                    min_size=count, max_size=count))
    values["state"] = draw(st.lists(st.integers(0, (1 << 32) - 1), min_size=count,
                                    max_size=count))
    values["on"] = draw(st.lists(st.booleans(), min_size=count, max_size=count))
    values["flags"] = np.array(draw(st.lists(st.lists(st.booleans(), min_size=3, max_size=3),
                                             min_size=count, max_size=count)),
                               dtype=bool).reshape(count, 3)
    values["share"] = draw(st.lists(st.floats(allow_nan=False), min_size=count,
                                    max_size=count))
    values["ratio"] = draw(st.lists(st.floats(width=32, allow_nan=False), min_size=count,
                                    max_size=count))
    values["ports"] = np.array(draw(st.lists(st.integers(0, 65535), min_size=2 * count,
                                             max_size=2 * count)),
                               dtype=np.uint16).reshape(count, 2)
    values["comm"] = draw(st.lists(st.text("ab c", max_size=8).map(str.encode),
                                   min_size=count, max_size=count))
    keys = np.arange(count, dtype=np.uint32)
    return keys.view(np.uint8).reshape(count, 4), values.view(np.uint8).reshape(count, VALUE.size)


def _parquet(table) -> "pa.Table":
    out = io.BytesIO()
    pq.write_table(table, out)
    return pq.ParquetFile(io.BytesIO(out.getvalue())).read()


@settings(max_examples=60, deadline=None)
@given(records=_records(), start=st.integers(0, 5))
def test_every_leaf_kind_round_trips_through_parquet_also_from_a_slice(records, start):
    keys, values = records
    table = pa.Table.from_batches([COLUMNS.record_batch(keys, values)])
    assert COLUMNS.packed(_parquet(table), "in") == (len(keys), keys.tobytes(),
                                                     values.tobytes())
    part = table.slice(start)  # columns that start at an offset into their buffers
    assert COLUMNS.packed(part, "in") == (len(keys[start:]), keys[start:].tobytes(),
                                          values[start:].tobytes())


def test_a_parquet_load_imports_no_pandas(tmp_path):
    """pa.array, Array.to_numpy and pq.read_table import pandas (~0.3 s) on first use;
    dumping and loading go without them, and loading without pyarrow.compute (~40 ms), which
    value_lengths() and flatten() import."""
    keys, values = np.zeros((2, 4), np.uint8), np.zeros((2, VALUE.size), np.uint8)
    batch = COLUMNS.record_batch(keys, values)
    pq.write_table(pa.Table.from_batches([batch]), tmp_path / "t.parquet")
    pq.write_table(pa.Table.from_batches([], batch.schema), tmp_path / "empty.parquet")
    code = (
        "import sys\n"
        "import numpy as np\n"
        "import test_columnar_buffers as t\n"
        "from bpfbatch.formats.columnar import read_packed\n"
        f"count, _, _ = read_packed({str(tmp_path / 't.parquet')!r}, 'parquet', 'in',\n"
        "                           t.KEY, t.VALUE)\n"
        f"empty, _, _ = read_packed({str(tmp_path / 'empty.parquet')!r}, 'parquet', 'in',\n"
        "                           t.KEY, t.VALUE)\n"
        "assert empty == 0\n"
        "print('pyarrow.compute' in sys.modules)\n"
        "t.COLUMNS.record_batch(np.zeros((2, 4), np.uint8), np.zeros((2, t.VALUE.size), np.uint8))\n"
        "assert count == 2\n"
        "print('pandas' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=__file__.rsplit("/", 1)[0])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]  # a load: no pyarrow.compute (~40 ms)


def _with_ports(table, ports) -> "pa.Table":
    return table.set_column(table.schema.get_field_index("value.ports"), "value.ports", ports)


@pytest.mark.parametrize("start", [0, 2])
def test_list_columns_load_from_variable_lists_and_slices(start):
    keys, values = np.zeros((4, 4), np.uint8), np.zeros((4, VALUE.size), np.uint8)
    table = pa.Table.from_batches([COLUMNS.record_batch(keys, values)])
    ports = pa.array([[1, 2], [3, 4], [5, 6], [7, 8]], pa.list_(pa.uint16()))
    _, _, packed = COLUMNS.packed(_with_ports(table, ports).slice(start), "in")
    got = np.frombuffer(packed, VALUE.dtype)["ports"]
    assert got.tolist() == [[1, 2], [3, 4], [5, 6], [7, 8]][start:]


@pytest.mark.parametrize("ports, size, message", [  # pa.array here would import pandas
    ([[1, 2], [3], [5, 6]], None, "record 2: expected 2 items"),
    ([[1, 2], [3, 4], [5, None]], None, "null in record 3"),
    ([[1, 2], [3, 4], [5, None]], 2, "null in record 3"),
    ([[1, 2, 3]] * 3, 3, "record 1: expected 2 items"),
])
def test_a_bad_list_names_its_record(ports, size, message):
    keys, values = np.zeros((3, 4), np.uint8), np.zeros((3, VALUE.size), np.uint8)
    table = pa.Table.from_batches([COLUMNS.record_batch(keys, values)])
    column = pa.array(ports, pa.list_(pa.uint16()) if size is None else
                      pa.list_(pa.uint16(), size))
    with pytest.raises(InputError, match=message):
        COLUMNS.packed(_with_ports(table, column), "in")


def _u64_enum_codecs():
    with BtfBuilder() as b:
        u32 = b.integer("__u32", 4)
        big = b.enum("big", {"LOW": 1, "HIGH": (1 << 63) + 5, "TOP": (1 << 64) - 1}, size=8)
        btf = Btf.from_bytes(b.raw())
    return BtfCodec(btf, u32), BtfCodec(btf, big)


def test_a_u64_enum_from_two_to_the_63_up_round_trips():
    """Enumerators and plain numbers of a u64 enum past the int64 range load back: by name
    (the dictionary column a dump writes) and as decimal text."""
    key, value = _u64_enum_codecs()
    columns = Columns(key, value)
    keys = np.arange(5, dtype=np.uint32).view(np.uint8).reshape(5, 4)
    numbers = [1, (1 << 63) + 5, (1 << 64) - 1, (1 << 63), 7]  # the last two have no name
    values = np.array(numbers, dtype=np.uint64).view(np.uint8).reshape(5, 8)
    table = pa.Table.from_batches([columns.record_batch(keys, values)])
    assert columns.packed(_parquet(table), "in") == (5, keys.tobytes(), values.tobytes())
    as_text = pa.table({"key": pa.array(range(5), pa.uint32()),
                        "value": pa.array([str(n) for n in numbers])})
    assert columns.packed(as_text, "in") == (5, keys.tobytes(), values.tobytes())


@pytest.mark.parametrize("text, shown", [("-1", "-1"), (str(1 << 64), str(1 << 64))])
def test_a_u64_enum_number_out_of_range_is_one_line_naming_the_record(text, shown):
    key, value = _u64_enum_codecs()
    table = pa.table({"key": pa.array([0, 1], pa.uint32()),
                      "value": pa.array(["HIGH", text])})
    with pytest.raises(InputError, match=f"record 2: {shown} does not fit u64"):
        Columns(key, value).packed(table, "in")
