"""Every input format accepts and refuses the same values (issue 23, item 7).

The same generated values — for a ``_Bool``, a ``char[8]``, and a union's members — are
written as each format writes them (JSONL, JSON, CSV; Parquet and Arrow where the layout has
columns) and read for the same map: each value is either refused by every format or read by
every format into the same bytes. On the old readers Parquet stored a ``uint8`` 2 into the
``_Bool``, took non-ASCII and non-UTF-8 bytes into the ``char[8]`` where JSONL refuses them,
and JSONL stored ``{"x": 1, "y": 2}`` into a union as x = y = 2.
"""

from __future__ import annotations

import csv
import io
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.errors import InputError
from bpfbatch.formats.read import read_records

TEXT = ("jsonl", "json", "csv")
COLUMNAR = ("parquet", "arrow")
SETTINGS = settings(max_examples=150, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _map(fields, name: str, *, union: bool = False) -> Map:
    with BtfBuilder() as b:
        u32 = b.integer("__u32", 4)
        types = {"_Bool": b.integer("_Bool", 1, boolean=True),
                 "char": b.array(b.integer("char", 1, signed=True), 8),
                 "__u32": u32, "__u16": b.integer("__u16", 2)}
        value = b.struct("v", [(name_, types[kind]) for name_, kind in fields], union=union)
        return Map.create(MapType.HASH, 4, b.layout(value)[0], 4, name=name,
                          btf_fd=b.load(), btf_key_type_id=u32, btf_value_type_id=value)


@pytest.fixture(scope="module")
def scalars():
    with _map([("b", "_Bool"), ("s", "char"), ("n", "__u32")],
              f"bb_agree{os.getpid() % 10000}") as m:
        yield m


@pytest.fixture(scope="module")
def union():
    with _map([("x", "__u32"), ("y", "__u16")], f"bb_agreeu{os.getpid() % 10000}",
              union=True) as m:
        yield m


def _text(fmt: str, value: dict) -> bytes:
    record = {"key": 1, "value": value}
    if fmt == "jsonl":
        return json.dumps(record).encode() + b"\n"
    if fmt == "json":
        return json.dumps([record]).encode()
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["key", *(f"value.{name}" for name in value)])
    writer.writerow([1, *(_cell(v) for v in value.values())])
    return out.getvalue().encode()


def _cell(value) -> str:
    """A value as a CSV cell, as the CSV writer spells it (a bool as true/false)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _columnar(fmt: str, value: dict) -> bytes:
    columns = {"key": pa.array([1], pa.uint32())}
    for name, v in value.items():
        if isinstance(v, bool):
            columns[f"value.{name}"] = pa.array([v], pa.bool_())
        elif isinstance(v, int):
            columns[f"value.{name}"] = pa.array([v], pa.int64())
        elif isinstance(v, bytes):
            columns[f"value.{name}"] = pa.array([v], pa.binary())
        else:
            columns[f"value.{name}"] = pa.array([v], pa.string())
    table = pa.table(columns)
    out = io.BytesIO()
    if fmt == "parquet":
        pq.write_table(table, out)
    else:
        with pa.ipc.new_stream(out, table.schema) as writer:
            writer.write_table(table)
    return out.getvalue()


def _verdicts(m: Map, value: dict, formats, tmp_path) -> dict[str, bytes | None]:
    """Each format's reading of ``value``: the packed value bytes, or ``None`` (refused)."""
    out = {}
    for fmt in formats:
        if isinstance(value.get("s"), bytes) and fmt in TEXT:
            continue  # text formats cannot carry bytes that are not text
        data = _text(fmt, value) if fmt in TEXT else _columnar(fmt, value)
        path = tmp_path / f"agree.{fmt}"
        path.write_bytes(data)
        try:
            out[fmt] = bytes(read_records(str(path), m.info).values)
        except InputError:
            out[fmt] = None
    return out


_CHARS = st.text(st.characters(min_codepoint=1, max_codepoint=0x3000), max_size=10)


@SETTINGS
@given(b=st.one_of(st.booleans(), st.integers(-2, 3)), s=st.one_of(_CHARS, st.binary(max_size=9)),
       n=st.integers(-1, 1 << 32))
def test_scalars_are_taken_or_refused_alike(scalars, tmp_path_factory, b, s, n):
    verdicts = _verdicts(scalars, {"b": b, "s": s, "n": n}, TEXT + COLUMNAR,
                         tmp_path_factory.mktemp("agree"))
    assert len(set(verdicts.values())) == 1, verdicts


@SETTINGS
@given(members=st.dictionaries(st.sampled_from(["x", "y"]), st.integers(0, 1 << 17),
                               min_size=1))
def test_union_members_are_taken_or_refused_alike(union, tmp_path_factory, members):
    verdicts = _verdicts(union, members, TEXT, tmp_path_factory.mktemp("agree"))
    assert len(set(verdicts.values())) == 1, verdicts


@pytest.mark.parametrize("value, accepted", [
    ({"b": 2, "s": "", "n": 0}, False),            # a bool is 0 or 1 (dump would show true)
    ({"b": 1, "s": "\u00e9", "n": 0}, False),      # not ASCII
    ({"b": 1, "s": b"\xff\xfe", "n": 0}, False),   # not even UTF-8 (columnar only)
    ({"b": True, "s": "bash", "n": 7}, True),
])
def test_what_parquet_took_that_jsonl_refused(scalars, tmp_path, value, accepted):
    verdicts = _verdicts(scalars, value, TEXT + COLUMNAR, tmp_path)
    assert {v is not None for v in verdicts.values()} == {accepted}, verdicts


def test_a_union_given_two_members_that_disagree_is_refused(union, tmp_path):
    assert set(_verdicts(union, {"x": 1, "y": 2}, TEXT, tmp_path).values()) == {None}
    agreeing = _verdicts(union, {"x": 0x10002, "y": 2}, TEXT, tmp_path)  # y: x's low half
    assert set(agreeing.values()) == {(0x10002).to_bytes(4, "little")}
