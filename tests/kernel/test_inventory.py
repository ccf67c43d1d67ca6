"""``list --count``: entries, fill, memlock and programs of every map, checked against
bpftool (``map show`` for max_entries and memlock, ``map dump`` for the count, ``prog show``
for the programs). Other engineers' maps come and go on the node meanwhile: every test judges
only the maps it created (a per-process name prefix, or their ids)."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import struct
import subprocess
import sys

import pytest
from test_cli_maps import bpfbatch

from bpfbatch._sys.abi import MapType
from bpfbatch.map import inventory
from bpfbatch import Map
from fault_helpers import communicate

PREFIX = f"bb_inv{os.getpid():x}"


def bpftool(*args: str):
    return json.loads(subprocess.run(["bpftool", "-j", *args], capture_output=True, text=True,
                                     check=True).stdout)


def counted(*args: str) -> dict[int, dict]:
    out = bpfbatch("list", "--count", "-o", "json", "--match", f"{PREFIX}*", *args,
                   check=True).stdout
    return {r["id"]: r for r in json.loads(out)}


def fill(m: Map, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        m.update(struct.pack("I", i), bytes(m.info.value_stride))


@pytest.fixture
def maps():
    made = {
        "hash": Map.create(MapType.HASH, 4, 8, 64, name=f"{PREFIX}_h"),
        "lru": Map.create(MapType.LRU_HASH, 4, 8, 256, name=f"{PREFIX}_lru"),
        "percpu": Map.create(MapType.PERCPU_HASH, 4, 8, 32, name=f"{PREFIX}_pc"),
        "array": Map.create(MapType.ARRAY, 4, 16, 10, name=f"{PREFIX}_a"),
        "ring": Map.create(MapType.RINGBUF, 0, 0, 4096, name=f"{PREFIX}_rb"),
    }
    fill(made["hash"], 48)
    fill(made["lru"], 1000)  # 4x max_entries: the LRU evicts
    fill(made["percpu"], 8)
    yield made
    for m in made.values():
        m.close()


def test_counts_memlock_and_fill_agree_with_bpftool(maps):
    rows = counted()
    assert set(rows) == {m.info.id for m in maps.values()}
    for kind, m in maps.items():
        row, shown = rows[m.info.id], bpftool("map", "show", "id", str(m.info.id))
        assert (row["max_entries"], row["bytes_memlock"]) == (shown["max_entries"],
                                                             shown["bytes_memlock"])
        if kind == "ring":
            assert row["entries"] is None and row["fill"] is None
            assert "ringbuf maps" in row["reason"]
            continue
        dumped = len(bpftool("map", "dump", "id", str(m.info.id)))
        assert row["entries"] == dumped and row["reason"] is None
        assert row["fill"] == round(100 * dumped / m.info.max_entries, 2)
    assert rows[maps["hash"].info.id]["entries"] == 48
    assert rows[maps["array"].info.id]["entries"] == 10
    assert 0 < rows[maps["lru"].info.id]["entries"] <= 256


def test_sorted_fullest_first_uncounted_last(maps):
    out = json.loads(bpfbatch("list", "--fill", "-o", "json", "--match", f"{PREFIX}*",
                              check=True).stdout)
    fills = [r["fill"] for r in out]
    assert fills[-1] is None and None not in fills[:-1]
    assert fills[:-1] == sorted(fills[:-1], reverse=True)


def test_every_format_shows_the_same_rows(maps):
    want = list(counted().values())
    lines = bpfbatch("list", "--count", "-o", "jsonl", "--match", f"{PREFIX}*",
                     check=True).stdout
    assert [json.loads(line) for line in lines.splitlines()] == want
    text = bpfbatch("list", "--count", "-o", "csv", "--match", f"{PREFIX}*", check=True).stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [int(r["id"]) for r in rows] == [r["id"] for r in want]
    assert [r["entries"] for r in rows] == [str(r["entries"]) if r["entries"] is not None
                                            else "-" for r in want]
    assert [r["reason"] for r in rows] == [r["reason"] or "" for r in want]
    table = bpfbatch("list", "--count", "--match", f"{PREFIX}*", check=True).stdout
    lines = table.splitlines()
    assert lines[0].split()[:5] == ["id", "type", "name", "entries", "max_entries"]
    assert len(lines) == 2 + len(want)
    ring = next(line for line in lines if line.split()[0] == str(maps["ring"].info.id))
    assert ring.split()[3] == "-" and "ringbuf maps" in ring


def test_programs_using_a_map_agree_with_bpftool():
    from bpfbatch.loader import BpfObject

    with BpfObject.package("tcptop") as obj:
        obj.load()
        active = obj.map("active").info.id
        users = inventory.map_programs()
        progs = [p for p in bpftool("prog", "show") if active in p.get("map_ids", [])]
        assert {p["name"] for p in progs} >= {"send_btf", "recv_btf"}
        for map_id in {i for p in progs for i in p["map_ids"]}:  # the maps they use
            theirs = {p["id"] for p in bpftool("prog", "show")
                      if map_id in p.get("map_ids", [])}
            assert {p.id for p in users.get(map_id, [])} == theirs
        out = json.loads(bpfbatch("list", "--count", "-o", "json", "--match", "active",
                                  check=True).stdout)
        row = next(r for r in out if r["id"] == active)
        assert [(p["id"], p["name"]) for p in row["programs"]] == [
            (p["id"], p["name"]) for p in sorted(progs, key=lambda p: p["id"])]


def test_a_spent_budget_leaves_walks_uncounted_but_counts_arrays(maps):
    rows = counted("--budget", "1ns")
    for kind in ("hash", "lru", "percpu"):
        row = rows[maps[kind].info.id]
        assert row["entries"] is None and "budget of 1e-09s spent" in row["reason"]
    assert rows[maps["array"].info.id]["entries"] == 10  # arrays need no walk


def test_a_walk_stops_at_the_budget_and_says_how_far_it_got(monkeypatch):
    """The clock, not the kernel, is replaced: it moves one second per reading, so the
    budget runs out after the first batch of a map of three batches."""
    clock = iter(range(10**6))
    monkeypatch.setattr(inventory.time, "monotonic", lambda: float(next(clock)))
    with Map.create(MapType.HASH, 4, 8, 3000, name=f"{PREFIX}_big") as m:
        fill(m, 3000)
        row = inventory.Row(m.info)
        inventory.count_into(row, 2.0, 1.5, batch_size=1024)
    entries, reason = row.entries, row.reason
    assert entries is None
    assert reason.startswith("budget of 1.5s spent after ") and "of a walk over 3000" in reason
    assert int(reason.split("after ")[1].split()[0]) < 3000


WRITER = """
import struct, sys
from bpfbatch import Map
m = Map.open_id(int(sys.argv[1]))
print("ready", flush=True)
i = 0
while True:
    m.update(struct.pack("I", i % 100000), bytes(8))
    i += 1
"""


def test_lru_filling_and_evicting_while_counted(maps):
    lru = maps["lru"]
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(lru.info.id)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline() == "ready\n"
        for _ in range(20):
            row = counted("--type", "lru_hash")[lru.info.id]
            assert row["reason"] is None and 0 < row["entries"] <= 256
    finally:
        writer.kill()
        writer.wait()


def test_budget_is_a_duration_and_needs_count():
    proc = bpfbatch("list", "--count", "--budget", "soon")
    assert proc.returncode == 2 and "--budget" in proc.stderr and "\n" == proc.stderr[-1]
    proc = bpfbatch("list", "--budget", "1s")
    assert proc.returncode == 2 and "--budget: counts nothing without --count" in proc.stderr


@pytest.mark.parametrize("argv", [["list"], ["list", "--count"]])
def test_a_map_type_no_map_can_have_is_a_usage_error(argv):
    """Not an empty listing that looks like a system without such maps."""
    proc = bpfbatch(*argv, "--type", "lru")
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr.startswith("bpfbatch: error: --type: unknown map type 'lru'"), proc
    assert proc.stderr.count("\n") == 1, proc


def holds_map(pid: int, map_id: int) -> bool:
    """Whether process ``pid`` has map ``map_id`` open (its fdinfo names the map's id)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except FileNotFoundError:
        return False
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                if f"map_id:\t{map_id}\n" in f.read():
                    return True
        except OSError:
            continue
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_counting_says_how_far_it_got(maps, sig):
    """The signal lands while the big map is being walked: the command has it open."""
    import numpy as np

    from bpfbatch.map import writes

    n = 1 << 21
    with Map.create(MapType.HASH, 4, 8, n, name=f"{PREFIX}_zbig") as big:
        keys = np.arange(n, dtype=np.uint32)
        writes.update(big, keys, keys.astype(np.uint64), n)
        proc = subprocess.Popen([sys.executable, "-m", "bpfbatch", "list", "--count",
                                 "--match", f"{PREFIX}*"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        while not holds_map(proc.pid, big.info.id) and proc.poll() is None:
            pass
        proc.send_signal(sig)
        out, err = communicate(proc, 120)
    assert proc.returncode == 128 + sig and out == ""
    # mostly while the big map (counted last: 5 of 6 done) is walked; the listing before the
    # count opens it too, for an instant, and a loaded machine may be slower to get past the
    # small ones, so how far it got is any count short of the six
    name = signal.Signals(sig).name
    assert re.fullmatch(rf"bpfbatch: interrupted \({name}\) after (?:[0-5] of 6|0) maps counted, "
                        r"nothing printed\n", err), err


def test_the_cheapest_maps_are_counted_first(monkeypatch):
    """A clock that moves one second per reading and a budget of 2.5 s: the deadline, the
    small map's check and its one batch take the budget; the big map, created first, is the
    one left uncounted."""
    clock = iter(range(10**6))
    monkeypatch.setattr(inventory.time, "monotonic", lambda: float(next(clock)))
    with Map.create(MapType.HASH, 4, 8, 4096, name=f"{PREFIX}_big2") as big, \
            Map.create(MapType.HASH, 4, 8, 16, name=f"{PREFIX}_small") as small:
        fill(big, 100)
        fill(small, 3)
        rows = {r.info.id: r for r in inventory.inventory([big.info, small.info],
                                                          budget_s=2.5)}
    assert rows[small.info.id].entries == 3
    assert rows[big.info.id].entries is None
    assert rows[big.info.id].reason == "budget of 2.5s spent before this map"
