"""The exporter's ``[inventory]`` table against bpftool: entries from ``map dump``,
max_entries and memlock from ``map show``, for the maps this test creates only (the node's
other maps come and go)."""

from __future__ import annotations

import json
import os
import struct
import subprocess

import pytest
from test_export import exporter_for, scrape

from bpfbatch._sys.abi import MapType
from bpfbatch.export.config import ConfigError
from bpfbatch.map.handle import Map

PREFIX = f"bb_xinv{os.getpid():x}"


@pytest.fixture
def maps():
    made = [Map.create(MapType.HASH, 4, 8, 32, name=f"{PREFIX}_h"),
            Map.create(MapType.LRU_HASH, 4, 8, 64, name=f"{PREFIX}_l"),
            Map.create(MapType.ARRAY, 4, 8, 8, name=f"{PREFIX}_a"),
            Map.create(MapType.RINGBUF, 0, 0, 4096, name=f"{PREFIX}_r")]
    for m, n in zip(made[:2], (5, 200)):
        for i in range(n):
            m.update(struct.pack("I", i), bytes(8))
    yield made
    for m in made:
        m.close()


def bpftool(*args: str):
    return json.loads(subprocess.run(["bpftool", "-j", *args], capture_output=True, text=True,
                                     check=True).stdout)


def labels(m: Map) -> tuple:
    return (("id", str(m.info.id)), ("name", m.info.name), ("type", m.info.type_name))


def test_inventory_series_agree_with_bpftool(maps):
    got = scrape(exporter_for(f'[inventory]\nmatch = "{PREFIX}*"\n'))
    assert set(got["bpf_map_max_entries"]) == {labels(m) for m in maps}
    for m in maps:
        shown = bpftool("map", "show", "id", str(m.info.id))
        assert got["bpf_map_max_entries"][labels(m)] == shown["max_entries"]
        assert got["bpf_map_memlock_bytes"][labels(m)] == shown["bytes_memlock"]
        if m.info.type == MapType.RINGBUF:
            assert labels(m) not in got["bpf_map_entries"]
        else:
            dumped = len(bpftool("map", "dump", "id", str(m.info.id)))
            assert got["bpf_map_entries"][labels(m)] == dumped
    assert got["bpfbatch_export_inventory_uncounted"][()] == 1
    assert got["bpfbatch_export_inventory_seconds"][()] > 0


def test_a_spent_budget_leaves_the_walks_out(maps):
    got = scrape(exporter_for(f'[inventory]\nmatch = "{PREFIX}*"\nbudget = "1ns"\n'))
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
