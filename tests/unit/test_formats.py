"""Renderers fed with batches built from bytes: framing, streaming, shapes."""

import csv
import io
import json
import struct
import threading

import pytest

from bpfbatch._sys.abi import MapType
from bpfbatch.btf import Btf, BtfBuilder
from bpfbatch.errors import InputError, KernelError
from bpfbatch.map.cursor import Batch, read_ahead
from bpfbatch.map.handle import MapInfo
from bpfbatch.records.codec import PerCpuCodec, RawCodec, map_codecs
from bpfbatch.formats.render import RENDERERS, make_renderer


def _types():
    with BtfBuilder() as b:
        u32 = b.integer("unsigned int", 4)
        value = b.struct("val", [("a", b.integer("long long unsigned int", 8)),
                                 ("name", b.array(b.integer("char", 1, signed=True), 8))])
        return Btf.from_bytes(b.raw()), u32, value


BTF, U32, VAL = _types()


def info(map_type=MapType.HASH, typed=True, value_size=16):
    return MapInfo(id=1, type=map_type, name="t", key_size=4, value_size=value_size,
                   max_entries=64, flags=0, btf_id=1 if typed else 0,
                   btf_key_type_id=U32 if typed else 0, btf_value_type_id=VAL if typed else 0)


def batch(keys, values):
    return Batch(len(keys), memoryview(b"".join(keys)), memoryview(b"".join(values)))


def render(fmt, map_info, batches, ncpus=2):
    key, value = map_codecs(map_info, BTF if map_info.btf_id else None, ncpus=ncpus)
    out = WriteCounter()
    r = make_renderer(fmt, map_info, key, value, out)
    for b in batches:
        r.write_batch(b)
    r.close()
    return out


class WriteCounter(io.BytesIO):
    def __init__(self):
        super().__init__()
        self.writes = 0

    def write(self, data):
        self.writes += 1
        return super().write(data)


def entries(n, start=0):
    keys = [struct.pack("<I", i) for i in range(start, start + n)]
    values = [struct.pack("<Q8s", i * 10, b"n%d" % i) for i in range(start, start + n)]
    return keys, values


@pytest.mark.parametrize("fmt", ["json", "bpftool-json"])
def test_empty_map_is_an_empty_array(fmt):
    assert render(fmt, info(), []).getvalue() == b"[]\n"


def test_jsonl_and_csv_of_an_empty_map_are_empty():
    assert render("jsonl", info(), []).getvalue() == b""
    assert render("csv", info(), []).getvalue() == b""


TEXT_FORMATS = sorted(set(RENDERERS) - {"parquet", "arrow"})


@pytest.mark.parametrize("fmt", TEXT_FORMATS)
def test_batches_stream_one_write_each_and_concatenate(fmt):
    first, second = batch(*entries(3)), batch(*entries(2, start=3))
    whole = batch(*entries(5))
    streamed = render(fmt, info(), [first, Batch(0, memoryview(b""), memoryview(b"")), second])
    trailer = fmt in ("json", "bpftool-json")  # the closing bracket
    assert streamed.writes == 2 + trailer  # one per non-empty batch
    assert streamed.getvalue() == render(fmt, info(), [whole]).getvalue()


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_columnar_batches_stream_into_the_table_of_the_whole(fmt):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    def table(batches):
        data = io.BytesIO(render(fmt, info(), batches).getvalue())
        return pq.read_table(data) if fmt == "parquet" else pa.ipc.open_stream(data).read_all()

    streamed = table([batch(*entries(3)), Batch(0, memoryview(b""), memoryview(b"")),
                      batch(*entries(2, start=3))])
    assert streamed.equals(table([batch(*entries(5))]))
    assert streamed.to_pylist()[4] == {"key": 4, "value.a": 40, "value.name": "n4"}


def test_typed_json():
    out = render("json", info(), [batch(*entries(2))]).getvalue()
    assert out == (b'[\n{"key":0,"value":{"a":0,"name":"n0"}},\n'
                   b'{"key":1,"value":{"a":10,"name":"n1"}}\n]\n')
    assert json.loads(out)[1] == {"key": 1, "value": {"a": 10, "name": "n1"}}


def test_jsonl_lines_parse():
    lines = render("jsonl", info(), [batch(*entries(3))]).getvalue().splitlines()
    assert [json.loads(line)["value"]["a"] for line in lines] == [0, 10, 20]


def test_untyped_json_prints_raw_bytes():
    out = json.loads(render("json", info(typed=False), [batch(*entries(1))]).getvalue())
    assert out == [{"key": ["0x00"] * 4, "value": ["0x00"] * 8 + ["0x6e", "0x30"] + ["0x00"] * 6}]


def test_bpftool_json_shapes():
    out = render("bpftool-json", info(), [batch(*entries(1, start=1))]).getvalue()
    assert out == (b'[{"key":["0x01","0x00","0x00","0x00"],"value":["0x0a",' + b'"0x00",' * 7
                   + b'"0x6e","0x31",' + b",".join([b'"0x00"'] * 6)
                   + b'],"formatted":{"key":1,"value":{"a":10,"name":"n1"}}}]\n')
    raw = render("bpftool-json", info(typed=False), [batch(*entries(1))]).getvalue()
    assert b"formatted" not in raw and raw.startswith(b'[{"key":["0x00",')


def test_formatted_has_no_key_without_a_key_type():
    # bpftool prints the key in "formatted" only when the map has a BTF key type.
    map_info = MapInfo(id=1, type=MapType.HASH, name="t", key_size=4, value_size=16,
                       max_entries=4, flags=0, btf_id=1, btf_key_type_id=0,
                       btf_value_type_id=VAL)
    doc = json.loads(render("bpftool-json", map_info, [batch(*entries(1))]).getvalue())
    assert doc[0]["formatted"] == {"value": {"a": 0, "name": "n0"}}
    typed = json.loads(render("json", map_info, [batch(*entries(1))]).getvalue())
    assert typed[0]["key"] == ["0x00"] * 4


def test_per_cpu_shapes_with_two_cpus():
    # value_size 12 -> stride 16: CPU 1 starts at byte 16, the pad bytes are not printed.
    keys = [struct.pack("<I", 7)]
    values = [bytes(range(12)) + b"\xee" * 4 + bytes(range(100, 112)) + b"\xee" * 4]
    map_info = info(MapType.PERCPU_HASH, typed=False, value_size=12)
    doc = json.loads(render("bpftool-json", map_info, [batch(keys, values)]).getvalue())
    assert [v["cpu"] for v in doc[0]["values"]] == [0, 1]
    assert doc[0]["values"][1]["value"] == ["0x%02x" % b for b in range(100, 112)]
    typed = json.loads(render("json", map_info, [batch(keys, values)]).getvalue())
    assert typed[0]["values"][0] == {"cpu": 0, "value": ["0x%02x" % b for b in range(12)]}


def test_per_cpu_typed_formatted():
    keys = [struct.pack("<I", 3)]
    values = [struct.pack("<Q8s", 1, b"a") + struct.pack("<Q8s", 2, b"b")]
    out = render("bpftool-json", info(MapType.PERCPU_ARRAY), [batch(keys, values)])
    doc = json.loads(out.getvalue())
    assert doc[0]["formatted"] == {"key": 3, "values": [
        {"cpu": 0, "value": {"a": 1, "name": "a"}}, {"cpu": 1, "value": {"a": 2, "name": "b"}}]}


def test_csv_flattens_fields_and_cpus():
    text = render("csv", info(), [batch(*entries(2))]).getvalue().decode()
    assert list(csv.reader(io.StringIO(text))) == [
        ["key", "value.a", "value.name"], ["0", "0", "n0"], ["1", "10", "n1"]]
    keys = [struct.pack("<I", 3)]
    values = [struct.pack("<Q8s", 1, b"a") + struct.pack("<Q8s", 2, b"b")]
    text = render("csv", info(MapType.PERCPU_HASH), [batch(keys, values)]).getvalue().decode()
    assert list(csv.reader(io.StringIO(text))) == [
        ["key", "cpu", "value.a", "value.name"], ["3", "0", "1", "a"], ["3", "1", "2", "b"]]
    raw = render("csv", info(typed=False), [batch(*entries(1))]).getvalue().decode()
    assert raw.splitlines() == ["key,value", "00000000," + "00" * 8 + "6e30" + "00" * 6]


def test_table_has_one_header_and_keeps_its_widths():
    text = render("table", info(), [batch(*entries(2)), batch(*entries(12, start=2))])
    lines = text.getvalue().decode().splitlines()
    # Numbers to the right, text to the left, in the first batch and the later ones.
    assert lines[:3] == ["  key    value.a  value.name", "-----  ---------  ------------",
                         "    0          0  n0"]
    assert lines[4] == "    2         20  n2"
    assert lines[-1] == "   13        130  n13"


def test_unknown_format_names_the_parameter():
    key, value = RawCodec(4), RawCodec(16)
    with pytest.raises(InputError, match="fmt: unknown format 'yaml'"):
        make_renderer("yaml", info(), key, value, io.BytesIO())


def test_per_cpu_codec_comes_from_the_map_type():
    _, value = map_codecs(info(MapType.LRU_PERCPU_HASH), BTF, ncpus=3)
    assert isinstance(value, PerCpuCodec) and value.size == 3 * 16


# -- read_ahead ---------------------------------------------------------------------------

def reused_buffer_batches(n):
    """Like the cursor: every batch is a view of the same buffers, rewritten per step."""
    keys, values = bytearray(4), bytearray(16)
    for i in range(n):
        keys[:] = struct.pack("<I", i)
        values[:] = struct.pack("<Q8s", i * 10, b"n%d" % i)
        yield Batch(1, memoryview(keys), memoryview(values))


def test_read_ahead_copies_each_batch_out_of_reused_buffers():
    got = [(bytes(b.keys), bytes(b.values)) for b in read_ahead(reused_buffer_batches(50))]
    assert got == [(struct.pack("<I", i), struct.pack("<Q8s", i * 10, b"n%d" % i))
                   for i in range(50)]
    assert render("json", info(), read_ahead(reused_buffer_batches(3))).getvalue() == \
        render("json", info(), [batch(*entries(3))]).getvalue()


def test_read_ahead_raises_the_readers_error_after_its_batches():
    def failing():
        yield from reused_buffer_batches(2)
        raise KernelError("lookup batch", 14, obj="map 1")
    seen = []
    with pytest.raises(KernelError, match="lookup batch"):
        for b in read_ahead(failing()):
            seen.append(b.count)
    assert seen == [1, 1]


def test_leaving_early_stops_the_reader():
    def endless():
        while True:
            yield from reused_buffer_batches(1)
    for _ in read_ahead(endless()):
        break
    assert not [t for t in threading.enumerate() if t.name == "bpfbatch-read-ahead"]


def test_flat_columns_of_anonymous_members_arrays_and_bools():
    with BtfBuilder() as b:
        u32 = b.integer("unsigned int", 4)
        anon = b.union("", [("x", u32), ("y", b.integer("unsigned short", 2))])
        vid = b.struct("v", [("a", u32), ("", anon), ("arr", b.array(u32, 2)),
                             ("ok", b.integer("_Bool", 1, boolean=True))])
        btf = Btf.from_bytes(b.raw())
    map_info = MapInfo(id=1, type=MapType.HASH, name="t", key_size=4, value_size=20,
                       max_entries=4, flags=0, btf_id=1, btf_key_type_id=u32,
                       btf_value_type_id=vid)
    key, value = map_codecs(map_info, btf)
    out = io.BytesIO()
    r = make_renderer("csv", map_info, key, value, out)
    r.write_batch(batch([struct.pack("<I", 9)], [struct.pack("<IIII?xxx", 1, 0x10002, 3, 4, True)]))
    r.close()
    assert out.getvalue().decode().splitlines() == [
        "key,value.a,value.x,value.y,value.arr,value.ok", '9,1,65538,2,"[3,4]",true']
