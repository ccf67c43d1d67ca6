"""``bpfbatch list / count`` end to end, as a user runs them, and every MAP error path."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bpfbatch import Map
import bpfbatch as bpfbatch_pkg
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.map import writes


def bpfbatch(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "bpfbatch", *args], capture_output=True, text=True)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode != 0
    assert proc.stderr.startswith("bpfbatch: error: "), proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr  # no traceback
    for fragment in fragments:
        assert fragment in proc.stderr


# Unique per process: map names are global, and another test run may be going on.
NAME = f"bb_cnt_{os.getpid():x}"


@pytest.fixture
def filled():
    m = Map.create(MapType.HASH, 4, 8, 4096, name=NAME)
    keys = np.arange(1234, dtype=np.uint32)
    writes.update(m, keys, np.zeros(1234, np.uint64), 1234)
    yield m
    m.close()


def test_list_json_matches_bpftool_map_show(filled):
    ours = {r["id"]: r for r in json.loads(bpfbatch("list", "-o", "json", check=True).stdout)}
    theirs = json.loads(subprocess.run(["bpftool", "-j", "map", "show", "id", str(filled.info.id)],
                                       capture_output=True, text=True, check=True).stdout)
    mine = ours[filled.info.id]
    for field in ("id", "type", "name", "flags", "bytes_key", "bytes_value", "max_entries",
                  "bytes_memlock", "frozen"):
        assert mine[field] == theirs[field], field
    assert NAME in bpfbatch("list", check=True).stdout


def test_count_by_id_name_and_pin(filled, tmp_path):
    assert bpfbatch("count", "--map-id", str(filled.info.id), check=True).stdout == "1234\n"
    assert bpfbatch("count", "--name", NAME, check=True).stdout == "1234\n"
    pin = f"/sys/fs/bpf/bb_cli_{os.getpid()}"
    filled.pin(pin)
    try:
        assert bpfbatch("count", "--pinned", pin, "--batch-size", "7", check=True).stdout == "1234\n"
    finally:
        os.unlink(pin)


def test_error_missing_map_id():
    assert_one_line_error(bpfbatch("count", "--map-id", "4000000000"), "map id 4000000000",
                          "no such map", "(ENOENT)")


def test_error_pinned_path_absent_or_not_on_bpffs(tmp_path):
    assert_one_line_error(bpfbatch("count", "--pinned", str(tmp_path / "nope")), "nope", "(ENOENT)")
    regular = tmp_path / "file"
    regular.write_text("x")
    assert_one_line_error(bpfbatch("count", "--pinned", str(regular)), str(regular), "bpffs")


def test_error_ambiguous_name_lists_ids():
    twice = f"bb_two_{os.getpid():x}"
    a = Map.create(MapType.HASH, 4, 4, 8, name=twice)
    b = Map.create(MapType.HASH, 4, 4, 8, name=twice)
    try:
        assert_one_line_error(bpfbatch("count", "--name", twice), "several maps",
                              str(a.info.id), str(b.info.id))
    finally:
        a.close()
        b.close()


def test_error_name_is_exact_not_prefix(filled):
    assert_one_line_error(bpfbatch("count", "--name", NAME[:-1]), "no map with this exact name")


def test_error_unknown_name_lists_the_similar_ones(filled):
    """``--name flows`` for the demo's ``bb_demo_flows``: the error names the candidates, the
    ones a part of the name matches and the near spellings, with their ids."""
    label = f"{NAME} (id {filled.info.id})"
    for near in (NAME[3:], NAME[:-1].upper(), NAME[:6] + "x" + NAME[7:], NAME + "_more_chars"):
        assert_one_line_error(bpfbatch("count", "--name", near), "maps with a similar name", label)
    assert_one_line_error(bpfbatch("count", "--name", f"zq{os.getpid()}qz"),
                          "bpfbatch list shows every map's name")


def test_error_bad_batch_size_and_no_map_named(filled):
    assert_one_line_error(bpfbatch("count", "--map-id", str(filled.info.id), "--batch-size", "0"),
                          "--batch-size")
    assert_one_line_error(bpfbatch("count"), "exactly one of")
    assert_one_line_error(bpfbatch("count", "--map-id", "1", "--name", "x"), "exactly one of")


def test_error_without_privileges(filled):
    # Root without capabilities (so files stay readable wherever the checkout is): the
    # kernel refuses to open the map.
    proc = subprocess.run(["setpriv", "--bounding-set=-all", "--inh-caps=-all",
                           sys.executable, "-m", "bpfbatch", "count", "--map-id",
                           str(filled.info.id)], capture_output=True, text=True)
    assert_one_line_error(proc, f"map id {filled.info.id}")
    assert "(EPERM)" in proc.stderr or "(EACCES)" in proc.stderr


def test_dump_bpftool_json_is_byte_identical_to_bpftool_end_to_end(filled):
    ours = bpfbatch("dump", "--map-id", str(filled.info.id), "-o", "bpftool-json",
                    "--batch-size", "100", check=True).stdout
    theirs = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(filled.info.id)],
                            capture_output=True, text=True, check=True).stdout
    assert ours == theirs


def test_dump_limit_and_typed_json(filled):
    records = json.loads(bpfbatch("dump", "--map-id", str(filled.info.id), "-o", "json",
                                  "--limit", "10", "--batch-size", "3", check=True).stdout)
    assert len(records) == 10
    keys = [bytes(int(b, 16) for b in r["key"]) for r in records]  # no BTF: raw bytes
    assert len(set(keys)) == 10
    lines = bpfbatch("dump", "--map-id", str(filled.info.id), "-o", "jsonl", check=True).stdout
    assert len(lines.splitlines()) == 1234


def test_dump_errors_name_the_option_or_the_map(filled):
    mid = str(filled.info.id)
    assert_one_line_error(bpfbatch("dump", "--map-id", mid, "-o", "yaml"), "--output", "yaml")
    assert_one_line_error(bpfbatch("dump", "--map-id", mid, "--limit", "-1"), "--limit")
    assert_one_line_error(bpfbatch("dump", "--map-id", mid, "--batch-size", "-5"), "--batch-size")
    queue = Map.create(MapType.QUEUE, 0, 4, 4, name="bb_cli_queue")
    try:
        assert_one_line_error(bpfbatch("dump", "--map-id", str(queue.info.id)),
                              f"map {queue.info.id}", "queue maps: elements can only be "
                              "popped: drain takes them in pop order")
    finally:
        queue.close()


def test_error_pinned_program_is_not_a_map(tmp_path):
    pins = f"/sys/fs/bpf/bb_prog_{os.getpid()}"
    obj = os.path.join(os.path.dirname(bpfbatch_pkg.__file__), "progs", "slabratetop.bpf.o")
    subprocess.run(["bpftool", "prog", "loadall", obj, pins], check=True, capture_output=True)
    try:
        program = os.path.join(pins, sorted(os.listdir(pins))[0])
        assert_one_line_error(bpfbatch("count", "--pinned", program), program, "not a BPF map")
    finally:
        subprocess.run(["rm", "-rf", pins], check=True)


def test_error_output_failure_is_one_line(filled):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "bpfbatch", "dump", "--map-id",
                               str(filled.info.id)], stdout=full, stderr=subprocess.PIPE, text=True)
    assert_one_line_error(proc, "(ENOSPC)")


# -- start-up: what a quick command imports (its time is measured in tools/bench/startup.py) --

#: Run a command as the console script does and print the heavy packages it imported.
_IMPORTS = """
import sys
from bpfbatch.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    assert not exc.code, exc.code
print(" ".join(m for m in ("numpy", "pydantic", "rich", "tabulate", "typer") if m in sys.modules),
      file=sys.stderr)
"""


def heavy_imports(*args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", _IMPORTS, *args], capture_output=True,
                          text=True, check=True)
    found = set(proc.stderr.split())
    assert "pydantic" not in found, "typer >= 0.29 imports pydantic: install the typer " \
        "that pyproject.toml pins (pip install -e .)"
    return found


@pytest.fixture
def small_btf_map():
    with BtfBuilder() as b:
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        value = b.struct("val", [("a", u64), ("b", b.array(b.integer("char", 1), 8))])
        m = Map.create(MapType.HASH, 4, 16, 257, name=f"bb_start_{os.getpid():x}",
                       btf_fd=b.load(), btf_key_type_id=u32, btf_value_type_id=value)
    for i in range(257):
        m.update(i.to_bytes(4, "little"), i.to_bytes(8, "little") + b"name\0\0\0\0")
    yield m
    m.close()


def test_quick_commands_on_a_small_map_import_nothing_heavy(small_btf_map):
    mid = str(small_btf_map.info.id)
    assert heavy_imports("count", "id", mid) == set()
    assert heavy_imports("list") == set()
    assert heavy_imports("list", "-o", "json") == set()
    for fmt in ("json", "jsonl", "csv", "bpftool-json"):
        assert heavy_imports("dump", "id", mid, "-o", fmt) == set(), fmt
    assert heavy_imports("dump", "id", mid, "-o", "table") == set()


def test_a_large_batch_is_read_with_numpy_and_prints_the_same(small_btf_map):
    """257 entries in one batch are under the small-batch size; in batches of 2 they are read
    the same way; the output is the same whichever way, and bpftool agrees on the keys."""
    mid = str(small_btf_map.info.id)
    whole = bpfbatch("dump", "id", mid, "-o", "jsonl", check=True).stdout
    code = ("import sys; from bpfbatch.records import columns; columns.SMALL_BATCH_BYTES = -1;"
            "from bpfbatch.cli import main; main(sys.argv[1:])")
    with_numpy = subprocess.run([sys.executable, "-c", code, "dump", "id", mid, "-o", "jsonl"],
                                capture_output=True, text=True, check=True).stdout
    assert with_numpy == whole
    records = [json.loads(line) for line in whole.splitlines()]
    assert sorted(r["key"] for r in records) == list(range(257))
    assert all(r["value"] == {"a": r["key"], "b": "name"} for r in records)
    theirs = json.loads(subprocess.run(["bpftool", "-j", "map", "dump", "id", mid],
                                       capture_output=True, text=True, check=True).stdout)
    assert sorted(e["formatted"]["key"] for e in theirs) == list(range(257))


def test_decoded_fields_of_a_small_batch_print_right():
    """Network-order fields are decoded without asking (``ipv4``, ``be16``); the decoders
    read numpy arrays, so a small batch's rows become one for them (and only for them)."""
    with BtfBuilder() as b:
        u32, u16 = b.integer("u32", 4), b.integer("u16", 2)
        be32, be16 = b.typedef("__be32", u32), b.typedef("__be16", u16)
        key = b.struct("flow", [("saddr", be32), ("sport", be16), ("pad", be16)])
        value = b.integer("u64", 8)
        m = Map.create(MapType.HASH, 8, 8, 16, name=f"bb_startd_{os.getpid():x}",
                       btf_fd=b.load(), btf_key_type_id=key, btf_value_type_id=value)
    with m:
        m.update(bytes([10, 0, 0, 1, 0x1f, 0x90, 0, 0]), (7).to_bytes(8, "little"))
        mid = str(m.info.id)
        assert heavy_imports("count", "id", mid) == set()
        assert heavy_imports("dump", "id", mid, "-o", "jsonl") == {"numpy"}
        out = bpfbatch("dump", "id", mid, "-o", "jsonl", check=True).stdout
        assert json.loads(out) == {"key": {"saddr": "10.0.0.1", "sport": 8080, "pad": 0},
                                   "value": 7}
