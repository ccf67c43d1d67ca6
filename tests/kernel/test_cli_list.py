"""``list`` filters and formats, checked against ``bpftool -f map show``."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess

import pytest
from test_cli_maps import bpfbatch

from bpfbatch import Map
from bpfbatch._sys.abi import MapType

PREFIX = f"bb_ls{os.getpid():x}"


@pytest.fixture
def two_maps():
    a = Map.create(MapType.HASH, 4, 8, 16, name=f"{PREFIX}_h")
    b = Map.create(MapType.ARRAY, 4, 8, 16, name=f"{PREFIX}_a")
    path = f"/sys/fs/bpf/{PREFIX}_pin"
    b.pin(path)
    yield a, b, path
    os.unlink(path)
    a.close()
    b.close()


def listed(*args: str) -> list[dict]:
    return json.loads(bpfbatch("list", "-o", "json", *args, check=True).stdout)


def test_filters(two_maps):
    a, b, path = two_maps
    assert {r["id"] for r in listed("--match", f"{PREFIX}_*")} == {a.info.id, b.info.id}
    assert [r["id"] for r in listed("--match", f"{PREFIX}_*", "--type", "array")] == [b.info.id]
    pinned = listed("--pinned-only", "--match", f"{PREFIX}_*")
    assert [(r["id"], r["pinned"]) for r in pinned] == [(b.info.id, [path])]
    theirs = json.loads(subprocess.run(["bpftool", "-j", "-f", "map", "show", "id",
                                        str(b.info.id)], capture_output=True, text=True,
                                       check=True).stdout)
    assert theirs["pinned"] == pinned[0]["pinned"]


def test_every_format_lists_the_same_maps(two_maps):
    a, b, _ = two_maps
    want = listed("-f", "--match", f"{PREFIX}_*")
    lines = bpfbatch("list", "-f", "--match", f"{PREFIX}_*", "-o", "jsonl", check=True).stdout
    assert [json.loads(line) for line in lines.splitlines()] == want
    text = bpfbatch("list", "-f", "--match", f"{PREFIX}_*", "-o", "csv", check=True).stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [int(r["id"]) for r in rows] == [r["id"] for r in want]
    assert [r["pinned"] for r in rows] == [" ".join(r["pinned"]) for r in want]
    table = bpfbatch("list", "--match", f"{PREFIX}_*", check=True).stdout.splitlines()
    assert len(table) == 4 and table[0].split()[:3] == ["id", "type", "name"]
    assert bpfbatch("list", "-o", "yaml").returncode == 2
