"""``bpfbatch top maps``: ``list --count`` refreshed, with each map's net change per second.
The maps are this test's own (a per-process name prefix), filled between refreshes; the
counts are checked against ``bpftool map dump``, the rates against the counts they come from
(a rate's size depends on the clock, its sign and its zero do not)."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys

import pytest
from fault_helpers import communicate, reaped
from test_cli_maps import bpfbatch

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.top.maps import MapsTop

PREFIX = f"bb_topm{os.getpid():x}_"  # the "_" ends the pid: no other pid's maps match


def keys(m: Map, start: int, stop: int) -> list[bytes]:
    return [struct.pack("I", i) for i in range(start, stop)]


def dumped(m: Map) -> int:
    return len(json.loads(subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m.info.id)],
                                         capture_output=True, text=True, check=True).stdout))


@pytest.fixture
def maps():
    made = {"hash": Map.create(MapType.HASH, 4, 8, 512, name=f"{PREFIX}h"),
            "lru": Map.create(MapType.LRU_HASH, 4, 8, 64, name=f"{PREFIX}l"),
            "array": Map.create(MapType.ARRAY, 4, 8, 8, name=f"{PREFIX}a")}
    yield made
    for m in made.values():
        m.close()


def mine(info) -> bool:
    return info.name.startswith(PREFIX)


def test_the_change_is_the_net_of_adds_and_deletes(maps):
    h, lru = maps["hash"], maps["lru"]
    tool = MapsTop(None, mine)
    first = tool.refresh()
    assert first.seconds is None
    assert all(first.rate(row.info.id) is None for row in first.rows)
    for k in keys(h, 0, 100):
        h.update(k, bytes(8))
    for k in keys(h, 0, 30):
        h.delete(k)
    for k in keys(lru, 0, 1000):  # 15x max_entries: the LRU evicts while it fills
        lru.update(k, bytes(8))
    second = tool.refresh()
    rows = {row.info.id: row for row in second.rows}
    assert rows[h.info.id].entries == dumped(h) == 70
    assert second.change[h.info.id] == 70
    assert second.rate(h.info.id) == 70 / second.seconds
    assert rows[lru.info.id].entries == dumped(lru) == second.change[lru.info.id]
    assert second.change[maps["array"].info.id] == 0  # arrays are always full
    for k in keys(h, 100, 120):  # as many adds as deletes: the count cannot see them
        h.update(k, bytes(8))
    for k in keys(h, 30, 50):
        h.delete(k)
    third = tool.refresh()
    assert third.change[h.info.id] == 0 and third.rate(h.info.id) == 0


def test_a_spent_budget_shows_dashes_not_a_stall(maps):
    for k in keys(maps["hash"], 0, 10):
        maps["hash"].update(k, bytes(8))
    out = bpfbatch("top", "maps", "--match", f"{PREFIX}*", "--budget", "1ns", "0.1", "2",
                   check=True).stdout
    tables = refreshes(out.splitlines())
    assert len(tables) == 2
    for rows in tables:
        assert rows[maps["array"].info.id][3] == "8"  # no walk needed
        for name in ("hash", "lru"):
            row = rows[maps[name].info.id]
            assert row[3] == row[5] == row[6] == "-"
            assert "budget of 1e-09s spent" in " ".join(row)


def refreshes(lines: list[str]) -> list[dict[int, list[str]]]:
    """Each refresh of piped output (a loadavg line, the heading, its rule, then the rows)
    as map id → cells."""
    tables = []
    for line in lines:
        if "loadavg:" in line:
            tables.append({})
        elif tables and line[:1] in " 0123456789" and line.split() and line.split()[0].isdigit():
            cells = line.split()
            tables[-1][int(cells[0])] = cells
    return tables


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_maps_filling_between_refreshes(maps, sig):
    """The test fills the maps after each refresh it reads: a refresh that counts more than
    the previous one shows a positive rate, one that counts as many shows 0. Then a signal
    stops it with one line whose refresh count is what reached stdout, exit 128 + n.

    The counts are this test's subject, not the budget (the test above has it): a budget no
    run reaches keeps a loaded machine from turning a count into '-'. Stdout is unbuffered
    so that readline takes no more than its line: communicate() reads the pipe itself, and
    a refresh already read ahead into a buffer would be printed yet missing from ``rest``."""
    h, lru = maps["hash"], maps["lru"]
    proc = subprocess.Popen([sys.executable, "-m", "bpfbatch", "top", "maps", "--match",
                             f"{PREFIX}*", "--budget", "1h", "0.1", "1000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    seen, added = [], 0
    with reaped(proc):
        assert proc.stdout.readline().startswith(b"Tracing...")
        while len(seen) < 8:
            lines = [proc.stdout.readline().decode() for _ in range(4 + len(maps))]  # blank,
            [rows] = refreshes(lines)                              # loadavg, heading, rule
            seen.append(rows)
            if len(seen) % 2:  # every other refresh sees the maps grow
                for k in keys(h, added, added + 40):
                    h.update(k, bytes(8))
                    lru.update(k, bytes(8))
                added += 40
        proc.send_signal(sig)
        rest, err = (text.decode() for text in communicate(proc, 60))
    printed = len(seen) + len(refreshes(rest.splitlines()))
    assert proc.returncode == 128 + sig
    assert err == f"bpfbatch: interrupted ({signal.Signals(sig).name}) after {printed} " \
                  "refreshes printed\n"
    assert dumped(h) == added and all(int(rows[h.info.id][3]) <= added for rows in seen)
    for m in (h, lru):
        assert seen[0][m.info.id][6] == "-"
        for before, now in zip(seen, seen[1:]):
            change = int(now[m.info.id][3]) - int(before[m.info.id][3])
            rate = now[m.info.id][6]
            assert (rate == "0") if change == 0 else rate.startswith("+" if change > 0 else "-")
    assert any(int(b[h.info.id][3]) < int(n[h.info.id][3]) for b, n in zip(seen, seen[1:]))


@pytest.mark.parametrize("argv, fragment", [
    (["abc"], "invalid value for 'INTERVAL'"),
    (["--", "-1"], "INTERVAL: must be positive, got -1"),
    (["1", "0"], "COUNT: must be positive, got 0"),
    (["--budget", "soon", "1", "1"], "--budget: expected a duration"),
    (["-r", "0", "1", "1"], "-r/--maxrows: must be positive"),
    (["--type", "lru", "1", "1"], "--type: unknown map type 'lru'"),
])
def test_a_bad_argument_is_a_usage_error(argv, fragment):
    """Whatever finds it (click, or the command before it counts anything): one line, exit 2."""
    proc = bpfbatch("top", "maps", *argv)
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr.startswith("bpfbatch: error: ") and proc.stderr.count("\n") == 1, proc
    assert fragment in proc.stderr, proc
