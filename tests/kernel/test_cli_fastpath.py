"""Whole processes: ``bpfbatch ARGS`` through the thin entry point and through typer alone
print the same stdout and stderr and exit with the same status, on a real map, for command
lines the fast path takes (output, errors from the library, signals of no kind) and ones it
leaves to typer. tests/unit/test_fastpath.py compares the parse itself over generated argv."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.cli import fastpath

TYPER_ONLY = "import sys; from bpfbatch.cli import typer_main; typer_main(sys.argv[1:])"
NAME = f"bb_fast_{os.getpid():x}"


@pytest.fixture(scope="module")
def small_map():
    """A 12-entry BTF hash map (``u32 → struct {u64 a; char b[8]}``), pinned, with a name
    of its own; and a per-CPU array beside it for ``--sum``."""
    with BtfBuilder() as b:
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        value = b.struct("val", [("a", u64), ("b", b.array(b.integer("char", 1), 8))])
        m = Map.create(MapType.HASH, 4, 16, 64, name=NAME, btf_fd=b.load(),
                       btf_key_type_id=u32, btf_value_type_id=value)
    for i in range(12):
        m.update(i.to_bytes(4, "little"), (i * 1000).to_bytes(8, "little") + b"flow\0\0\0\0")
    pin = f"/sys/fs/bpf/bbtest_fast_{os.getpid()}"
    m.pin(pin)
    percpu = Map.create(MapType.PERCPU_ARRAY, 4, 8, 4, name=f"bb_fastpc_{os.getpid():x}")
    # load's inputs: the map's own records (loading them changes nothing), a bad record
    jsonl, bad = f"/tmp/bbtest_fast_{os.getpid()}.jsonl", f"/tmp/bbtest_fast_{os.getpid()}.bad"
    with open(jsonl, "wb") as out:
        subprocess.run([sys.executable, "-m", "bpfbatch", "dump", "id", str(m.info.id), "-o",
                        "jsonl"], stdout=out, check=True)
    with open(bad, "w") as out:
        out.write('{"key":1,"value":{"a":1,"b":"x"}}\n{"key":2,"value":{"a":"many"}}\n')
    yield {"ID": str(m.info.id), "PIN": pin, "NAME": NAME, "PCPU": str(percpu.info.id),
           "JSONL": jsonl, "BAD": bad, "NOFILE": jsonl + ".missing"}
    os.unlink(jsonl)
    os.unlink(bad)
    os.unlink(pin)
    m.close()
    percpu.close()


def both(args: list[str]) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    env = {**os.environ, "COLUMNS": "100"}
    ours = subprocess.run([sys.executable, "-m", "bpfbatch", *args], capture_output=True,
                          env=env, timeout=120)
    typer = subprocess.run([sys.executable, "-c", TYPER_ONLY, *args], capture_output=True,
                           env=env, timeout=120)
    return ours, typer


def assert_same(args: list[str]) -> subprocess.CompletedProcess:
    ours, typer = both(args)
    assert (ours.returncode, ours.stdout, ours.stderr) == \
        (typer.returncode, typer.stdout, typer.stderr), args
    return ours


def fill(template: list[str], names: dict[str, str]) -> list[str]:
    return [names.get(token, token) for token in template]


#: (argv with ID / PIN / NAME / PCPU for the maps, whether the fast path takes it)
LINES = [
    (["count", "id", "ID"], True),
    (["count", "pinned", "PIN", "--batch-size=3"], True),
    (["-q", "count", "name", "NAME"], True),
    (["count", "--map-id", "ID", "--batch-size", "0"], True),           # library error, exit 1
    (["count", "--map-id", "4294967295"], True),                         # no such map
    (["count"], True),                                                   # no map named
    (["count", "id", "ID", "--pinned", "PIN"], True),                    # two maps named
    (["dump", "id", "ID"], True),
    (["dump", "id", "ID", "-o", "table", "--limit", "5", "--batch-size", "4"], True),
    (["dump", "--pinned=PIN", "-ojsonl", "--decode", "key=hex", "--decode=b=hex"], True),
    (["dump", "id", "ID", "-o", "csv", "--decode", "none"], True),
    (["dump", "id", "ID", "-o", "bpftool-json"], True),
    (["dump", "id", "ID", "-o", "yaml"], True),                          # unknown format
    (["dump", "id", "ID", "--limit", "-1"], True),
    (["dump", "id", "ID", "--decode", "nope=hex"], True),
    (["dump", "id", "PCPU", "--sum", "-o", "jsonl"], True),
    (["dump", "id", "ID", "-o", "parquet"], True),                       # bytes, to a pipe
    (["list", "--match", "NAME", "-o", "json"], True),
    (["list", "--match", "bb_fast*", "-f", "--type", "hash"], True),
    (["list", "--match", "NAME", "-o", "csv", "--pinned-only"], True),
    (["list", "-o", "xml"], True),
    (["load", "id", "ID", "JSONL"], True),
    (["load", "JSONL", "--pinned", "PIN", "--jobs", "2", "--batch-size", "5"], True),
    (["-j", "dump", "id", "ID"], True),                                   # bpftool-json
    (["dump", "id", "ID", "-p"], True),
    (["-q", "load", "name", "NAME", "--if-absent", "JSONL"], True),
    (["load", "id", "ID", "--if-present", "--per-key", "JSONL"], True),
    (["load", "id", "ID", "BAD"], True),                                 # names file:line
    (["load", "id", "ID", "NOFILE"], True),
    (["load", "id", "ID", "JSONL", "--if-absent", "--if-present"], True),
    (["load", "id", "ID", "JSONL", "--format", "xml"], True),
    (["load", "id", "ID", "JSONL", "--jobs", "0"], False),               # click's range error
    (["load", "id", "ID"], False),                                       # no FILE
    (["count", "--help"], False),
    (["dump", "id", "ID", "--bogus"], False),
    (["dump", "id"], False),
    (["count", "ID"], False),
    (["dump", "id", "ID", "--sum=1"], False),
    (["list", "-fv"], False),
    (["--version"], False),
]


@pytest.mark.parametrize("template, fast", LINES, ids=[" ".join(t) for t, _ in LINES])
def test_the_thin_entry_point_prints_what_typer_prints(small_map, template, fast):
    args = fill(template, small_map)
    assert (fastpath.parse(args) is not None) == fast
    assert_same(args)


def test_the_sample_shows_real_output(small_map):
    """The comparison above is not between two empty outputs."""
    assert assert_same(["count", "id", small_map["ID"]]).stdout == b"12\n"
    loaded = assert_same(["load", "id", small_map["ID"], small_map["JSONL"]]).stderr
    assert loaded.endswith(b": 12 entries loaded\n")
    table = assert_same(["dump", "pinned", small_map["PIN"], "-o", "table"]).stdout
    assert table.count(b"flow") == 12


@st.composite
def real_lines(draw):
    """``count`` / ``dump`` / ``list`` of the test's maps with options drawn in any order."""
    name = draw(st.sampled_from(["count", "dump", "list"]))
    args = [name]
    if name != "list":
        args += draw(st.sampled_from([["id", "ID"], ["--pinned", "PIN"], ["name", "NAME"],
                                      ["--map-id", "PCPU"], []]))
    options = {"count": [["--batch-size", "2"], ["--batch-size=0"], ["-q"]],
               "dump": [["-o", "table"], ["-ojsonl"], ["--output=csv"], ["--limit", "3"],
                        ["--decode", "a=hex"], ["--sum"], ["--batch-size", "5"], ["-q"]],
               "list": [["--match", "NAME"], ["-o", "json"], ["-f"], ["--type=hash"]]}[name]
    for option in draw(st.lists(st.sampled_from(options), max_size=3)):
        args += option
    return args if name != "list" else [*args, "--match", "NAME"]


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(real_lines())
def test_drawn_command_lines_print_what_typer_prints(small_map, template):
    args = fill(template, small_map)
    assert fastpath.parse(args) is not None
    assert_same(args)
