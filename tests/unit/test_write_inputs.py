"""Reading load/delete input without a kernel: every format, the shapes the renderers print,
and errors that name file:line (and the field)."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from bpfbatch.btf import Btf, BtfBuilder
from bpfbatch.cli.app import app
from bpfbatch.cli.options import as_flags
from bpfbatch.errors import InputError
from bpfbatch.labs import covertable
from bpfbatch.formats import read, render
from bpfbatch.records.codec import BtfCodec, PerCpuCodec, RawCodec

RAW = SimpleNamespace(key_size=4, value_size=8, percpu=False, btf_id=0, btf_key_type_id=0,
                      btf_value_type_id=0)


@pytest.fixture(scope="module")
def typed():
    """(key codec, value codec) for struct flow {u32 addr; u16 port;} / struct stats {u64
    packets; char comm[8];}, built without a kernel."""
    with BtfBuilder() as b:
        u16, u32, u64 = b.integer("__u16", 2), b.integer("__u32", 4), b.integer("__u64", 8)
        char = b.integer("char", 1, signed=True)
        key = b.struct("flow", [("addr", u32), ("port", u16)])
        value = b.struct("stats", [("packets", u64), ("comm", b.array(char, 8))])
        btf = Btf.from_bytes(b.raw())
    # records below leave fields out on purpose: missing fields are zeros (--default-zero)
    return BtfCodec(btf, key, default_zero=True), BtfCodec(btf, value, default_zero=True)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def flow(addr, port):
    return struct.pack("<IHxx", addr, port)


def stats(packets, comm):
    return struct.pack("<Q8s", packets, comm)


def test_typed_jsonl_packs_records_and_remembers_lines(tmp_path, typed):
    path = write(tmp_path, "in.jsonl", '{"key":{"addr":1,"port":80},"value":{"packets":5,"comm":"sh"}}\n'
                 "\n"
                 '{"key":{"addr":2,"port":443},"value":{"packets":6}}\n')
    records = read.read_records(path, RAW, codecs=typed)
    assert records.count == 2
    assert records.keys == flow(1, 80) + flow(2, 443)
    assert records.values == stats(5, b"sh") + stats(6, b"")
    assert records.where(1) == f"{path}:3"


def test_json_array_names_the_line_of_the_bad_element(tmp_path, typed):
    entries = [{"key": {"addr": i, "port": 1}, "value": {"packets": 1}} for i in range(3)]
    entries[2]["value"]["comm"] = "far too long a name"
    path = write(tmp_path, "in.json", json.dumps(entries, indent=1))
    with pytest.raises(InputError) as exc:
        read.read_records(path, RAW, codecs=typed)
    starts = [n for n, line in enumerate(json.dumps(entries, indent=1).splitlines(), 1)
              if line == " {"]
    third = starts[2]
    assert str(exc.value).startswith(f"{path}:{third}: value.comm")
    ok = write(tmp_path, "ok.json", json.dumps(entries[:2], indent=1))
    records = read.read_records(ok, RAW, codecs=typed)
    assert records.count == 2 and records.where(1) == f"{ok}:{starts[1]}"


def test_csv_typed_round_trip_shape(tmp_path, typed):
    path = write(tmp_path, "in.csv", "key.addr,key.port,value.packets,value.comm\n"
                 "1,80,5,sh\n2,443,6,\"bash\"\n")
    records = read.read_records(path, RAW, codecs=typed)
    assert records.keys == flow(1, 80) + flow(2, 443)
    assert records.values == stats(5, b"sh") + stats(6, b"bash")
    assert records.where(1) == f"{path}:3"


def test_csv_per_cpu_rows_are_gathered_per_key(tmp_path):
    codecs = (RawCodec(4), PerCpuCodec(RawCodec(4), 2))
    path = write(tmp_path, "in.csv", "key,cpu,value\n01000000,0,0a000000\n01000000,1,0b000000\n"
                 "02000000,0,0c000000\n02000000,1,0d000000\n")
    records = read.read_records(path, RAW, codecs=codecs)
    assert records.count == 2 and records.where(1) == f"{path}:4"
    assert records.values == bytes.fromhex("0a00000000000000" "0b00000000000000"
                                           "0c00000000000000" "0d00000000000000")
    bad = write(tmp_path, "bad.csv", "key,cpu,value\n01000000,0,0a000000\n02000000,1,0b000000\n")
    with pytest.raises(InputError, match=r"bad.csv:3: cpu 1 row does not follow cpu 0"):
        read.read_records(bad, RAW, codecs=codecs)


@pytest.mark.parametrize("text,message", [
    ("key,value,extra\n", "in.csv:1: unknown column 'extra'"),
    ("key,cpu,value\n", "in.csv:1: 'cpu' column given for a map that is not per-CPU"),
    ("key,value\n01000000\n", "in.csv:2: 1 cells for 2 columns"),
    ("key,value\n01000000,00\n", "in.csv:2: value: expected 8 bytes, got 1"),
])
def test_csv_errors_name_the_line(tmp_path, text, message):
    path = write(tmp_path, "in.csv", text)
    with pytest.raises(InputError) as exc:
        read.read_records(path, RAW, codecs=(RawCodec(4), RawCodec(8)))
    assert str(exc.value).startswith(f"{tmp_path}/{message}")


def test_raw_values_as_hex_string_or_bytes_list(tmp_path):
    path = write(tmp_path, "in.jsonl", '{"key":"0x01000000","value":["0x02",3,0,0,0,0,0,0]}\n')
    records = read.read_records(path, RAW)
    assert records.keys == b"\x01\0\0\0" and records.values == b"\x02\x03" + bytes(6)


def test_bpftool_json_uses_raw_bytes_and_ignores_formatted(tmp_path):
    entry = {"key": ["0x07", "0x00", "0x00", "0x00"], "value": ["0x01"] + ["0x00"] * 7,
             "formatted": {"key": 7, "value": 1}}
    path = write(tmp_path, "dump.json", json.dumps([entry, entry]))
    records = read.read_records(path, RAW, fmt="bpftool-json")
    assert records.count == 2 and records.keys == b"\x07\0\0\0" * 2


@pytest.mark.parametrize("line,message", [
    ("1, 2", "invalid JSON: Extra data"),
    ('{"key": "01000000", "value": "0000000000000000"', "invalid JSON"),
    ('["01000000"]', 'expected an object with a "key" member'),
    ('{"key": "01000000", "valu": "00"}', "unknown member 'valu'"),
    ('{"key": "01000000"}', 'missing "value"'),
    ('{"key": "01000000", "values": []}', '"values" (per CPU) given for a map that is not per-CPU'),
    ('{"key": "010000", "value": "0000000000000000"}', "key: expected 4 bytes, got 3"),
])
def test_jsonl_errors_name_file_and_line(tmp_path, line, message):
    good = '{"key": "01000000", "value": "0000000000000000"}'
    path = write(tmp_path, "in.jsonl", f"{good}\n\n{line}\n{good}\n")
    with pytest.raises(InputError) as exc:
        read.read_records(path, RAW)
    assert str(exc.value).startswith(f"{path}:3") and message in str(exc.value)


def test_per_cpu_values_must_list_every_cpu_in_order(tmp_path):
    codecs = (RawCodec(4), PerCpuCodec(RawCodec(4), 2))
    one_cpu = '{"key":"01000000","values":[{"cpu":0,"value":"01000000"}]}\n'
    with pytest.raises(InputError, match="CPUs 0 to 1 in order"):
        read.read_records(write(tmp_path, "a.jsonl", one_cpu), RAW, codecs=codecs)
    same_for_all = '{"key":"01000000","value":"05000000"}\n'
    records = read.read_records(write(tmp_path, "b.jsonl", same_for_all), RAW, codecs=codecs)
    assert records.values == bytes.fromhex("0500000000000000" * 2)


def test_keys_only_ignores_values(tmp_path):
    path = write(tmp_path, "keys.jsonl", '{"key":"01000000"}\n{"key":"02000000","value":"zz"}\n')
    records = read.read_records(path, RAW, with_values=False)
    assert records.count == 2 and records.values is None


def test_unreadable_input_and_unknown_format(tmp_path):
    with pytest.raises(InputError, match="cannot read") as missing:
        read.read_records(str(tmp_path / "missing.jsonl"), RAW)
    assert str(missing.value).endswith(": cannot read: No such file or directory (ENOENT)")
    with pytest.raises(InputError, match="unknown format 'yaml'"):
        read.read_records(write(tmp_path, "x", ""), RAW, fmt="yaml")


@pytest.mark.parametrize("name,fmt", [("a.jsonl", "jsonl"), ("a.json", "json"),
                                      ("a.csv", "csv"), ("-", None), ("a.txt", None)])
def test_format_from_file_name(name, fmt):
    assert read.guess_format(name) == fmt


@pytest.mark.parametrize("text,fmt", [
    ('[{"key":["0x01"],"value":["0x02"]}]', "bpftool-json"),
    ('[\n  {"key": ["0x01"], "value": ["0x02"], "formatted": {}}]', "bpftool-json"),
    ('[\n{"key":1,"value":{"a":2}}\n]', "json"),
    ('{"key":1,"value":2}\n{"key":2,"value":3}\n', "jsonl"),
    ("key,value.a\n1,2\n", "csv"),
    ("", "jsonl"),
])
def test_format_from_content(text, fmt):
    assert read.sniff_format(text.encode()) == fmt


@pytest.mark.parametrize("args,option", [
    (["load", "f", "--if-absent", "--if-present"], "--if-absent"),
    (["load", "f", "--per-key"], "--per-key"),
    (["load", "f", "--batch-size", "0"], "--batch-size"),
    (["clear", "--batch-size", "-1"], "--batch-size"),
    (["bench", "--entries", "0"], "--entries"),
])
def test_cli_option_errors_name_the_option(args, option):
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, InputError) and as_flags(result.exception).obj == option


def test_bench_table_shows_speedup_over_per_key():
    results = {(op, label): [seconds] for op in ("lookup", "lookup_and_delete", "delete")
               for label, seconds in (("no batching", 2.0), ("batch 10", 0.5),
                                      ("batch 1000", 0.1), ("batch all", 0.08))}
    text = covertable.render(results, 1000)
    assert "| lookup            | 2.000 s       | 0.500 s (4.0× faster)" in text
    assert text.count("(25× faster)") == 3


@pytest.mark.parametrize("base,seconds,words", [
    (2.0, 0.5, "4.0× faster"), (2.0, 0.08, "25× faster"), (1.0, 1.4, "1.4× slower"),
    (1.0, 0.72, "1.4× faster"), (1.0, 1.3, "1.3× slower"), (1.0, 1.02, "same"),
    (1.0, 0.97, "same"), (1.0, 30.0, "30× slower"),
])
def test_bench_speedup_words_never_call_a_slower_cell_faster(base, seconds, words):
    """The chart's and the table's label: a cell slower than no batching once read
    "1× faster" (the ratio rounded to 0 digits, always called faster)."""
    assert covertable.speedup(base, seconds) == words


@pytest.mark.parametrize("lines", [
    # A line with two values, and a record split over two lines: as many values as lines.
    ['{"key": "01000000", "value": "0000000000000000"}, {"key": "02000000", "value": "00"}',
     '{"key": "03000000"', '"value": "0000000000000000"}'],
    ['1, 2', '[3', '4]'],
    ['1], [2', '[[3', '4]]'],
    ['"a",', '"b"'],
    ['"a', 'b"', '1, 2'],
    # Valid lines whose strings hold brackets, quotes, backslashes and line separators.
    ['{"a": "]}\\"[{"}', '["\\\\", "\\\\\\"]"]', '"\u2028{["', '  7\t\r', '{}'],
    ['{"a": [1, {"b": "x"}]}', 'null', 'NaN', '-1.5e3'],
])
def test_jsonl_chunk_is_exactly_a_parse_per_line(lines):
    """What a JSONL chunk yields is what ``json.loads`` of each line gives, or its error on
    the first line it fails on."""
    text = "\n".join(lines) + "\n"
    try:
        expected = [json.loads(line) for line in lines]
    except json.JSONDecodeError:
        bad = next(n for n, line in enumerate(lines, 1) if not _loads_ok(line))
        with pytest.raises(InputError, match=rf"^in.jsonl:{bad}: invalid JSON"):
            list(read._jsonl_chunks(iter([text.encode()]), "in.jsonl"))
        return
    [(numbers, parsed)] = read._jsonl_chunks(iter([text.encode()]), "in.jsonl")
    assert list(numbers) == list(range(1, len(lines) + 1))
    assert json.dumps(parsed) == json.dumps(expected)  # NaN == NaN here


def _loads_ok(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True


def test_jsonl_lines_end_at_line_feeds_only(tmp_path):
    """U+2028 inside a JSON string is not a line break (``str.splitlines`` would cut there)."""
    good = '{"key": "01000000", "value": "0000000000000000"}'
    path = write(tmp_path, "in.jsonl", f'{good}\n{{"key": "0100\u20280000", "value": "00"}}\n')
    with pytest.raises(InputError) as exc:
        read.read_records(path, RAW)
    assert str(exc.value).startswith(f"{path}:2: key: not a hex string")


@pytest.fixture(scope="module")
def mixed():
    """(key codec, value codec) for a u32 key and a value of every kind a CSV cell can hold:
    struct mixed {char c; char name[8]; bool ok; enum color shade; float ratio; double
    mean; struct {u16 lo; s16 hi;} range; u32 slots[3];}."""
    with BtfBuilder() as b:
        u16, u32 = b.integer("__u16", 2), b.integer("__u32", 4)
        s16 = b.integer("short", 2, signed=True)
        char = b.integer("char", 1, char=True)  # BTF_INT_CHAR: a character
        plain_char = b.integer("char", 1, signed=True)
        boolean = b.integer("_Bool", 1, boolean=True)
        color = b.enum("color", {"RED": 0, "GREEN": 1})
        span = b.struct("span", [("lo", u16), ("hi", s16)])
        value = b.struct("mixed", [("c", char), ("name", b.array(plain_char, 8)),
                                   ("ok", boolean), ("shade", color),
                                   ("ratio", b.float("float", 4)),
                                   ("mean", b.float("double", 8)), ("range", span),
                                   ("slots", b.array(u32, 3))])
        btf = Btf.from_bytes(b.raw())
    return BtfCodec(btf, u32), BtfCodec(btf, value, default_zero=True)  # records leave fields out


def test_csv_cells_are_read_by_their_field_type(tmp_path, mixed):
    """What the CSV renderer writes loads back to the same bytes, cells that read as numbers,
    bools or JSON included: a char '7', a char[8] "42", "true", "NaN", "[1]"."""
    key_codec, value_codec = mixed
    values = [{"c": c, "name": name, "ok": ok, "shade": shade, "ratio": ratio, "mean": mean,
               "range": {"lo": 7, "hi": -2}, "slots": [1, 2, 3]}
              for c, name, ok, shade, ratio, mean in [
                  ("7", "42", True, "GREEN", 1.5, float("nan")),
                  ("t", "true", False, 5, -0.25, float("inf")),
                  (",", "NaN", True, "RED", 3e38, -1e300),
                  ("[", "[1]", False, 3, 0.0, 2.0),
                  ("\xe9", [97, 1, 98, 99, 100, 101, 102, 103], True, 1, 1.0, 0.5)]]
    keys = b"".join(key_codec.encode(i) for i in range(len(values)))
    packed = b"".join(value_codec.encode(v) for v in values)
    out = io.BytesIO()
    renderer = render.Csv(RAW, key_codec, value_codec, out)
    renderer.write_batch(SimpleNamespace(count=len(values), keys=keys, values=packed))
    path = write(tmp_path, "dump.csv", out.getvalue().decode())
    records = read.read_records(path, RAW, codecs=mixed)
    assert records.keys == keys and records.values == packed


@pytest.mark.parametrize("header,cells,message", [
    ("value.c", "ab", "value.c: expected an integer, got 'ab'"),
    ("value.name", "far too long", "value.name: string longer than 8 bytes"),
    ("value.ok", "yes", "value.ok: expected true or false, got 'yes'"),
    ("value.shade", "BLUE", "value.shade: no enumerator 'BLUE'"),
    ("value.ratio", "1.2.3", "value.ratio: expected a number for a 4-byte float"),
    ("value.slots", '"[1,2]"', "value.slots: expected a list of 3 elements"),
])
def test_csv_cells_that_do_not_read_as_their_type_name_the_field(tmp_path, mixed, header,
                                                                 cells, message):
    path = write(tmp_path, "in.csv", f"key,{header}\n1,{cells}\n")
    with pytest.raises(InputError) as exc:
        read.read_records(path, RAW, codecs=mixed)
    assert str(exc.value).startswith(f"{path}:2: {message}")


def test_csv_column_of_no_field_is_named_at_the_header(tmp_path, mixed):
    path = write(tmp_path, "in.csv", "key,value.colour\n1,RED\n")
    with pytest.raises(InputError, match=r"in.csv:1: unknown column 'value.colour' \(the "
                                         r"value has value.c, value.name, "):
        read.read_records(path, RAW, codecs=mixed)


@pytest.mark.parametrize("fmt,text", [
    ("jsonl", '{"key": 1, "value": {"mean": 2.5}}\n{"key": 2, "value": {"mean": %s}}\n'),
    ("json", '[{"key": 1, "value": {"mean": 2.5}},\n {"key": 2, "value": {"mean": %s}}]\n'),
    ("csv", "key,value.mean\n1,2.5\n2,%s\n"),
])
@pytest.mark.parametrize("mean,message", [
    ("1e400", "value.mean: 1e400 is beyond the range of a 8-byte float"),
    ("-2E+308", "value.mean: -2E+308 is beyond the range of a 8-byte float"),
    ("1" + "0" * 400, "value.mean: an integer of 1329 bits is beyond the range of a 8-byte"),
])
def test_number_beyond_a_double_names_file_line_and_field(tmp_path, mixed, fmt, text, mean,
                                                          message):
    """Not infinity, not a traceback: the field's range, named with file:line."""
    path = write(tmp_path, f"in.{fmt}", text % mean)
    with pytest.raises(InputError) as exc:
        read.read_records(path, RAW, fmt=fmt, codecs=mixed)
    last_line = (text % mean).count("\n")
    assert str(exc.value).startswith(f"{path}:{last_line}: {message}")


def test_infinity_as_the_outputs_write_it_still_loads(tmp_path, mixed):
    path = write(tmp_path, "in.jsonl", '{"key": 1, "value": {"mean": "Infinity", "ratio": '
                                      '"-Infinity"}}\n{"key": 2, "value": {"mean": 1e308}}\n')
    records = read.read_records(path, RAW, codecs=mixed)
    decoded = mixed[1].decode_batch(records.values, 2)
    assert decoded[0]["mean"] == float("inf") and decoded[0]["ratio"] == float("-inf")
    assert decoded[1]["mean"] == 1e308


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='a"\\[]{},\u2028 '),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner,
                                                                max_size=3),
    max_leaves=6)
#: Runs of lines: one value, several values, one value cut in two, or bits of JSON text.
JSON_LINES = st.one_of(
    JSON_VALUES.map(json.dumps).map(lambda text: [text]),
    st.lists(JSON_VALUES.map(json.dumps), min_size=2, max_size=3).map(lambda v: [", ".join(v)]),
    st.tuples(JSON_VALUES.map(json.dumps), st.integers(1, 30)).map(
        lambda cut: [cut[0][:cut[1]], cut[0][cut[1]:]]),
    st.lists(st.text(alphabet=' []{}",:\\1a\r\t', max_size=8), max_size=2))


@settings(max_examples=300, deadline=None)
@given(st.lists(JSON_LINES, max_size=6).map(lambda runs: [line for run in runs for line in run]))
def test_jsonl_chunk_equals_a_parse_per_line_on_any_lines(lines):
    text = "".join(line + "\n" for line in lines)
    numbered = [(n, line) for n, line in enumerate(lines, 1) if line.strip(" \t\r")]
    bad = next((n for n, line in numbered if not _loads_ok(line)), None)
    if bad is not None:
        with pytest.raises(InputError, match=rf"^in.jsonl:{bad}: invalid JSON"):
            list(read._jsonl_chunks(iter([text.encode()]), "in.jsonl"))
        return
    got = [(list(numbers), parsed)
           for numbers, parsed in read._jsonl_chunks(iter([text.encode()]), "in.jsonl")]
    expected = [([n for n, _ in numbered], [json.loads(line) for _, line in numbered])]
    assert got == (expected if numbered else [])


@pytest.mark.parametrize("fmt,where", [("jsonl", "in.jsonl:2"), ("json", "in.json")])
def test_integer_longer_than_python_reads_is_an_input_error(tmp_path, fmt, where):
    """int() refuses over 4300 digits with a ValueError that is no JSONDecodeError."""
    entry = '{"key": "01000000", "value": "0000000000000000"}'
    long = '{"key": %s, "value": "0000000000000000"}' % ("1" * 5000)
    text = f"{entry}\n{long}\n" if fmt == "jsonl" else f"[{entry},\n{long}]\n"
    path = write(tmp_path, f"in.{fmt}", text)
    with pytest.raises(InputError) as exc:
        read.read_records(path, RAW)
    assert str(exc.value).startswith(f"{tmp_path}/{where}: invalid JSON: an integer of more than")


_NO_MATPLOTLIB = """
import sys
sys.modules["matplotlib"] = None  # import matplotlib: ImportError, as when not installed
from bpfbatch.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("plot,message", [("chart.png", "needs matplotlib"),
                                          ("/no/such/folder/chart.png", "no such folder")])
def test_bench_plot_is_refused_before_measuring(plot, message):
    # A billion entries would take minutes (or fail to allocate) if measuring started first.
    done = subprocess.run([sys.executable, "-c", _NO_MATPLOTLIB if "needs" in message else
                           _NO_MATPLOTLIB.replace('sys.modules["matplotlib"] = None', ""),
                           "bench", "--entries", str(10**9), "--plot", plot],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("bpfbatch: error: --plot") and message in done.stderr
