"""The type matrix: every map type this kernel creates × every map command, each cell either
correct (checked against bpftool or the map's known contents) or refused with one line that
names the type and says why, leaving the map as it was.

The expected table is written out here, independently of the library's own table
(``bpfbatch.map.handle.refusal``); the README shows the same matrix (checked below).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch._sys.libbpf import lib
from bpfbatch.map.handle import COMMANDS

from matrix_maps import ENTRIES, FACTORIES, Lab

README = Path(__file__).resolve().parents[2] / "README.md"

#: map type -> the commands it refuses (every other command must work).
_NO_ELEMENTS = {"dump", "count", "load", "delete", "clear", "drain", "exec"}
_UNREADABLE = {"dump", "count", "load", "drain", "exec"}
REFUSED: dict[MapType, set[str]] = {
    MapType.HASH: set(), MapType.PERCPU_HASH: set(), MapType.LRU_HASH: set(),
    MapType.LRU_PERCPU_HASH: set(),
    MapType.ARRAY: {"delete", "drain"}, MapType.PERCPU_ARRAY: {"delete", "drain"},
    MapType.PROG_ARRAY: {"drain", "exec"},
    MapType.PERF_EVENT_ARRAY: _UNREADABLE, MapType.CGROUP_ARRAY: _UNREADABLE,
    MapType.XSKMAP: _UNREADABLE,
    MapType.STACK_TRACE: {"load", "exec"},
    MapType.LPM_TRIE: {"exec"},
    MapType.ARRAY_OF_MAPS: {"drain", "exec"}, MapType.HASH_OF_MAPS: {"drain", "exec"},
    MapType.DEVMAP: {"exec"}, MapType.DEVMAP_HASH: {"exec"}, MapType.CPUMAP: {"exec"},
    MapType.SOCKMAP: _UNREADABLE, MapType.SOCKHASH: _UNREADABLE,
    MapType.REUSEPORT_SOCKARRAY: _UNREADABLE,
    MapType.CGROUP_STORAGE: {"delete", "clear", "drain", "exec"},
    MapType.PERCPU_CGROUP_STORAGE: {"delete", "clear", "drain", "exec"},
    MapType.QUEUE: {"dump", "count", "delete", "exec"},
    MapType.STACK: {"dump", "count", "delete", "exec"},
    MapType.BLOOM_FILTER: {"dump", "count", "delete", "clear", "drain", "exec"},
    MapType.SK_STORAGE: _NO_ELEMENTS, MapType.INODE_STORAGE: _NO_ELEMENTS,
    MapType.TASK_STORAGE: _NO_ELEMENTS, MapType.CGRP_STORAGE: _NO_ELEMENTS,
    MapType.RINGBUF: _NO_ELEMENTS, MapType.USER_RINGBUF: _NO_ELEMENTS,
    MapType.ARENA: _NO_ELEMENTS,
}
#: Types whose empty slots bpftool lists with a per-key {"error": ...} (so does bpftool-json).
ERROR_SLOTS = {MapType.DEVMAP, MapType.CPUMAP}
#: Elements the factories put into the maps whose values cannot be read back.
UNREADABLE_HOLD = {MapType.PERF_EVENT_ARRAY: 0, MapType.CGROUP_ARRAY: 1, MapType.XSKMAP: 0,
                   MapType.SOCKMAP: 1, MapType.SOCKHASH: 1, MapType.REUSEPORT_SOCKARRAY: 1}


def test_every_creatable_type_is_in_the_matrix():
    """Every map type of the ABI but struct_ops (it needs a kernel struct and programs)."""
    missing = set(MapType) - set(REFUSED) - {MapType.UNSPEC, MapType.STRUCT_OPS}
    assert missing == set() and set(REFUSED) == set(FACTORIES)


# -- running a command ----------------------------------------------------------------------

def bpfbatch(*args) -> subprocess.CompletedProcess:
    """A ``bpfbatch`` command as its own process: its records go to the real fd 1, as a
    user's would (an in-process runner sees only ``sys.stdout``)."""
    return subprocess.run([sys.executable, "-m", "bpfbatch", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def run(*args) -> tuple[str, str]:
    """``(stdout, stderr)`` of a ``bpfbatch`` command that must succeed."""
    done = bpfbatch(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def refused(*args) -> str:
    """The one error line of a ``bpfbatch`` command that must fail (exit 1, nothing on
    stdout; a traceback is a defect), without the ``bpfbatch: error: `` prefix."""
    done = bpfbatch(*args)
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.startswith("bpfbatch: error: ") and done.stderr.count("\n") == 1, \
        done.stderr
    return done.stderr.removeprefix("bpfbatch: error: ").rstrip("\n")


def bpftool_dump(m: Map) -> tuple[bytes, list[dict], list[dict]]:
    """bpftool's ``-j map dump``: the text, its element entries, its per-key error entries."""
    out = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m.info.id)],
                         capture_output=True)
    if out.returncode:
        return out.stdout, [], []
    entries = json.loads(out.stdout)
    errors = [e for e in entries if isinstance(e.get("value"), dict) and "error" in e["value"]]
    return out.stdout, [e for e in entries if e not in errors], errors


def canonical(entries: list) -> list[str]:
    return sorted(json.dumps(e, sort_keys=True) for e in entries)


def popped_values(m: Map) -> list[int]:
    """What a queue or stack holds, in pop order, as the u64 the factories pushed."""
    return list(range(100, 100 + ENTRIES)) if m.info.type == MapType.QUEUE else \
        list(range(100 + ENTRIES - 1, 99, -1))


def in_bloom(m: Map, number: int) -> bool:
    value = ctypes.create_string_buffer(number.to_bytes(8, "little"), 8)
    ret = lib.bpf_map_lookup_elem_flags(m.fd, None, value, 0)
    assert ret in (0, -errno.ENOENT)
    return ret == 0


# -- the cells ------------------------------------------------------------------------------

def check_list(m: Map, tmp: Path) -> None:
    listed = {r["id"]: r for r in json.loads(run("list", "-o", "json")[0])}
    shown = json.loads(subprocess.run(["bpftool", "-j", "map", "show", "id", str(m.info.id)],
                                      capture_output=True, check=True).stdout)
    if isinstance(shown["type"], int):  # a type newer than this bpftool: it prints the number
        shown["type"] = MapType(shown["type"]).label
    assert listed[m.info.id] == {k: shown[k] for k in listed[m.info.id]}


def check_dump(m: Map, tmp: Path) -> None:
    text, entries, errors = bpftool_dump(m)
    ours = run("dump", "--map-id", m.info.id, "-o", "bpftool-json")[0].encode()
    assert ours == text  # per-key {"error": ...} entries included
    assert errors == [] or m.info.type in ERROR_SLOTS
    assert len(json.loads(run("dump", "--map-id", m.info.id, "-o", "json")[0])) == len(entries)


def check_count(m: Map, tmp: Path) -> None:
    assert run("count", "--map-id", m.info.id)[0] == f"{len(bpftool_dump(m)[1])}\n"


def check_load(m: Map, tmp: Path) -> None:
    path = tmp / "records.json"
    if m.info.type in (MapType.QUEUE, MapType.STACK):
        path.write_text(run("drain", "--map-id", m.info.id, "-o", "json")[0])
        run("load", "--map-id", m.info.id, path, "--format", "json")
        drained = json.loads(run("drain", "--map-id", m.info.id, "-o", "json")[0])
        numbers = [int.from_bytes(bytes(int(b, 16) for b in e["value"]), "little")
                   for e in drained]
        # a queue comes back in its order; a stack's pushes reverse it once more
        want = popped_values(m)
        assert numbers == (want if m.info.type == MapType.QUEUE else want[::-1])
        return
    if m.info.type == MapType.BLOOM_FILTER:
        path.write_text("\n".join(json.dumps({"key": [], "value": [f"0x{b:02x}" for b in
                                                        (500 + i).to_bytes(8, "little")]})
                                  for i in range(ENTRIES)) + "\n")
        assert not in_bloom(m, 500)
        _, said = run("load", "--map-id", m.info.id, path, "--format", "jsonl")
        assert f"{ENTRIES} entries loaded" in said
        assert all(in_bloom(m, 500 + i) for i in range(ENTRIES))
        return
    _, before, _ = bpftool_dump(m)
    path.write_text(run("dump", "--map-id", m.info.id, "-o", "json")[0])
    if m.info.type not in (MapType.ARRAY, MapType.PERCPU_ARRAY, MapType.CGROUP_STORAGE,
                           MapType.PERCPU_CGROUP_STORAGE):
        run("clear", "--map-id", m.info.id)
        assert bpftool_dump(m)[1] == [] or not before
    _, said = run("load", "--map-id", m.info.id, path, "--format", "json")
    assert f"{len(before)} entries loaded" in said
    after = bpftool_dump(m)[1]
    if m.info.type in (MapType.PROG_ARRAY, MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS):
        assert len(after) == len(before)  # the same objects (by id) in the same slots
    assert canonical(after) == canonical(before)


def keys_file(m: Map, tmp: Path) -> tuple[Path, int]:
    """Every key bpftool lists (slots whose value it cannot read too), and how many of them
    hold an element."""
    _, entries, errors = bpftool_dump(m)
    path = tmp / "keys.json"
    path.write_text(json.dumps([{"key": e["key"]} for e in entries + errors]))
    return path, UNREADABLE_HOLD.get(m.info.type, len(entries))


def check_delete(m: Map, tmp: Path) -> None:
    path, held = keys_file(m, tmp)
    _, said = run("delete", "--map-id", m.info.id, path, "--format", "bpftool-json")
    listed = len(json.loads(path.read_text()))
    if m.info.type == MapType.XSKMAP:
        assert f"{listed} slots emptied" in said
    else:
        assert f"{held} entries deleted, {listed - held} not found" in said
    assert bpftool_dump(m)[1] == []
    if m.info.type in UNREADABLE_HOLD:  # nothing left for a clear to remove
        assert run("clear", "--map-id", m.info.id)[1].split(": ")[1].startswith(
            f"{m.info.max_entries if m.info.type == MapType.XSKMAP else 0} ")


def check_clear(m: Map, tmp: Path) -> None:
    if m.info.type in (MapType.QUEUE, MapType.STACK):
        _, said = run("clear", "--map-id", m.info.id)
        assert f"{ENTRIES} entries removed" in said and m.pop() is None
        return
    _, before, _ = bpftool_dump(m)
    held = UNREADABLE_HOLD.get(m.info.type, len(before))
    _, said = run("clear", "--map-id", m.info.id)
    if m.info.type == MapType.XSKMAP:
        assert f"{m.info.max_entries} slots emptied" in said
        return
    if m.info.type in (MapType.ARRAY, MapType.PERCPU_ARRAY):
        assert f"{m.info.max_entries} entries zeroed" in said
        values = json.dumps([e.get("value", e.get("values")) for e in bpftool_dump(m)[1]])
        assert not any(int(b, 16) for b in re.findall(r"0x[0-9a-f]{2}", values))
        return
    assert f"{held} entries removed" in said  # what was there, not every slot
    assert bpftool_dump(m)[1] == []


def check_drain(m: Map, tmp: Path) -> None:
    out, said = run("drain", "--map-id", m.info.id, "-o", "json")
    drained = json.loads(out)
    if m.info.type in (MapType.QUEUE, MapType.STACK):
        numbers = [int.from_bytes(bytes(int(b, 16) for b in e["value"]), "little")
                   for e in drained]
        assert numbers == popped_values(m) and m.pop() is None
        return
    expected = json.loads(dump_after_refill(m, drained, tmp))
    assert canonical(drained) == canonical(expected)
    assert f"{len(drained)} entries drained" in said


def dump_after_refill(m: Map, drained: list, tmp: Path) -> str:
    """The map is empty after a drain (bpftool agrees); load the drained records back and
    dump them: the same records (so the drain handed out exactly what the map held)."""
    assert bpftool_dump(m)[1] == []
    if drained:
        path = tmp / "drained.json"
        path.write_text(json.dumps(drained))
        run("load", "--map-id", m.info.id, path, "--format", "json")
    return run("dump", "--map-id", m.info.id, "-o", "json")[0]


def check_exec(m: Map, tmp: Path) -> None:
    out, _ = run("exec", "--map-id", m.info.id, "--where", "key < 2")
    keys = [e["key"] for e in json.loads(run("dump", "--map-id", m.info.id, "-o", "json")[0])]
    assert out == f"{sum(k < 2 for k in keys)}\n"


CHECKS = {"list": check_list, "dump": check_dump, "count": check_count, "load": check_load,
          "delete": check_delete, "clear": check_clear, "drain": check_drain,
          "exec": check_exec}
assert tuple(CHECKS) == COMMANDS


def refused_line(m: Map, command: str, tmp: Path) -> str:
    """Run ``command`` where it must be refused; the one line, the map untouched."""
    before = bpftool_dump(m)[0]
    path = tmp / "input.jsonl"
    path.write_text('{"key": 0, "value": 0}\n')
    args = {"dump": ["dump", "--map-id", m.info.id],
            "count": ["count", "--map-id", m.info.id],
            "load": ["load", "--map-id", m.info.id, path],
            "delete": ["delete", "--map-id", m.info.id, path],
            "clear": ["clear", "--map-id", m.info.id],
            "drain": ["drain", "--map-id", m.info.id],
            "exec": ["exec", "--map-id", m.info.id, "--where", "key < 2", "--action",
                     "delete"]}[command]
    line = refused(*args)
    assert f"{m.info.type_name} maps: " in line, line
    assert bpftool_dump(m)[0] == before  # nothing done
    return line


@pytest.mark.parametrize("map_type", list(FACTORIES), ids=lambda t: t.label)
def test_matrix_row(map_type, tmp_path):
    """Each command on a fresh map of ``map_type``: works (checked) or is refused (one line)."""
    outcome = {}
    for command in COMMANDS:
        with contextlib.ExitStack() as stack:
            m = FACTORIES[map_type](Lab(stack))
            if command in REFUSED[map_type]:
                refused_line(m, command, tmp_path)
                outcome[command] = "refused"
            else:
                CHECKS[command](m, tmp_path)
                outcome[command] = "ok"
    assert {c for c, o in outcome.items() if o == "refused"} == REFUSED[map_type]


@pytest.mark.parametrize("map_type", sorted(ERROR_SLOTS | set(UNREADABLE_HOLD)),
                         ids=lambda t: t.label)
def test_bpftool_json_prints_per_key_errors(map_type):
    """Also where no value can be read (typed dumps are refused there): every slot bpftool
    lists, with its lookup's error."""
    with contextlib.ExitStack() as stack:
        m = FACTORIES[map_type](Lab(stack))
        assert run("dump", "--map-id", m.info.id, "-o", "bpftool-json")[0].encode() == \
            bpftool_dump(m)[0]


def readme_matrix() -> dict[str, dict[str, str]]:
    """The README's type matrix: map type -> command -> cell text."""
    text = README.read_text()
    table = text[text.index("| map type | " + " | ".join(COMMANDS) + " |"):].split("\n\n")[0]
    rows = [line.strip("|").split("|") for line in table.splitlines()[2:]]
    return {cells[0].strip().strip("`"): dict(zip(COMMANDS, (c.strip() for c in cells[1:])))
            for cells in rows}


def test_readme_shows_this_matrix():
    shown = readme_matrix()
    assert set(shown) == {t.label for t in REFUSED}
    for map_type, refused in REFUSED.items():
        row = shown[map_type.label]
        assert {c for c, cell in row.items() if cell.startswith("—")} == refused, map_type.label
        assert all(cell.startswith(("✓", "—")) for cell in row.values()), map_type.label


def test_sockmap_with_8_byte_values_dumps_socket_cookies(tmp_path):
    """The README's note under the matrix: with 8-byte values the kernel hands out cookies."""
    with contextlib.ExitStack() as stack:
        lab = Lab(stack)
        m = lab.create(MapType.SOCKMAP, 4, 8, ENTRIES)
        m.update((2).to_bytes(4, "little"), lab.udp_socket().to_bytes(8, "little"))
        text, entries, errors = bpftool_dump(m)
        assert len(entries) == 1 and len(errors) == ENTRIES - 1
        assert run("count", "--map-id", m.info.id)[0] == "1\n"
        ours = run("dump", "--map-id", m.info.id, "-o", "bpftool-json")[0].encode()
        assert ours == text
