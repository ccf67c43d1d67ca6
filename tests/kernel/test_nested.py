"""Maps of maps: ``dump --recursive``, ``count --recursive``, ``list --count``'s inner ids and
``Map.inner``, checked against bpftool's dumps of the outer and of each inner map."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import struct
import subprocess
import sys

import pytest
from test_cli_maps import assert_one_line_error, bpfbatch
from test_inventory import holds_map

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.errors import InputError, NotFoundError
from bpfbatch.formats import nested
from fault_helpers import communicate

PREFIX = f"bb_mim{os.getpid():x}"


def bpftool_dump(map_id: int) -> str:
    return subprocess.run(["bpftool", "-j", "map", "dump", "id", str(map_id)],
                          capture_output=True, text=True, check=True).stdout


def typed_maps(kind: MapType, n: int, max_entries: int) -> list[Map]:
    """``n`` BTF-typed ``u32 → u64`` maps of ``kind``, map ``i`` holding ``i + 1`` elements."""
    with BtfBuilder() as b:
        u32, u64 = b.integer("__u32", 4), b.integer("__u64", 8)
        btf = b.load()
        maps = [Map.create(kind, 4, 8, max_entries, name=f"{PREFIX}_i{kind.value}_{i}",
                           btf_fd=btf, btf_key_type_id=u32, btf_value_type_id=u64)
                for i in range(n)]
    for i, m in enumerate(maps):
        for k in range(i + 1):
            m.update(struct.pack("I", k), struct.pack("Q", 1000 * i + k + 1))
    return maps


def map_of_maps(kind: MapType, inner_kind: MapType, keys: tuple[int, ...], max_entries: int):
    """A map of maps of ``kind`` holding, at ``keys``, typed maps of ``inner_kind``
    (:func:`typed_maps`); yields it and the inner maps, closes them after."""
    inner = typed_maps(inner_kind, len(keys), 16)
    outer = Map.create(kind, 4, 4, max_entries, name=f"{PREFIX}_o{kind.value}",
                       inner_map_fd=inner[0].fd)
    for key, m in zip(keys, inner):
        outer.update(struct.pack("I", key), struct.pack("I", m.fd))
    yield outer, inner
    for m in (outer, *inner):
        m.close()


@pytest.fixture
def array_of_arrays():
    """An array of maps with slots 0, 2 and 3 holding arrays (slot 1 empty)."""
    yield from map_of_maps(MapType.ARRAY_OF_MAPS, MapType.ARRAY, (0, 2, 3), 4)


@pytest.fixture
def hash_of_hashes():
    yield from map_of_maps(MapType.HASH_OF_MAPS, MapType.HASH, (70, 80, 90), 8)


_ENTRY = re.compile(r'\{"key":\[[^\]]*\],"value":\[([^\]]*)\]\}')


def bpftool_nested(outer: Map) -> str:
    """What ``dump --recursive -o bpftool-json`` must print, from bpftool's own dumps: each
    outer entry of ``bpftool -j map dump`` with ``"inner":`` and bpftool's dump of the inner
    map (its newline left out) before the closing brace."""
    def nest(match: re.Match) -> str:
        value = bytes(int(b.strip('"'), 16) for b in match[1].split(","))
        inner = bpftool_dump(nested.inner_id(value)).rstrip("\n")
        return match[0][:-1] + ',"inner":' + inner + "}"
    return _ENTRY.sub(nest, bpftool_dump(outer.info.id))


def recursive(outer: Map, fmt: str) -> str:
    return bpfbatch("dump", "id", str(outer.info.id), "--recursive", "-o", fmt,
                    check=True).stdout


def test_bpftool_json_nests_bpftool_dumps_byte_for_byte(array_of_arrays):
    outer, _ = array_of_arrays
    want = bpftool_nested(outer)
    assert want.count('"inner":') == 3  # the empty slot is skipped, as bpftool skips it
    assert recursive(outer, "bpftool-json") == want


def test_hash_of_hashes_holds_what_bpftool_dumps(hash_of_hashes):
    """A hash's order is its buckets': compare entries by key, inner elements as sets."""
    outer, _ = hash_of_hashes

    def by_key(doc: list) -> dict:
        return {tuple(e["key"]): (e["value"], sorted(map(json.dumps, e["inner"])))
                for e in doc}
    ours = json.loads(recursive(outer, "bpftool-json"))
    assert len(ours) == 3
    assert by_key(ours) == by_key(json.loads(bpftool_nested(outer)))


def test_json_and_jsonl_nest_the_inner_maps_typed_dumps(hash_of_hashes):
    outer, inner = hash_of_hashes
    entries = json.loads(recursive(outer, "json"))
    lines = [json.loads(line) for line in recursive(outer, "jsonl").splitlines()]
    assert lines == entries and len(entries) == 3
    ids = {m.info.id for m in inner}
    for entry in entries:
        assert entry["inner_id"] in ids
        assert entry["value"] == [f"0x{b:02x}" for b in struct.pack("I", entry["inner_id"])]
        alone = json.loads(bpfbatch("dump", "id", str(entry["inner_id"]), "-o", "json",
                                    check=True).stdout)
        assert sorted(map(json.dumps, entry["inner"])) == sorted(map(json.dumps, alone))
        assert all(set(e) == {"key", "value"} and isinstance(e["value"], int)
                   for e in entry["inner"])  # typed from the inner map's BTF


def test_count_recursive_is_what_the_inner_dumps_hold(array_of_arrays, hash_of_hashes):
    for outer, _ in (array_of_arrays, hash_of_hashes):
        doc = json.loads(bpftool_nested(outer))
        want = sum(len(e["inner"]) for e in doc)
        got = bpfbatch("count", "id", str(outer.info.id), "--recursive", check=True).stdout
        assert int(got) == want
    assert int(bpfbatch("count", "id", str(hash_of_hashes[0].info.id),
                        check=True).stdout) == 3


def test_map_inner_opens_the_map_at_a_key(hash_of_hashes, array_of_arrays):
    outer, inner = hash_of_hashes
    for key, m in zip((70, 80, 90), inner):
        with outer.inner(struct.pack("I", key)) as got:
            assert got.info.id == m.info.id and got.count() == m.count()
    with pytest.raises(NotFoundError, match="no map at this key"):
        outer.inner(struct.pack("I", 71))
    with pytest.raises(NotFoundError):
        array_of_arrays[0].inner(struct.pack("I", 1))  # the empty slot
    with pytest.raises(InputError, match="hold no maps"):
        inner[0].inner(struct.pack("I", 0))
    with Map.open_id(outer.info.id, read_only=True) as ro, ro.inner(struct.pack("I", 70)) as m:
        assert m.read_only


def test_list_count_shows_inner_ids(hash_of_hashes):
    outer, inner = hash_of_hashes
    rows = json.loads(bpfbatch("list", "--count", "-o", "json", "--match", outer.info.name,
                               check=True).stdout)
    assert [r["id"] for r in rows] == [outer.info.id]
    assert sorted(rows[0]["inner"]) == sorted(m.info.id for m in inner)
    assert rows[0]["entries"] == 3


def test_an_inner_map_freed_meanwhile_shows_an_error():
    gone = Map.create(MapType.HASH, 4, 8, 4, name=f"{PREFIX}_gone")
    map_id = gone.info.id
    gone.close()  # its last reference: the id is released now
    assert nested._inner_text(map_id, "bpftool-json", None) == (
        b'{"error":"No such file or directory"}')


def test_recursive_refuses_what_it_cannot_do(hash_of_hashes):
    outer, inner = hash_of_hashes
    oid = str(outer.info.id)
    assert_one_line_error(bpfbatch("dump", "id", str(inner[0].info.id), "--recursive"),
                          "--recursive", "not a map of maps")
    assert_one_line_error(bpfbatch("count", "id", str(inner[0].info.id), "--recursive"),
                          "--recursive", "not a map of maps")
    assert_one_line_error(bpfbatch("dump", "id", oid, "--recursive", "-o", "table"),
                          "--output", "json, jsonl, bpftool-json")
    assert_one_line_error(bpfbatch("dump", "id", oid, "--recursive", "--limit", "1"),
                          "--limit")
    assert_one_line_error(bpfbatch("-p", "dump", "id", oid, "--recursive", "-o",
                                   "bpftool-json"), "-p: not with --recursive")


def test_an_empty_map_of_maps_prints_as_dump_does():
    template = Map.create(MapType.HASH, 4, 8, 4, name=f"{PREFIX}_t")
    with template, Map.create(MapType.HASH_OF_MAPS, 4, 4, 4, name=f"{PREFIX}_e",
                              inner_map_fd=template.fd) as outer:
        for fmt in ("json", "jsonl", "bpftool-json"):
            out = io.BytesIO()
            assert nested.dump(outer, fmt, out) == 0
            plain = bpfbatch("dump", "id", str(outer.info.id), "-o", fmt, check=True).stdout
            assert out.getvalue().decode() == plain


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_after_whole_entries(sig, tmp_path):
    """The signal lands while inner map 1 is read (the command holds it open): entry 0 was
    printed whole, and the one line says so. The output goes to a file: a pipe nobody reads
    yet would stop the command at entry 0."""
    inner = [Map.create(MapType.ARRAY, 4, 8, 1 << 19, name=f"{PREFIX}_big{i}")
             for i in range(3)]
    outer = Map.create(MapType.ARRAY_OF_MAPS, 4, 4, 3, name=f"{PREFIX}_sig",
                       inner_map_fd=inner[0].fd)
    try:
        for slot, m in enumerate(inner):
            outer.update(struct.pack("I", slot), struct.pack("I", m.fd))
        with open(tmp_path / "out", "w") as sink:
            proc = subprocess.Popen([sys.executable, "-m", "bpfbatch", "dump", "id",
                                     str(outer.info.id), "--recursive", "-o", "jsonl"],
                                    stdout=sink, stderr=subprocess.PIPE, text=True)
            while not holds_map(proc.pid, inner[1].info.id) and proc.poll() is None:
                pass
            proc.send_signal(sig)
            _, err = communicate(proc, 120)
        out = (tmp_path / "out").read_text()
    finally:
        for m in (outer, *inner):
            m.close()
    assert proc.returncode == 128 + sig
    assert err == (f"bpfbatch: interrupted ({signal.Signals(sig).name}) after 1 outer "
                   "entries printed\n")
    [line] = out.splitlines()
    assert len(json.loads(line)["inner"]) == 1 << 19
