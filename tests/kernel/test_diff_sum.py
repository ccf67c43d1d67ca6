"""``diff --sum``: per-CPU maps compared by their sums over the CPUs.

The oracle is bpftool's per-CPU dump of each side, summed here: two maps whose CPUs hold
different values with the same totals must compare the same, a moved total must be reported
with bpftool's totals as old and new, and a file of sums or of per-CPU values, in every format,
must read back to its map's sums. The refusals are one line each, exit 2 (diff's trouble).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_cli_maps import assert_one_line_error, bpfbatch
from test_cli_sum import _percpu

import bpfbatch as api
from bpfbatch._sys.abi import MapType
from bpfbatch._sys.libbpf import num_possible_cpus
from bpfbatch.btf import BtfBuilder

NCPUS = num_possible_cpus()
FIELDS = ("packets", "drops", "pad")


def _slot(packets: int, drops: int) -> bytes:
    return packets.to_bytes(8, "little") + drops.to_bytes(4, "little") + bytes(4)


def _fill(m, per_key: dict[int, list[tuple[int, int]]]) -> None:
    for key, cpus in per_key.items():
        m.update(key.to_bytes(4, "little"), b"".join(_slot(*c) for c in cpus))


def _split(total: int, parts: int, first: bool) -> list[int]:
    """``total`` over ``parts`` CPUs: two thirds on the first CPU (``first``) or the last, the
    rest spread over the others."""
    out = [0] * parts
    main = 0 if first else parts - 1
    out[main] = total - total // 3
    for unit in range(total // 3):
        out[(main + 1 + unit % max(parts - 1, 1)) % parts] += 1
    return out


def bpftool_totals(m) -> dict[int, dict[str, int]]:
    """Each key's fields summed over the CPUs, from bpftool's own per-CPU dump."""
    dumped = json.loads(subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m.info.id)],
                                       capture_output=True, text=True, check=True).stdout)
    return {e["formatted"]["key"]: {f: sum(c["value"][f] for c in e["formatted"]["values"])
                                    for f in FIELDS} for e in dumped}


@pytest.fixture
def pair():
    """Two per-CPU maps: keys 0-9 with equal totals spread over the CPUs differently, key 10
    whose packets total differs by 5, key 11 only in A, key 12 only in B."""
    a = _percpu(f"bb_dsa_{os.getpid():x}", with_enum=False)
    b = _percpu(f"bb_dsb_{os.getpid():x}", with_enum=False)
    try:
        for m, first, extra, only in ((a, True, 0, 11), (b, False, 5, 12)):
            per_key = {}
            for key in range(11):
                packets = _split(1000 + 37 * key + (extra if key == 10 else 0), NCPUS, first)
                drops = _split(40 + key, NCPUS, not first)
                per_key[key] = list(zip(packets, drops))
            per_key[only] = [(only, 1)] * NCPUS
            _fill(m, per_key)
        yield a, b
    finally:
        a.close()
        b.close()


def run(*args: str) -> subprocess.CompletedProcess:
    return bpfbatch("diff", *args, "-o", "jsonl")


def test_equal_totals_spread_differently_are_the_same_and_moved_totals_are_bpftools(pair):
    a, b = pair
    if NCPUS < 2:
        pytest.skip("one possible CPU: no spread to differ by")
    plain = run("id", str(a.info.id), "id", str(b.info.id))
    assert plain.returncode == 1 and len(plain.stdout.splitlines()) == 13  # CPU by CPU: all
    summed = run("id", str(a.info.id), "id", str(b.info.id), "--sum")
    assert summed.returncode == 1, summed.stderr
    changes = [json.loads(line) for line in summed.stdout.splitlines()]
    old, new = bpftool_totals(a), bpftool_totals(b)
    assert [(c["op"], c["key"]) for c in changes] == [("changed", 10), ("removed", 11),
                                                      ("added", 12)]
    assert changes[0]["fields"] == [{"field": "value.packets", "old": old[10]["packets"],
                                     "new": new[10]["packets"]}]
    assert new[10]["packets"] - old[10]["packets"] == 5
    assert changes[1]["value"] == old[11] and changes[2]["value"] == new[12]
    assert "3 changed" not in summed.stderr and "1 changed, 10 same" in summed.stderr
    d = api.diff(a, b, sum_cpus=True)
    assert (d.added, d.removed, d.changed, d.same) == (1, 1, 1, 10)


@pytest.mark.parametrize("fmt, form", [
    *((fmt, form) for fmt in ("jsonl", "json", "csv", "parquet", "arrow")
      for form in ("sums", "per-cpu")),
    ("bpftool-json", "per-cpu")])  # bpftool's own dump: per-CPU values only
def test_a_file_of_sums_or_of_per_cpu_values_reads_back_to_its_maps_sums(pair, tmp_path, fmt,
                                                                           form):
    a, b = pair
    if fmt == "bpftool-json":
        dumped = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(a.info.id)],
                                capture_output=True, check=True).stdout
    else:
        dumped = subprocess.run([sys.executable, "-m", "bpfbatch", "dump", "id", str(a.info.id),
                                 "-o", fmt, *(["--sum"] if form == "sums" else [])],
                                capture_output=True, check=True).stdout
    path = tmp_path / f"a.{'json' if fmt == 'bpftool-json' else fmt}"
    path.write_bytes(dumped)
    same = run(str(path), "id", str(a.info.id), "--sum", "--format", fmt)
    assert same.returncode == 0 and same.stdout == "", same.stderr
    against_b = run(str(path), "id", str(b.info.id), "--sum", "--format", fmt)
    assert [json.loads(line)["op"] for line in against_b.stdout.splitlines()] == \
        ["changed", "removed", "added"], against_b.stderr


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet"])
def test_per_cpu_values_through_a_pipe_are_summed_as_from_a_file(pair, fmt):
    """A pipe cannot be read twice: stdin and a process substitution are kept in memory, so
    a plain (per-CPU) dump piped in compares as the file would."""
    a, b = pair
    bpfbatch_ = f"{sys.executable} -m bpfbatch"
    dump = f"{bpfbatch_} dump id {a.info.id} -o {fmt}"
    for shell in (f"{dump} | {bpfbatch_} diff - id {{}} --sum --format {fmt} -o jsonl",
                  f"{bpfbatch_} diff <({dump}) id {{}} --sum --format {fmt} -o jsonl"):
        same = subprocess.run(["bash", "-c", shell.format(a.info.id)], capture_output=True,
                              text=True)
        assert same.returncode == 0 and same.stdout == "", same.stderr
        other = subprocess.run(["bash", "-c", shell.format(b.info.id)], capture_output=True,
                               text=True)
        assert [json.loads(line)["op"] for line in other.stdout.splitlines()] == \
            ["changed", "removed", "added"], other.stderr


def test_a_sum_past_64_bits_is_refused_naming_the_key(pair):
    a, b = pair
    _fill(a, {3: [(2**64 - 1, 0)] * max(NCPUS, 2)} if NCPUS > 1 else {})
    if NCPUS < 2:
        pytest.skip("one possible CPU: no sum passes 64 bits")
    assert_one_line_error(run("id", str(a.info.id), "id", str(b.info.id), "--sum"),
                          "key 3", "value.packets", "does not fit u64")


def test_what_cannot_be_summed_is_refused_in_one_line(pair, maps, tmp_path):
    a, _ = pair
    summed = tmp_path / "a.jsonl"
    summed.write_text(bpfbatch("dump", "id", str(a.info.id), "--sum", "-o", "jsonl",
                               check=True).stdout)
    refused = run("id", str(a.info.id), "--against", str(summed), "--sum")
    assert refused.returncode == 2
    assert_one_line_error(refused, "--sum", "a sum is not loaded")
    plain = maps(MapType.HASH, 4, 8, 4, name=f"bb_dsp_{os.getpid():x}")
    assert_one_line_error(run("id", str(plain.info.id), "id", str(plain.info.id), "--sum"),
                          "--sum", "not per-CPU")
    enum = _percpu(f"bb_dse_{os.getpid():x}", with_enum=True)
    try:
        assert_one_line_error(run("id", str(enum.info.id), "id", str(enum.info.id), "--sum"),
                              "field 'value.kind' (enum) cannot be summed")
    finally:
        enum.close()


def test_a_per_cpu_file_is_read_with_the_views_decoders(maps, tmp_path):
    """The per-CPU re-read takes ``--decode`` as the first read does: a ``__be16`` dumped
    as stored (``--decode none``) compares the same against its map."""
    with BtfBuilder() as b:
        u16, u32 = b.integer("u16", 2), b.integer("u32", 4)
        value = b.struct("ctr", [("port", b.typedef("__be16", u16)), ("pad", u16),
                                 ("packets", u32)])
        m = maps(MapType.PERCPU_HASH, 4, 8, 8, btf_fd=b.load(), btf_key_type_id=u32,
                 btf_value_type_id=value)
    m.update((1).to_bytes(4, "little"), b"".join(
        (443).to_bytes(2, "big") + bytes(2) + (c + 1).to_bytes(4, "little") for c in range(NCPUS)))
    stored = tmp_path / "stored.jsonl"
    stored.write_text(bpfbatch("dump", "id", str(m.info.id), "-o", "jsonl", "--decode", "none",
                               check=True).stdout)
    same = run(str(stored), "id", str(m.info.id), "--sum", "--decode", "none")
    assert same.returncode == 0 and same.stdout == "", same.stdout + same.stderr
    refused = run(str(stored), "id", str(m.info.id), "--sum")  # the port is decoded: no sum
    assert_one_line_error(refused, "--sum", "cannot be summed")


def test_a_refusal_names_side_a_first_whatever_its_kind(pair, tmp_path):
    a, b = pair
    _fill(a, {3: [(2**64 - 1, 0)] * max(NCPUS, 2)})
    if NCPUS < 2:
        pytest.skip("one possible CPU: no sum passes 64 bits")
    per_cpu = tmp_path / "a.jsonl"
    per_cpu.write_text(bpfbatch("dump", "id", str(a.info.id), "-o", "jsonl", check=True).stdout)
    _fill(b, {3: [(2**64 - 1, 0)] * max(NCPUS, 2)})
    for first, second, named in (([str(per_cpu)], ["id", str(b.info.id)], str(per_cpu)),
                                 (["id", str(b.info.id)], [str(per_cpu)], b.info.label)):
        refused = run(*first, *second, "--sum")
        assert_one_line_error(refused, "does not fit u64")
        assert refused.stderr.startswith(f"bpfbatch: error: {named}"), refused.stderr
