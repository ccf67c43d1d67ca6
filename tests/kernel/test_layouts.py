"""Hundreds of random C layouts (``tools/layoutgen.py``, a fixed seed), compiled by clang into
one object of BTF-typed maps, filled with random bytes, against the installed bpftool:

- ``-o bpftool-json`` byte for byte what ``bpftool -j map dump`` prints;
- ``-o json`` equal to bpftool's ``formatted`` member where bpftool prints valid JSON, read
  with the value rule where bpftool deviates from it (an unsigned enum is read back
  unsigned, an anonymous member's fields belong to the record that holds it);
- a ``-o json`` dump loaded back into the emptied map dumps the same records again.

``python -m tools.layoutgen`` runs more rounds of the first comparison (the long mode).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from bpfbatch.map import whole
from bpfbatch.records import columns
from bpfbatch.records.decoding import view
from bpfbatch.formats.read import read_records
from bpfbatch.btf import INT_BOOL, MODIFIERS, Btf, Kind
from tools import layoutgen

pytestmark = pytest.mark.skipif(not (shutil.which("bpftool") and shutil.which(layoutgen.CLANG)),
                                reason="needs bpftool and clang")

SEED = 20261130
COUNT = 300


class Layouts:
    """The compiled object, its filled maps and bpftool's dump of each."""

    def __init__(self, obj, names, dumps):
        self.obj = obj
        self.maps = {name: obj.map(name) for name in names}
        self.dumps = dict(zip(names, dumps))
        self.kernel_btf = layoutgen.kernel_btf(list(self.maps.values()))  # read once, not 300×

    def render(self, name: str, fmt: str) -> bytes:
        return layoutgen.render(self.maps[name], fmt, self.kernel_btf)

    def traits(self, name: str) -> set[str]:
        info = self.maps[name].info
        found: set[str] = set()
        for type_id in (info.btf_key_type_id, info.btf_value_type_id):
            _traits(self.obj.btf, type_id, found, set())
        return found

    def having(self, *wanted: str, without: tuple[str, ...] = ()) -> list[str]:
        return [name for name in self.maps
                if set(wanted) <= self.traits(name) and not set(without) & self.traits(name)]


def _traits(btf: Btf, type_id: int, found: set[str], seen: set[int]) -> None:
    """What of the value rule a type exercises: ``bool`` (a non-bitfield _Bool), ``anonymous``
    members, ``unsigned-enum`` (a non-bitfield enum without BTF's signed flag), ``float``,
    ``union``."""
    t = btf[type_id]
    while t.kind in MODIFIERS or t.kind == Kind.TYPEDEF:
        t = btf[t.type]
    if t.id in seen:
        return
    seen.add(t.id)
    if t.kind == Kind.INT and t.encoding & INT_BOOL:
        found.add("bool")
    elif t.kind in (Kind.ENUM, Kind.ENUM64) and not t.kind_flag:
        found.add("unsigned-enum")
    elif t.kind == Kind.FLOAT:
        found.add("float")
    elif t.kind == Kind.ARRAY:
        _traits(btf, t.type, found, seen)
    elif t.kind in (Kind.STRUCT, Kind.UNION):
        if t.kind == Kind.UNION:
            found.add("union")
        for m in t.members:
            if not m.name:
                found.add("anonymous")
            if not m.bitfield_size:
                _traits(btf, m.type, found, set(seen))


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    source = layoutgen.generate(SEED, COUNT)
    with layoutgen.build(source, tmp_path_factory.mktemp("layouts")) as obj:
        names = layoutgen.map_names(obj)
        rng = random.Random(SEED)
        for name in names:
            layoutgen.fill(obj.map(name), obj.btf, rng)
        yield Layouts(obj, names, layoutgen.bpftool_dumps([obj.map(n) for n in names]))


def test_the_generator_covers_the_edges(layouts):
    """Enough layouts of each kind for the comparisons below to mean something."""
    assert len(layouts.maps) == COUNT
    for trait in ("bool", "anonymous", "unsigned-enum", "float", "union"):
        assert len(layouts.having(trait)) >= 30, trait
    assert len(layouts.having(without=("bool",))) >= 100
    types = {m.info.type_name for m in layouts.maps.values()}
    assert types == {"hash", "array", "percpu_hash", "percpu_array", "lru_hash"}
    assert any(m.info.btf_key_type_id and m.info.key_size != 4 for m in layouts.maps.values())
    texts = b"".join(layouts.dumps.values())
    assert b'"formatted"' in texts and b"(unsupported-kind" in texts


def _mismatches(layouts, names) -> list[str]:
    return [name for name in names
            if layouts.render(name, "bpftool-json") != layouts.dumps[name]]


def test_bpftool_json_is_byte_identical(layouts):
    names = layouts.having(without=("bool",))
    assert _mismatches(layouts, names) == []


def test_bpftool_json_is_byte_identical_with_bools(layouts):
    assert _mismatches(layouts, layouts.having("bool")) == []


# The comparisons read 4-entry batches, which are small enough to be read without numpy
# (records.columns.ByteRows); a large batch is read with numpy: both against bpftool, and
# every text format alike.

def test_bpftool_json_is_byte_identical_when_read_with_numpy(layouts, monkeypatch):
    monkeypatch.setattr(columns, "SMALL_BATCH_BYTES", -1)
    assert _mismatches(layouts, list(layouts.maps)) == []


@pytest.mark.parametrize("fmt", ["json", "jsonl", "csv", "table"])
def test_every_format_is_the_same_read_with_or_without_numpy(layouts, monkeypatch, fmt):
    without = {name: layouts.render(name, fmt) for name in layouts.maps}
    monkeypatch.setattr(columns, "SMALL_BATCH_BYTES", -1)
    assert [name for name in layouts.maps if layouts.render(name, fmt) != without[name]] == []


# -- typed JSON against bpftool's formatted member ------------------------------------------

def _expected(layouts, name) -> list:
    m = layouts.maps[name]
    return layoutgen.formatted_as_value_rule(layouts.dumps[name], layouts.obj.btf, m.info)


def _typed_mismatches(layouts, names) -> list[str]:
    return [name for name in names if [layoutgen.bpftool_spelling(e) for e in json.loads(
        layouts.render(name, "json"))] != _expected(layouts, name)]


def test_typed_json_equals_bpftools_formatted(layouts):
    names = layouts.having(without=("float", "unsigned-enum", "anonymous"))
    assert len(names) >= 30
    assert _typed_mismatches(layouts, names) == []


def test_typed_json_follows_the_value_rule(layouts):
    assert _typed_mismatches(layouts, layouts.having(without=("float",))) == []


# -- round trip ----------------------------------------------------------------------------

def _records(text: bytes) -> list[str]:
    """A hash map's order is its buckets' (a reload reverses each bucket): compare sorted."""
    return sorted(json.dumps(record) for record in json.loads(text))


def _round_trip_mismatches(layouts, names, tmp_path: Path) -> list[str]:
    bad = []
    for name in names:
        m = layouts.maps[name]
        before = layouts.render(name, "json")
        dump = tmp_path / f"{name}.json"
        dump.write_bytes(before)
        records = read_records(str(dump), m.info, fmt="json",
                               codecs=view(m.info, btf=layouts.kernel_btf))
        whole.clear(m)
        whole.load(m, records.keys, records.values, records.count)
        if _records(layouts.render(name, "json")) != _records(before):
            bad.append(name)
    return bad


def test_json_dump_loads_back_exactly(layouts, tmp_path):
    names = layouts.having(without=("anonymous", "union"))
    assert len(names) >= 60
    assert _round_trip_mismatches(layouts, names, tmp_path) == []


def test_json_dump_loads_back_exactly_with_anonymous_members(layouts, tmp_path):
    assert _round_trip_mismatches(layouts, layouts.having("anonymous"), tmp_path) == []


def test_json_dump_loads_back_exactly_with_unions(layouts, tmp_path):
    names = layouts.having("union", without=("anonymous",))
    assert _round_trip_mismatches(layouts, names, tmp_path) == []
