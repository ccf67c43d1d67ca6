"""The value rule (issue 12): whatever ``dump`` prints, ``load`` and ``--where`` take back
unchanged; whatever does not fit its field exactly is refused with file:line and field — no
silent wrap, truncation, widening or defaulting. And the readers bounded: no recursion
without a limit, no unbounded read of a non-regular file, a closed stdin said as such.

Each test here failed before issue 12 was fixed (they were strict xfails until then).
"""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from bpfbatch.exec.predicate import compile_predicate
from bpfbatch.btf import Btf, BtfBuilder
from bpfbatch.records.codec import BtfCodec, RawCodec
from bpfbatch.formats.read import read_records
from bpfbatch.errors import InputError


@pytest.fixture(scope="module")
def types():
    """Codecs of the edge types, built without a kernel."""
    with BtfBuilder() as b:
        u8, u16 = b.integer("unsigned char", 1), b.integer("unsigned short", 2)
        u32, u64 = b.integer("unsigned int", 4), b.integer("long long unsigned int", 8)
        s16 = b.integer("short", 2, signed=True)
        char = b.integer("char", 1, signed=True)
        boolean = b.integer("_Bool", 1, boolean=True)
        state = b.enum("state", {"IDLE": 1, "BUSY": 200}, size=1)  # enum state : __u8
        inner = b.struct("", [("b", u32), ("c", u32)])
        either = b.union("", [("d", u8), ("e", u16)])
        ids = {
            "flagged": b.struct("flagged", [("flag", boolean), ("rest", b.array(u8, 3))]),
            "st": b.struct("st", [("st", state)]),
            "anon": b.struct("anon", [("a", u32), ("", inner), ("", either)]),
            "ints": b.struct("ints", [("u", u64), ("s", s16), ("bit", u32, 1), ("rest", u32, 31)]),
            "name": b.struct("name", [("comm", b.array(char, 16))]),
        }
        btf = Btf.from_bytes(b.raw())
    return {name: BtfCodec(btf, type_id) for name, type_id in ids.items()}


def test_bpftool_json_reads_a_bool_as_one_byte(types):
    record = bytes([0, 1, 1, 1])  # flag false, the bytes after it set
    text = types["flagged"].render_batch(record, 1, exact=True)[0]
    assert text.startswith(b'{"flag":false')


def test_unsigned_enum_stays_unsigned(types):
    codec = types["st"]
    assert codec.decode(bytes([200])) == {"st": "BUSY"}
    assert codec.decode(bytes([130])) == {"st": 130}
    assert codec.dtype["st"] == np.dtype("u1")
    predicate = compile_predicate("st == 200", codec)
    assert predicate.evaluate(np.array([[200], [130]], np.uint8), 0).tolist() == [True, False]


def test_anonymous_members_belong_to_their_parent(types):
    codec = types["anon"]
    value = {"a": 1, "b": 2, "c": 3, "d": 4, "e": 4}
    assert codec.decode(codec.encode(value)) == value
    assert b'""' not in codec.render_batch(codec.encode(value), 1)[0]


@pytest.mark.parametrize("text", ["abcdefghijklmnop", "a\tb", "tab\tand\nnewline"])
def test_char_array_strings_round_trip_as_strings(types, text):
    codec = types["name"]
    assert codec.decode(codec.encode({"comm": text})) == {"comm": text}


@pytest.mark.parametrize("value", [
    {"u": -1},              # into a u64: would become 2**64 - 1
    {"s": 40000},           # into an s16: would become -25536
    {"u": True},            # a JSON true into an integer: would become 1
    {"bit": -1},            # into a 1-bit unsigned bitfield: would become 1
])
def test_values_that_do_not_fit_are_refused(types, value):
    codec = types["ints"]
    with pytest.raises(InputError):
        codec.encode({"u": 0, "s": 0, "bit": 0, "rest": 0} | value)


#: A map of ``u32`` keys and ``struct ints`` values, as the readers see it.
INTS = SimpleNamespace(key_size=4, value_size=16, percpu=False, btf_id=0, btf_key_type_id=0,
                       btf_value_type_id=0)


def test_missing_member_is_refused(types, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"key": "01000000", "value": {"u": 1, "s": 2, "bit": 0}}\n')
    with pytest.raises(InputError, match=r"in\.jsonl:1.*rest"):
        read_records(str(path), INTS, codecs=(RawCodec(4), types["ints"]))


def test_missing_csv_column_is_refused(types, tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("key,value.u,value.s,value.bit\n01000000,1,2,0\n")
    with pytest.raises(InputError, match="rest"):
        read_records(str(path), INTS, codecs=(RawCodec(4), types["ints"]))


RAW = SimpleNamespace(key_size=4, value_size=4, percpu=False, btf_id=0, btf_key_type_id=0,
                      btf_value_type_id=0)
BPFTOOL_DUMP = ('[{"key":["0x01","0x00","0x00","0x00"],"value":["0x02","0x00","0x00","0x00"]},'
                '{"key":["0x03","0x00","0x00","0x00"],"value":["0x04","0x00","0x00","0x00"]}]\n')


def test_format_is_detected_from_the_content(tmp_path):
    path = tmp_path / "dump"  # no suffix: bpftool -j map dump > dump
    path.write_text(BPFTOOL_DUMP)
    records = read_records(str(path), RAW)
    assert records.count == 2 and records.values == bytes([2, 0, 0, 0, 4, 0, 0, 0])


def _child(code: str, **kw) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter with this package, bounded in time and memory."""
    prelude = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))"
               "\nfrom types import SimpleNamespace\nfrom bpfbatch.formats.read import read_records\n"
               "RAW = SimpleNamespace(key_size=4, value_size=4, percpu=False, btf_id=0, "
               "btf_key_type_id=0, btf_value_type_id=0)\n")
    try:
        return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True,
                              text=True, timeout=60, **kw)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(exc.cmd, -9, "", "timed out")


def _one_line_input_error(run: subprocess.CompletedProcess, *words: str) -> None:
    assert run.returncode == 3, run.stderr[-500:]
    assert run.stdout.count("\n") == 1 and all(w in run.stdout for w in words), run.stdout


_REPORT = ("\ntry:\n    {}\nexcept Exception as exc:\n"
           "    print(type(exc).__name__ + ': ' + str(exc)); sys.exit(3)\n")


def test_json_array_on_stdin():
    run = _child(_REPORT.format("print(read_records('-', RAW).count); sys.exit(0)"),
                 input=BPFTOOL_DUMP)
    assert run.returncode == 0 and run.stdout == "2\n", run.stdout + run.stderr


def test_closed_stdin_is_one_line():
    run = _child(_REPORT.format("read_records('-', RAW)"), stdin=subprocess.DEVNULL,
                 preexec_fn=lambda: os.close(0))
    _one_line_input_error(run, "InputError", "<stdin>")


def test_non_regular_input_is_bounded():
    run = _child(_REPORT.format("read_records('/dev/zero', RAW, fmt='jsonl')"))
    _one_line_input_error(run, "InputError", "/dev/zero")


def test_deep_json_nesting_is_one_line(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    run = _child(_REPORT.format(f"read_records({str(path)!r}, RAW)"))
    _one_line_input_error(run, "InputError", "deep.json")


def test_huge_csv_cell_is_one_line(tmp_path):
    path = tmp_path / "big.csv"
    path.write_text("key,value\n" + "1" * 200_000 + ",2\n")
    with pytest.raises(InputError, match="big.csv:2"):
        read_records(str(path), RAW)
