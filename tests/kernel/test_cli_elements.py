"""bpftool's element commands, typed from BTF, checked against bpftool on the same map."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from test_cli_maps import assert_one_line_error, bpfbatch

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.labs.demo import create_flow_table, fill_flow_table

TAG = f"{os.getpid()}"


def bpftool(*args: str):
    return json.loads(subprocess.run(["bpftool", "-j", "map", *args], capture_output=True,
                                     text=True, check=True).stdout)


@pytest.fixture
def flows():
    m = create_flow_table(64, name=f"bb_el_{os.getpid():x}")
    fill_flow_table(m, 10)
    path = f"/sys/fs/bpf/bb_el_{TAG}"
    m.pin(path)
    yield m, path
    os.unlink(path)
    m.close()


def test_lookup_update_getnext_agree_with_bpftool(flows):
    m, path = flows
    first = json.loads(bpfbatch("dump", "pinned", path, "-o", "jsonl", "--limit", "1",
                                check=True).stdout)
    key = json.dumps(first["key"])
    looked = json.loads(bpfbatch("lookup", "pinned", path, key, check=True).stdout)
    assert looked == first
    raw_key = bpftool("dump", "pinned", path)[0]["key"]
    theirs = bpftool("lookup", "pinned", path, "key", *raw_key)
    assert theirs["formatted"]["value"] == {k: v for k, v in first["value"].items()}

    bumped = {**first["value"], "packets": 4242}
    bpfbatch("update", "pinned", path, key, json.dumps(bumped), check=True)
    assert bpftool("lookup", "pinned", path, "key", *raw_key)["formatted"]["value"]["packets"] \
        == 4242
    assert_one_line_error(bpfbatch("update", "pinned", path, key, json.dumps(bumped),
                                   "--if-absent"), "EEXIST")

    # getnext walks the keys in bpftool's order, from the first.
    order = [e["key"] for e in bpftool("dump", "pinned", path)]
    ours, current = [], None
    while True:
        proc = bpfbatch("getnext", "pinned", path, *([] if current is None else [current]))
        if proc.returncode:
            assert_one_line_error(proc, "no next key")
            break
        step = json.loads(proc.stdout)
        current = json.dumps(step["next_key"])
        ours.append(step["next_key"])
    dumped = [json.loads(line)["key"] for line in
              bpfbatch("dump", "pinned", path, "-o", "jsonl", check=True).stdout.splitlines()]
    assert ours == dumped and len(ours) == len(order) == 10


def test_lookup_of_a_missing_key_is_one_line(flows):
    _, path = flows
    key = json.dumps({"saddr": "1.2.3.4", "daddr": "5.6.7.8", "sport": 1, "dport": 2,
                      "proto": "IPPROTO_UDP", "pad": [0, 0, 0]})
    assert_one_line_error(bpfbatch("lookup", "pinned", path, key), "no such key")
    assert_one_line_error(bpfbatch("lookup", "pinned", path, '{"nope": 1}'), "KEY",
                          "no field 'nope'")


@pytest.mark.parametrize("field, given, fragment", [
    ("dport", 80800, "KEY.dport: not a be16 value"),
    ("proto", "IPPROTO_XX", "KEY.proto: no enumerator 'IPPROTO_XX'"),
])
def test_a_bad_field_of_the_key_argument_is_a_usage_error(flows, field, given, fragment):
    """As a missing field is: any error about an argument exits 2."""
    _, path = flows
    key = {"saddr": "1.2.3.4", "daddr": "5.6.7.8", "sport": 1, "dport": 2,
           "proto": "IPPROTO_UDP", "pad": [0, 0, 0], field: given}
    proc = bpfbatch("lookup", "pinned", path, json.dumps(key))
    assert_one_line_error(proc, fragment)
    assert proc.returncode == 2


def test_a_missing_key_and_an_arrays_delete_say_it_once(flows, maps):
    """The key as typed, its ``key`` keyword once; an array's per-element delete gives the
    reason the file form gives (its elements always exist), not the kernel's bare EINVAL."""
    _, path = flows
    m = maps(MapType.HASH, 4, 4, 4)
    for command in ("lookup", "delete"):
        proc = bpfbatch(command, "id", str(m.info.id), "key", "9", "0", "0", "0")
        assert_one_line_error(proc, f"{m.info.label} key 9 0 0 0: no such key (ENOENT)")
    array = maps(MapType.ARRAY, 4, 4, 4)
    assert_one_line_error(bpfbatch("delete", "id", str(array.info.id), "key", "1", "0", "0", "0"),
                          "elements always exist: clear zeroes them (ENOTSUP)")


def test_pin_and_freeze(flows):
    m, path = flows
    again = f"/sys/fs/bpf/bb_el2_{TAG}"
    try:
        bpfbatch("pin", "id", str(m.info.id), again, check=True)
        assert bpftool("show", "pinned", again)["id"] == m.info.id
        bpfbatch("freeze", "pinned", again, check=True)
        assert bpftool("show", "id", str(m.info.id))["frozen"] == 1
        first = json.loads(bpfbatch("dump", "pinned", path, "-o", "jsonl", "--limit", "1",
                                    check=True).stdout)
        proc = bpfbatch("update", "pinned", path, json.dumps(first["key"]),
                        json.dumps(first["value"]))
        assert_one_line_error(proc, "EPERM")
    finally:
        if os.path.exists(again):
            os.unlink(again)


@pytest.mark.parametrize("map_type,order", [(MapType.QUEUE, [1, 2, 3]),
                                            (MapType.STACK, [3, 2, 1])])
def test_push_peek_pop(map_type, order):
    # Queue and stack maps take no BTF: values are raw bytes, given as hex.
    m = Map.create(map_type, 0, 8, 8, name=f"bb_q_{os.getpid():x}")
    path = f"/sys/fs/bpf/bb_q_{TAG}"
    m.pin(path)

    def number(byte_list: list[str]) -> int:
        return int.from_bytes(bytes(int(x, 16) for x in byte_list), "little")

    try:
        for v in (1, 2, 3):
            bpfbatch("push", "pinned", path, v.to_bytes(8, "little").hex(), check=True)
        peeked = json.loads(bpfbatch("peek", "pinned", path, check=True).stdout)
        assert number(peeked["value"]) == order[0] == number(bpftool("peek", "pinned", path)["value"])
        popped = [number(json.loads(bpfbatch("pop", "pinned", path, check=True).stdout)["value"])
                  for _ in range(3)]
        assert popped == order
        assert_one_line_error(bpfbatch("pop", "pinned", path), "empty")
    finally:
        os.unlink(path)
        m.close()


@pytest.mark.parametrize("map_type", [MapType.QUEUE, MapType.STACK])
def test_j_peek_and_pop_print_what_bpftool_prints(map_type):
    """``-j peek`` and ``-j pop`` print bpftool's bytes: the object alone on its line (pop
    once printed dump's array of one). The same value pushed twice, so bpftool's pop and
    ours each take one of the two."""
    m = Map.create(map_type, 0, 4, 8, name=f"bb_qj_{os.getpid():x}")
    path = f"/sys/fs/bpf/bb_qj_{TAG}"
    m.pin(path)
    try:
        for _ in range(2):
            subprocess.run(["bpftool", "map", "push", "pinned", path, "value", "7", "0", "0", "1"],
                           check=True)
        for command in ("peek", "pop"):
            theirs = subprocess.run(["bpftool", "-j", "map", command, "pinned", path],
                                    capture_output=True, check=True).stdout
            ours = bpfbatch("-j", command, "pinned", path, check=True).stdout.encode()
            assert ours == theirs == b'{"key":[],"value":["0x07","0x00","0x00","0x01"]}\n'
        assert m.lookup(b"") is None  # both pops took one
    finally:
        os.unlink(path)
        m.close()
