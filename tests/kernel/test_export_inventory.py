"""The exporter's ``[inventory]`` table against bpftool: entries from ``map dump``,
max_entries and memlock from ``map show``, the ``pinned`` label from ``map show -f``, the
``programs`` label from ``prog show``, for the maps this test creates only (the node's other
maps come and go)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess

import pytest
from test_cli_maps import bpfbatch
from test_export import exporter_for, scrape

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.export.config import ConfigError

PREFIX = f"bb_xinv{os.getpid():x}"
PINS = f"/sys/fs/bpf/{PREFIX}"


@pytest.fixture
def maps():
    """Four maps; the hash is pinned twice (a folder of this process's own on bpffs)."""
    made = [Map.create(MapType.HASH, 4, 8, 32, name=f"{PREFIX}_h"),
            Map.create(MapType.LRU_HASH, 4, 8, 64, name=f"{PREFIX}_l"),
            Map.create(MapType.ARRAY, 4, 8, 8, name=f"{PREFIX}_a"),
            Map.create(MapType.RINGBUF, 0, 0, 4096, name=f"{PREFIX}_r")]
    for m, n in zip(made[:2], (5, 200)):
        for i in range(n):
            m.update(struct.pack("I", i), bytes(8))
    os.makedirs(f"{PINS}/sub", exist_ok=True)
    made[0].pin(f"{PINS}/sub/h")
    made[0].pin(f"{PINS}/h")
    try:
        yield made
    finally:
        shutil.rmtree(PINS)
        for m in made:
            m.close()


def bpftool(*args: str):
    return json.loads(subprocess.run(["bpftool", "-j", *args], capture_output=True, text=True,
                                     check=True).stdout)


def labels(m: Map, pinned: str = "", programs: str = "") -> tuple:
    return (("id", str(m.info.id)), ("name", m.info.name), ("pinned", pinned),
            ("programs", programs), ("type", m.info.type_name))


def pinned(m: Map) -> str:
    """``bpftool map show -f``'s pins of ``m``, as the label joins them."""
    return ",".join(sorted(bpftool("-f", "map", "show", "id", str(m.info.id)).get("pinned", [])))


def test_inventory_series_agree_with_bpftool(maps):
    got = scrape(exporter_for(f'[inventory]\nmatch = "{PREFIX}*"\nbudget = "60s"\n'))
    assert pinned(maps[0]) == f"{PINS}/h,{PINS}/sub/h"
    labels_of = {m.info.id: labels(m, pinned(m)) for m in maps}
    assert set(got["bpf_map_max_entries"]) == set(labels_of.values())
    for m in maps:
        shown, key = bpftool("map", "show", "id", str(m.info.id)), labels_of[m.info.id]
        assert got["bpf_map_max_entries"][key] == shown["max_entries"]
        assert got["bpf_map_memlock_bytes"][key] == shown["bytes_memlock"]
        if m.info.type == MapType.RINGBUF:
            assert key not in got["bpf_map_entries"]
        else:
            dumped = len(bpftool("map", "dump", "id", str(m.info.id)))
            assert got["bpf_map_entries"][key] == dumped
    assert got["bpfbatch_export_inventory_uncounted"][()] == 1
    assert got["bpfbatch_export_inventory_seconds"][()] > 0


def test_a_spent_budget_leaves_the_walks_out(maps):
    """The budget is spent before the pin walk starts: no map shows a pin, no walk counts."""
    got = scrape(exporter_for(f'[inventory]\nmatch = "{PREFIX}*"\nbudget = "1ns"\n'))
    assert set(got["bpf_map_max_entries"]) == {labels(m) for m in maps}
    assert set(got["bpf_map_entries"]) == {labels(maps[2])}  # the array needs no walk
    assert got["bpfbatch_export_inventory_uncounted"][()] == 3


@pytest.mark.parametrize("table, message", [
    ('budget = "soon"', "inventory.budget: expected a duration"),
    ("budget = 3", "inventory.budget: expected a string"),
    ('every = "1s"', "inventory.every: unknown key"),
])
def test_inventory_table_errors_name_the_key(table, message):
    with pytest.raises(ConfigError, match=message):
        exporter_for(f"[inventory]\n{table}\n")


def test_programs_label_agrees_with_bpftool():
    from bpfbatch.loader import BpfObject

    with BpfObject.package("tcptop") as obj:
        obj.load()
        active = obj.map("active").info
        got = scrape(exporter_for(f'[inventory]\nmatch = "{active.name}"\nbudget = "60s"\n'))
        progs = sorted((p for p in bpftool("prog", "show") if active.id in p.get("map_ids", [])),
                       key=lambda p: p["id"])
        [series] = [dict(key) for key in got["bpf_map_max_entries"]
                    if ("id", str(active.id)) in key]
        assert {"send_btf", "recv_btf"} <= {p["name"] for p in progs}
        assert series["programs"] == ",".join(p["name"] for p in progs)
        assert series["pinned"] == ""


def test_check_prints_a_line_for_the_inventory(maps, tmp_path):
    config = tmp_path / "inventory.toml"
    config.write_text(f'[inventory]\nmatch = "{PREFIX}*"\nbudget = "250ms"\n')
    out = bpfbatch("export", "--config", str(config), "--check", check=True).stdout
    assert out.splitlines()[0] == (
        "[inventory]: bpf_map_entries, bpf_map_max_entries, bpf_map_memlock_bytes for maps "
        f"matching '{PREFIX}*' (4 now), labels id, name, type, pinned, programs; budget "
        "0.25s per scrape")
