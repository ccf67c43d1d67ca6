"""The typed JSON text of large batches (rows assembled from whole columns in numpy, see
:meth:`RecordText._text_rows`) against two references, over random C layouts
(``tools/layoutgen.py``, the decoded types included) and random records with edge integers
at every integer field (0, ±1, each width's minimum and maximum, the powers of ten around
the four-digit groups):

- ``json.dumps`` of the records' Python values (:meth:`Codec.values`), with the value rule's
  few texts that are not plain JSON of the value (raw bits as ``"0x.."``, non-finite floats
  as strings) spelled out here;
- the ``%`` formatting of the same rows one by one (the path of small batches), in the
  typed and in bpftool's exact mode, and in bpftool-json's entry (raw byte lists around the
  exact text).

The batch sizes and the rows per chunk are drawn too, so a batch spans several chunks.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import subprocess
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpfbatch.btf import Btf, Kind
from bpfbatch.records import jsontext, layout
from bpfbatch.records.codec import BtfCodec, RawCodec
from bpfbatch.records.columns import ByteRows, rows as numpy_rows
from bpfbatch.records.decoding import Decoded, decoded_codecs
from tools import layoutgen

pytestmark = pytest.mark.skipif(not shutil.which(layoutgen.CLANG), reason="needs clang")

SEED = 20261202
COUNT = 40


@pytest.fixture(scope="module")
def codecs(tmp_path_factory) -> list[BtfCodec]:
    """The random record types of one compiled object, decoded as a dump shows them."""
    workdir = tmp_path_factory.mktemp("layouts")
    source = layoutgen.generate(SEED, COUNT, layoutgen.Features(decoded=True))
    (workdir / "l.bpf.c").write_text(source)
    subprocess.run([layoutgen.CLANG, "-g", "-O2", "-target", "bpf",
                    "-Wno-fixed-enum-extension", "-I/usr/include/x86_64-linux-gnu", "-c",
                    str(workdir / "l.bpf.c"), "-o", str(workdir / "l.bpf.o")],
                   check=True, capture_output=True)
    btf = Btf.from_file(str(workdir / "l.bpf.o"))
    records = [t.id for t in btf.types if t.kind in (Kind.STRUCT, Kind.UNION)
               and t.name and t.name[0] == "r" and t.name[1:].isdigit()]
    assert len(records) >= COUNT
    return [decoded_codecs(BtfCodec(btf, t), BtfCodec(btf, t))[1] for t in records]


def _edges(nbits: int, signed: bool) -> list[int]:
    """Edge values of an integer field, as its unsigned bits."""
    low, high = layout.field_range(nbits, signed)
    high -= 1  # field_range is [low, high)
    near = [0, 1, -1, low, high, low + 1, high - 1]
    near += [s * (10 ** k + d) for k in range(1, 20) for d in (-1, 0) for s in (1, -1)]
    return sorted({v % (1 << nbits) for v in near if low <= v <= high})


def _int_fields(node, out: list) -> list:
    """``(byte offset, bytes)`` of every whole-byte integer and enum under ``node``."""
    if isinstance(node, Decoded):
        return _int_fields(node.inner, out)
    if isinstance(node, (layout.Int, layout.Enum)):
        out.append((node.offset, node.size, node.signed))
    elif isinstance(node, layout.Struct):
        for _, member in node.members:
            _int_fields(member, out)
    elif isinstance(node, layout.Array) and not isinstance(node, layout.CharArray):
        for elem in node.elems:
            _int_fields(elem, out)
    return out


def records(codec: BtfCodec, count: int, seed: int, edge: float) -> bytes:
    """``count`` random records of ``codec``'s type; each integer field an edge value with
    probability ``edge``."""
    rng = random.Random(seed)
    fields = _int_fields(codec.node, [])
    out = bytearray()
    for _ in range(count):
        raw = bytearray(rng.randbytes(codec.size))
        for offset, size, signed in fields:
            if rng.random() < edge:
                value = rng.choice(_edges(size * 8, signed))
                raw[offset:offset + size] = value.to_bytes(size, "little")
        out += raw
    return bytes(out)


def reference(node, value):
    """The typed JSON text's value for ``value`` (``Codec.values``) of ``node``."""
    if isinstance(node, Decoded):
        return value
    if isinstance(node, layout.Bits):
        return f"0x{value % (1 << node.nbits):x}"
    if isinstance(node, layout.Int) and not node.np_type:
        return f"0x{value % (1 << (8 * node.size)):x}"
    if isinstance(node, layout.Float):
        if not node.code:
            return None
        return value if math.isfinite(value) else json.dumps(value)
    if isinstance(node, layout.Array):
        if isinstance(node, layout.CharArray) and isinstance(value, str):
            return value
        return [reference(elem, v) for elem, v in zip(node.elems, value)]
    if isinstance(node, layout.Struct):
        out = {}
        for name, member in node.members:
            if name:
                out[name] = reference(member, value[name])
            elif isinstance(member, layout.Struct):  # anonymous: fields inline
                out.update(reference(member, value))
        return out
    return value


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_large_batches_render_what_json_dumps_and_the_row_path_give(codecs, data):
    codec = codecs[data.draw(st.integers(0, len(codecs) - 1), label="layout")]
    count = data.draw(st.integers(jsontext._BLOCK_ROWS, 3 * jsontext._BLOCK_ROWS), label="count")
    chunk = data.draw(st.sampled_from([7, 64, 1 << 15]), label="chunk rows")
    raw = records(codec, count, data.draw(st.integers(0, 2**32)), data.draw(
        st.sampled_from([0.0, 0.5, 1.0]), label="edge"))
    rows, small = numpy_rows(raw, count, codec.size), ByteRows(raw, count, codec.size)
    sep = data.draw(st.sampled_from([b"\n", b",\n", b","]), label="sep")
    values = codec.values(small)
    with mock.patch.object(jsontext, "_CHUNK_ROWS", chunk):
        for exact in (False, True):
            template = codec.template(exact)
            text, ends = template.render_ends([rows], sep, b"]")
            by_row = template.render([small])
            assert text == sep.join(by_row) + b"]"
            if template.assembles([rows]):  # not a text of literals only
                assert ends.tolist() == [len(sep.join(by_row[:i + 1])) for i in range(count)]
            if not exact:
                assert by_row == [json.dumps(reference(codec.node, v),
                                             separators=(",", ":")).encode() for v in values]
                assert template.render([rows]) == by_row
        # bpftool-json's entry: raw byte lists (fixed-width runs) around the typed text
        entry = (jsontext.RecordText().text(b'{"key":').extend(RawCodec(3).template(), 0)
                 .text(b',"value":').extend(RawCodec(codec.size).template(), 1)
                 .text(b',"formatted":').extend(codec.template(True), 1).text(b"}"))
        keys = (raw * 3)[:3 * count]
        assert entry.render_joined([numpy_rows(keys, count, 3), rows], sep) == \
            sep.join(entry.render([ByteRows(keys, count, 3), small]))


@pytest.mark.parametrize("dtype", ["<i1", "<u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8"])
def test_every_integer_width_at_its_edges(dtype):
    """Each width's edge values, and every digit count, in one column: what ``%d`` writes."""
    import numpy as np

    info = np.iinfo(dtype)
    nbits = 8 * np.dtype(dtype).itemsize
    edges = [v - (1 << nbits) if info.min < 0 and v >= 1 << (nbits - 1) else v
             for v in _edges(nbits, info.min < 0)]
    column = np.array(edges * 3, dtype)
    block, pad = jsontext._decimal(column, b"}")
    texts = [bytes(row[p:]) for row, p in zip(block, pad.tolist())]
    assert texts == [b"%d}" % v for v in column.tolist()]
