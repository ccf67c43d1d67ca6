"""bpftool's grammar where bpftool users type it, checked against the real bpftool on the
same maps: ``key [hex] BYTES`` / ``value [hex] BYTES`` / ``any|exist|noexist``, ``-j`` and
``-p``, getnext's output, one-line usage errors that name the mistake; types given for a
map without BTF (API and CLI); shell completion of live values."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest
from test_cli_maps import assert_one_line_error, bpfbatch

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.labs.demo import create_flow_table, fill_flow_table


def bpftool(*args: str) -> str:
    return subprocess.run(["bpftool", *args], capture_output=True, text=True,
                          check=True).stdout


def _pinned(m: Map):
    """Yield ``(m, path)`` with ``m`` pinned at a unique path; unpin and close after."""
    path = f"/sys/fs/bpf/bb_gr_{uuid.uuid4().hex[:12]}"
    m.pin(path)
    try:
        yield m, path
    finally:
        os.unlink(path)
        m.close()


@pytest.fixture
def raw_hash():
    """A hash map without BTF (as bcc and bpftool map create make them): u32 → u64."""
    m = Map.create(MapType.HASH, 4, 8, 16, name=f"bb_gr_{os.getpid():x}")
    for k, v in ((1, 7), (2, 9), (3, 300)):
        m.update(k.to_bytes(4, "little"), v.to_bytes(8, "little"))
    yield from _pinned(m)


@pytest.fixture
def flows():
    m = create_flow_table(64, name=f"bb_grf_{os.getpid():x}")
    fill_flow_table(m, 5)
    yield from _pinned(m)


@pytest.fixture
def queue():
    yield from _pinned(Map.create(MapType.QUEUE, 0, 4, 8, name=f"bb_grq_{os.getpid():x}"))


@pytest.mark.parametrize("flag", ["-j", "-p"])
@pytest.mark.parametrize("key", [["1", "0", "0", "0"], ["hex", "01", "00", "00", "00"],
                                 ["0x1", "0", "00", "0x0"]])
def test_lookup_in_bpftool_words_prints_what_bpftool_prints(raw_hash, key, flag):
    _, path = raw_hash
    theirs = bpftool(flag, "map", "lookup", "pinned", path, "key", *key)
    for args in ([flag, "lookup", "pinned", path, "key", *key],
                 ["lookup", "pinned", path, "key", *key, flag]):
        assert bpfbatch(*args, check=True).stdout == theirs


def test_lookup_of_a_btf_map_in_bpftool_words(flows):
    _, path = flows
    first = json.loads(bpftool("-j", "map", "getnext", "pinned", path))["next_key"]
    for flag in ("-j", "-p"):
        theirs = bpftool(flag, "map", "lookup", "pinned", path, "key", *first)
        assert bpfbatch(flag, "lookup", "pinned", path, "key", *first, check=True).stdout \
            == theirs
    for flag in ("-j", "-p"):
        assert bpfbatch(flag, "dump", "pinned", path, check=True).stdout \
            == bpftool(flag, "map", "dump", "pinned", path)
    # Typed, as dump -o jsonl prints the element.
    looked = json.loads(bpfbatch("lookup", "pinned", path, "key", *first, check=True).stdout)
    dumped = [json.loads(line) for line in
              bpfbatch("dump", "pinned", path, "-o", "jsonl", check=True).stdout.splitlines()]
    assert looked in dumped


def test_getnext_walks_as_bpftool_does_typed_or_in_its_bytes(flows):
    _, path = flows
    theirs, ours_raw, ours_typed, key = [], [], [], None
    typed_key = None
    while True:
        words = [] if key is None else ["key", *key]
        try:
            step = bpftool("-j", "map", "getnext", "pinned", path, *words)
        except subprocess.CalledProcessError:
            break
        theirs.append(step)
        ours_raw.append(bpfbatch("-j", "getnext", "pinned", path, *words, check=True).stdout)
        typed = json.loads(bpfbatch("getnext", "pinned", path,
                                    *([] if typed_key is None else [json.dumps(typed_key)]),
                                    check=True).stdout)
        assert typed["key"] == typed_key
        typed_key = typed["next_key"]
        ours_typed.append(typed_key)
        key = json.loads(step)["next_key"]
    assert ours_raw == theirs and len(theirs) == 5
    dumped = [json.loads(line)["key"] for line in
              bpfbatch("dump", "pinned", path, "-o", "jsonl", check=True).stdout.splitlines()]
    assert ours_typed == dumped


def test_update_and_delete_in_bpftool_words_agree_with_bpftool(raw_hash):
    _, path = raw_hash
    bpfbatch("update", "pinned", path, "key", "5", "0", "0", "0", "value", "hex",
             *"01 02 03 04 05 06 07 08".split(), "noexist", check=True)
    assert bpftool("-j", "map", "lookup", "pinned", path, "key", "5", "0", "0", "0") == \
        bpfbatch("-j", "lookup", "pinned", path, "key", "5", "0", "0", "0", check=True).stdout
    assert_one_line_error(bpfbatch("update", "pinned", path, "key", "5", "0", "0", "0",
                                   "value", *["0"] * 8, "noexist"), "EEXIST")
    assert_one_line_error(bpfbatch("update", "pinned", path, "key", "6", "0", "0", "0",
                                   "value", *["0"] * 8, "exist"), "ENOENT")
    # value before key, as bpftool takes it too
    bpfbatch("update", "pinned", path, "value", *["9"] * 8, "key", "6", "0", "0", "0",
             check=True)
    assert json.loads(bpftool("-j", "map", "lookup", "pinned", path, "key", "6", "0", "0",
                              "0"))["value"] == ["0x09"] * 8
    bpfbatch("delete", "pinned", path, "key", "hex", "06", "00", "00", "00", check=True)
    with pytest.raises(subprocess.CalledProcessError):
        bpftool("map", "lookup", "pinned", path, "key", "6", "0", "0", "0")
    assert_one_line_error(bpfbatch("delete", "pinned", path, "key", "6", "0", "0", "0"),
                          "no such key")


def test_push_peek_in_bpftool_words(queue):
    _, path = queue
    bpfbatch("push", "pinned", path, "value", "1", "2", "3", "4", check=True)
    for flag in ("-j", "-p"):
        assert bpfbatch(flag, "peek", "pinned", path, check=True).stdout == \
            bpftool(flag, "map", "peek", "pinned", path)


@pytest.mark.parametrize("words, fragments", [
    (["1", "0", "0", "0"], ["got 4 numbers", "key 1 0 0 0"]),
    (["key", "1", "0", "0"], ["expected 4 bytes, got 3"]),
    (["key", "1", "0", "0", "256"], ["'256' is more than a byte"]),
    (["key", "hex", "0g", "0", "0", "0"], ["'0g' is not a byte"]),
    (["key", "1", "0", "0", "0", "extra"], ["expected key, got 'extra'"]),
    (["[" * 30000], ["nested deeper"]),
])
def test_a_wrong_key_is_one_usage_line_naming_the_mistake(raw_hash, words, fragments):
    _, path = raw_hash
    proc = bpfbatch("lookup", "pinned", path, *words)
    assert_one_line_error(proc, "lookup:", *fragments)
    assert proc.returncode == 2
    assert "name the map with" not in proc.stderr  # the map was named right


@pytest.mark.parametrize("command", [["update", "KEY"], ["push"]])
def test_a_deep_json_value_is_one_line(raw_hash, queue, command):
    path = (queue if command == ["push"] else raw_hash)[1]
    args = [command[0], "pinned", path, *(["1"] if len(command) > 1 else []), "[" * 30000]
    proc = bpfbatch(*args)
    assert_one_line_error(proc, "nested deeper")
    assert proc.returncode == 2


def test_an_unnamed_map_still_gets_the_addressing_hint():
    assert_one_line_error(bpfbatch("dump", "42"), "name the map with id")


def test_bcc_style_types_through_the_api(raw_hash):
    m, path = raw_hash
    with Map.open(pinned=path) as plain:
        assert dict(plain.items())[b"\x01\x00\x00\x00"] == (7).to_bytes(8, "little")
    with Map.open(pinned=path, key_type=ctypes.c_uint32, value_type=ctypes.c_uint64) as typed:
        assert dict(typed.items()) == {1: 7, 2: 9, 3: 300}
        typed.update_items([(4, 44)])
    with Map.open(pinned=path, key_type=np.uint32, value_type="u64") as typed:
        keys, values = typed.to_numpy()
        assert dict(zip(keys.tolist(), values.tolist())) == {1: 7, 2: 9, 3: 300, 4: 44}

    class Pair(ctypes.Structure):
        _fields_ = [("lo", ctypes.c_uint32), ("hi", ctypes.c_uint16, 4),
                    ("rest", ctypes.c_uint16, 12)]
    with Map.open(pinned=path, key_type="u32", value_type=Pair) as typed:
        assert dict(typed.items())[3] == {"lo": 300, "hi": 0, "rest": 0}
    with pytest.raises(Exception, match="value_type: u32 is 4 bytes, the map's are 8"):
        Map.open(pinned=path, value_type="u32")


def test_bcc_style_types_on_the_command_line(raw_hash):
    _, path = raw_hash
    dumped = bpfbatch("--key-type", "u32", "dump", "pinned", path, "--value-type", "u64",
                      "-o", "jsonl", check=True).stdout
    assert sorted(json.loads(line)["value"] for line in dumped.splitlines()) == [7, 9, 300]
    bpfbatch("update", "pinned", path, "8", "800", "--key-type=u32", "--value-type=u64",
             check=True)
    assert json.loads(bpftool("-j", "map", "lookup", "pinned", path, "key", "8", "0", "0",
                              "0"))["value"] == ["0x20", "0x03"] + ["0x00"] * 6
    assert_one_line_error(bpfbatch("dump", "pinned", path, "--value-type", "u16"),
                          "--value-type: u16 is 2 bytes, the map's are 8")


@pytest.mark.parametrize("spelling", ["char[4]", "c_char*4"])
def test_a_char_array_key_that_is_not_text_round_trips(raw_hash, spelling):
    """A ``char[N]`` given as a type prints a key that is not text as its elements, as one
    from clang's BTF does, and a dump piped into delete deletes every key it printed."""
    _, path = raw_hash
    key_type = spelling if spelling == "char[4]" else ctypes.c_char * 4
    with Map.open(pinned=path, key_type=key_type, value_type="u64") as typed:
        assert sorted(typed.items()) == [([1, 0, 0, 0], 7), ([2, 0, 0, 0], 9),
                                         ([3, 0, 0, 0], 300)]
        assert typed.lookup([2, 0, 0, 0]) == 9
    if spelling == "char[4]":
        dumped = bpfbatch("dump", "pinned", path, "-o", "jsonl", "--key-type", spelling,
                          "--value-type", "u64", check=True).stdout
        assert '"key":[1,0,0,0]' in dumped
        deleted = subprocess.run([sys.executable, "-m", "bpfbatch", "delete", "pinned", path,
                                  "-", "--key-type", spelling, "--value-type", "u64"],
                                 input=dumped, capture_output=True, text=True)
        assert deleted.returncode == 0 and "3 entries deleted, 0 not found" in deleted.stderr
        assert json.loads(bpftool("-j", "map", "dump", "pinned", path)) == []


def test_a_type_from_an_objects_btf():
    from bpfbatch.btf import Btf

    obj = os.path.join(os.path.dirname(sys.modules["bpfbatch"].__file__), "progs",
                       "flowtable.bpf.o")
    btf = Btf.from_file(obj)
    key_size = btf.size_of(next(t.id for t in btf.types if t.name == "flowtable_key"))
    flows = create_flow_table(16, name=f"bb_grb_{os.getpid():x}")
    fill_flow_table(flows, 3)
    typed_dump = [json.loads(line) for line in bpfbatch(
        "dump", "id", str(flows.info.id), "-o", "jsonl", check=True).stdout.splitlines()]
    raw = Map.create(MapType.HASH, flows.info.key_size, flows.info.value_size, 16,
                     name=f"bb_grr_{os.getpid():x}")
    try:
        assert key_size == flows.info.key_size
        for key, value in _raw_items(flows):
            raw.update(key, value)
        retyped = [json.loads(line) for line in bpfbatch(
            "dump", "id", str(raw.info.id), "-o", "jsonl", "--btf", obj,
            "--key-type", "struct flowtable_key", "--value-type", "struct flowtable_stats",
            check=True).stdout.splitlines()]
        # The object's struct spells the addresses as plain integers (the demo's, __be32).
        def values(records):
            return sorted(json.dumps(r["value"]) for r in records)
        assert values(retyped) == values(typed_dump) and len(retyped) == 3
        assert all(list(r["key"]) == list(typed_dump[0]["key"]) for r in retyped)
    finally:
        raw.close()
        flows.close()


def _raw_items(m: Map):
    ks, vs = m.info.key_size, m.info.value_stride
    for batch in m.batches():
        for i in range(batch.count):
            yield bytes(batch.keys[i * ks:(i + 1) * ks]), bytes(batch.values[i * vs:(i + 1) * vs])


def _complete(line: str, spelling: str = "bash_complete") -> list[str]:
    words = line.split(" ")
    env = {**os.environ, "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1),
           "_BPFBATCH_COMPLETE": spelling}
    done = subprocess.run([sys.executable, "-m", "bpfbatch"], env=env, capture_output=True,
                          text=True, check=True)
    return done.stdout.split()


@pytest.mark.parametrize("spelling", ["bash_complete", "complete_bash"])
def test_completion_offers_live_maps_and_fixed_values(raw_hash, spelling):
    m, path = raw_hash
    assert str(m.info.id) in _complete("bpfbatch dump id ", spelling)
    assert str(m.info.id) in _complete("bpfbatch lookup --map-id ", spelling)
    assert _complete(f"bpfbatch count name {m.info.name}", spelling) == [m.info.name]
    assert _complete(f"bpfbatch dump pinned {path}", spelling) == [path]
    assert _complete("bpfbatch dump -o bpf", spelling) == ["bpftool-json"]
    assert set(_complete("bpfbatch exec --action ", spelling)) == {"count", "dump", "delete"}
    assert "kernel-fast" in _complete("bpfbatch exec --mode k", spelling)
    assert "key.saddr=ipv4" in _complete("bpfbatch dump --decode key.saddr=ip", spelling)
    assert "getnext" in _complete("bpfbatch get", spelling)
    assert "u32" in _complete("bpfbatch --key-type u", spelling)


def test_maps_given_as_arguments_complete_with_live_maps(raw_hash, flows):
    """diff's A B, migrate's FROM TO and diff --like complete as dump's MAP does: the
    system's ids, pinned paths and names, at the moment of the <TAB>."""
    (m, path), (other, _) = raw_hash, flows
    assert str(m.info.id) in _complete("bpfbatch diff id ")
    assert _complete(f"bpfbatch diff pinned {path}") == [path]
    assert _complete(f"bpfbatch diff ./a.jsonl name {m.info.name}") == [m.info.name]
    assert _complete(f"bpfbatch migrate id {m.info.id} name {other.info.name}") == \
        [other.info.name]
    assert str(other.info.id) in _complete(f"bpfbatch migrate pinned {path} id ")
    assert {m.info.name, path} <= set(_complete("bpfbatch diff a b --like "))
    assert str(m.info.id) in _complete("bpfbatch record id ")


def test_tc_devices_complete_in_the_namespace_named_before():
    from tc_helpers import veth_netns

    with veth_netns() as netns:
        assert netns in _complete("bpfbatch tc apply -n ")
        assert set(_complete(f"bpfbatch tc dump -n {netns} --dev veth")) == {"vethA", "vethB"}
        assert set(_complete(f"bpfbatch tc dump -n {netns} --dev ")) == {"lo", "vethA", "vethB"}
    assert "lo" in _complete("bpfbatch tc dump --dev ")


def test_bccs_tables_read_typed_as_bcc_reads_them():
    """bcc's own table API is the oracle: its maps have no BTF; given bcc's ctypes types,
    items() gives what bcc's items() gives, and update_items writes what bcc reads."""
    from tools.bcc_setup import load_bcc

    bcc = load_bcc()
    if bcc is None:
        pytest.skip("bcc or kernel headers not available")
    tag = f"{os.getpid():x}"[-6:]
    b = bcc.BPF(text=f"""
        struct flow {{ u32 saddr; u16 dport; u8 proto; }};
        struct stats {{ u64 packets; u64 bytes; }};
        BPF_HASH(grc_{tag}, u32, u64, 64);
        BPF_HASH(grf_{tag}, struct flow, struct stats, 64);
        """.encode())
    try:
        counts, flows = b[f"grc_{tag}".encode()], b[f"grf_{tag}".encode()]
        for pid in range(1, 6):
            counts[counts.Key(pid)] = counts.Leaf(pid * 100)
            flows[flows.Key(pid, 443, 6)] = flows.Leaf(pid, pid * 1500)
        with Map.open(name=f"grc_{tag}", key_type=counts.Key, value_type=counts.Leaf) as m:
            assert m.info.btf_id == 0  # bcc made it without BTF
            assert dict(m.items()) == {k.value: v.value for k, v in counts.items()}
            m.update_items([(9, 900)])
        assert counts[counts.Key(9)].value == 900
        with Map.open(name=f"grf_{tag}", key_type=flows.Key, value_type=flows.Leaf) as m:
            ours = sorted(((k["saddr"], k["dport"], k["proto"]), (v["packets"], v["bytes"]))
                          for k, v in m.items())  # bcc's Key has its padding as a field
        theirs = sorted(((k.saddr, k.dport, k.proto), (v.packets, v.bytes))
                        for k, v in flows.items())
        assert ours == theirs and len(ours) == 5
    finally:
        b.cleanup()


def test_a_per_cpu_value_in_bpftool_words_goes_to_every_cpu():
    m = Map.create(MapType.PERCPU_HASH, 4, 4, 8, name=f"bb_grp_{os.getpid():x}")
    for _, path in _pinned(m):
        bpfbatch("update", "pinned", path, "key", "1", "0", "0", "0", "value", "7", "0", "0",
                 "0", check=True)
        theirs = json.loads(bpftool("-j", "map", "lookup", "pinned", path, "key", "1", "0",
                                    "0", "0"))
        assert {tuple(cpu["value"]) for cpu in theirs["values"]} == {("0x07", "0x00", "0x00",
                                                                       "0x00")}
        assert bpfbatch("-j", "lookup", "pinned", path, "key", "1", "0", "0", "0",
                        check=True).stdout == json.dumps(theirs, separators=(",", ":")) + "\n"


def test_list_with_j_and_p_is_list_json(raw_hash):
    m, _ = raw_hash
    plain = bpfbatch("list", "--match", m.info.name, "-o", "json", check=True).stdout
    for flag in ("-j", "-p"):
        shown = bpfbatch(flag, "list", "--match", m.info.name, check=True).stdout
        assert json.loads(shown) == json.loads(plain) and len(json.loads(plain)) == 1
    assert bpfbatch("-p", "list", "--match", m.info.name, check=True).stdout.startswith("[{\n")


def test_given_types_reach_exec_where_in_the_kernel(raw_hash):
    _, path = raw_hash
    assert_one_line_error(bpfbatch("exec", "pinned", path, "--where", "value > 8"),
                          "fields cannot be named (give one: --value-type")
    selected = bpfbatch("exec", "pinned", path, "--key-type", "u32", "--value-type", "u64",
                        "--where", "value > 8", "--action", "dump", "-o", "jsonl",
                        check=True).stdout
    assert sorted(json.loads(line)["key"] for line in selected.splitlines()) == [2, 3]


def test_bytes_are_refused_where_values_are_file_descriptors():
    m = Map.create(MapType.PROG_ARRAY, 4, 4, 4, name=f"bb_grpa_{os.getpid():x}")
    for _, path in _pinned(m):
        proc = bpfbatch("update", "pinned", path, "key", "0", "0", "0", "0", "value", "3", "0",
                        "0", "0")
        assert_one_line_error(proc, "file descriptors of maps or programs, not bytes")
        assert proc.returncode == 2
