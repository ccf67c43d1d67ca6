"""Issue 22's "What was seen" about the value model, replayed as a user met it, on the demo's
flow table (``struct flow_key { __be32 saddr, daddr; __be16 sport, dport; ... }``) pinned
where the README pins it. Each failed before one view was chosen in one place.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bpfbatch import Map
from bpfbatch.errors import BpfBatchError, NotFoundError
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.labs.demo import create_flow_table, fill_flow_table

PORTS = {22, 53, 80, 443, 8080}  # what fill_flow_table draws from


def bpfbatch(*args, stdin: bytes | None = None):
    return subprocess.run([sys.executable, "-m", "bpfbatch", *map(str, args)], input=stdin,
                          capture_output=True, timeout=120)


def stored(m: Map) -> list[str]:
    """The map's bytes, as bpftool reads them: its raw key and value byte lists, sorted."""
    out = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m.info.id)],
                         check=True, capture_output=True).stdout
    return sorted(json.dumps([e["key"], e["value"]]) for e in json.loads(out))


@pytest.fixture
def flows(pins):
    m = create_flow_table(4096, name=f"bb_seen{os.getpid() % 10000}")
    fill_flow_table(m, 500)
    try:
        yield m, pins(m, "seen")
    finally:
        m.close()


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv"])
def test_a_dump_piped_into_delete_deletes_it(flows, fmt):
    """Was: ``<stdin>:1: key.saddr: expected an integer, got '10.0.1.104'``."""
    m, pin = flows
    dump = bpfbatch("dump", "pinned", pin, "-o", fmt)
    assert dump.returncode == 0, dump.stderr
    deleted = bpfbatch("delete", "pinned", pin, "-", stdin=dump.stdout)
    assert deleted.returncode == 0, deleted.stderr
    assert m.count() == 0


def test_bpftools_dump_in_a_json_file_loads(flows, tmp_path):
    """Was: ``unknown member 'formatted'``: the suffix won over the content."""
    m, pin = flows
    before = stored(m)
    path = tmp_path / "f.json"
    path.write_bytes(subprocess.run(["bpftool", "-j", "map", "dump", "pinned", pin],
                                    check=True, capture_output=True).stdout)
    assert bpfbatch("clear", "pinned", pin).returncode == 0
    loaded = bpfbatch("load", "pinned", pin, path)
    assert loaded.returncode == 0, loaded.stderr
    assert stored(m) == before


def test_a_file_not_of_its_format_names_format(flows, tmp_path):
    m, pin = flows
    path = tmp_path / "f.json"
    path.write_text('{"key": 1}\n')
    refused = bpfbatch("load", "pinned", pin, path)
    assert refused.returncode == 1
    assert "--format" in refused.stderr.decode() and "read as json" in refused.stderr.decode()


def test_the_api_decodes_as_the_cli(flows):
    """Was: ``items()`` gave ``saddr: 3305308170, dport: 47873`` where dump showed
    ``10.0.3.197`` and ``443``."""
    m, pin = flows
    dumped = json.loads(bpfbatch("dump", "pinned", pin, "-o", "json").stdout)
    items = list(m.items())
    assert sorted(json.dumps([k, v], sort_keys=True) for k, v in items) == \
        sorted(json.dumps([e["key"], e["value"]], sort_keys=True) for e in dumped)
    assert {k["dport"] for k, _ in items} <= PORTS
    assert all(k["saddr"].startswith("10.") for k, _ in items)


def test_the_readmes_pandas_snippet_shows_the_ports(flows):
    """Was: the README's pandas snippet printed port 20480 for port 80."""
    pytest.importorskip("pandas")
    m, _ = flows
    frame = m.to_pandas()
    assert set(frame["key.dport"]) <= PORTS
    assert frame["key.saddr"].str.startswith("10.").all()


def test_the_cli_takes_the_apis_raw_form(flows, tmp_path):
    """Was: ``not a ipv4 value: 1744896010``. An address's stored number is not an address
    text, so it reads as stored; the stored records load with ``--decode none``."""
    m, pin = flows
    before = stored(m)
    raw = list(m.items(decode="none"))
    shown = list(m.items())
    mixed = tmp_path / "mixed.jsonl"  # stored addresses, ports as shown
    mixed.write_text("".join(
        json.dumps({"key": dict(s, saddr=r["saddr"], daddr=r["daddr"]), "value": v}) + "\n"
        for (r, v), (s, _) in zip(raw, shown)))
    as_stored = tmp_path / "stored.jsonl"
    as_stored.write_text("".join(json.dumps({"key": k, "value": v}) + "\n" for k, v in raw))
    for path, options in ((mixed, []), (as_stored, ["--decode", "none"])):
        assert bpfbatch("clear", "pinned", pin).returncode == 0
        loaded = bpfbatch("load", "pinned", pin, path, *options)
        assert loaded.returncode == 0, loaded.stderr
        assert stored(m) == before


def test_to_numpy_names_bitfields(maps):
    """Was: ``uint8`` rows although ``to_arrow()`` names every field."""
    with BtfBuilder() as b:
        u8, u16, u32 = b.integer("__u8", 1), b.integer("__u16", 2), b.integer("__u32", 4)
        value = b.struct("flags", [("a", u32, 3), ("b", u32, 5), ("c", u16), ("d", u8, 1)])
        m = maps(MapType.HASH, 4, b.layout(value)[0], 4, btf_fd=b.load(),
                 btf_key_type_id=u32, btf_value_type_id=value)
    m.update((1).to_bytes(4, "little"), bytes([0b10101101, 0, 7, 0, 1, 0, 0, 0]))
    _, values = m.to_numpy()
    assert values.dtype.names == ("a", "b", "c", "d")
    assert values[0].tolist() == (5, 21, 7, 1) == tuple(next(iter(m.items()))[1].values())


@pytest.mark.parametrize("decode", [[], ["--decode", "none"]])
def test_what_lookup_prints_update_takes_back(flows, decode):
    """The per-element commands read and print with the same view as dump and load."""
    m, pin = flows
    before = stored(m)
    records = [json.loads(line) for line in
               bpfbatch("dump", "pinned", pin, "-o", "jsonl", *decode).stdout.splitlines()[:5]]
    printed = []
    for record in records:
        looked = bpfbatch("lookup", "--pinned", pin, json.dumps(record["key"]), *decode)
        assert looked.returncode == 0, looked.stderr
        printed.append(json.loads(looked.stdout))
    assert printed == records
    assert bpfbatch("clear", "pinned", pin).returncode == 0
    for record in printed:
        updated = bpfbatch("update", "--pinned", pin, json.dumps(record["key"]),
                           json.dumps(record["value"]), *decode)
        assert updated.returncode == 0, updated.stderr
    after = stored(m)
    assert len(after) == 5 and set(after) <= set(before)  # each element byte for byte


def test_the_apis_lookup_and_update_take_items_forms(flows):
    """``Map.lookup``/``update`` speak the view as ``items()`` does; bytes stay bytes."""
    m, _ = flows
    key, value = next(iter(m.items()))
    assert m.lookup(key) == value
    m.update(key, dict(value, packets=1))
    assert m.lookup(key)["packets"] == 1
    raw_key, raw_value = next(iter(m.items(decode="none")))
    assert m.lookup(raw_key, decode="none") == raw_value
    assert isinstance(m.lookup(m.next_key(None)), bytes)


def test_every_per_element_call_takes_items_forms(flows):
    """``delete``, ``lookup_and_delete`` and ``next_key`` take a key as ``items()`` yields it
    (as ``lookup``/``update`` do) and answer in that form; bytes stay bytes. Checked against
    the raw calls: the same keys, in the kernel's order."""
    m, _ = flows
    shown = m.codecs()[0].decode  # stored bytes -> the form items() yields
    raw = m.next_key(None)
    typed = shown(raw)
    assert typed in [key for key, _ in m.items()]
    for _ in range(5):  # the typed walk is the raw walk, shown as items() shows it
        raw, typed = m.next_key(raw), m.next_key(typed)
        assert isinstance(raw, bytes) and typed == shown(raw)
    key, value = next(iter(m.items()))
    assert m.lookup_and_delete(key) == value and m.lookup(key) is None
    m.update(key, value)
    assert m.delete(key) is True and m.lookup(key) is None and m.delete(key) is False
    with pytest.raises(BpfBatchError):
        m.delete({"saddr": "not an address"})


def test_per_element_calls_take_stored_bytes_in_any_buffer(maps):
    """A ctypes key (bcc's tables give those), a numpy array or record: stored bytes, as
    ``bytes`` are; a numpy integer is a number of the view."""
    import ctypes

    import numpy as np

    with BtfBuilder() as b:
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        m = maps(MapType.HASH, 4, 8, 8, btf_fd=b.load(), btf_key_type_id=u32,
                 btf_value_type_id=u64)
    for key in (5, 6, 7):
        m.update(key, key * 10)
    assert m.lookup(ctypes.c_uint32(5)) == (50).to_bytes(8, "little")
    assert m.next_key(np.array([6], np.uint32)) == m.next_key((6).to_bytes(4, "little"))
    assert m.lookup_and_delete(np.array([6], np.uint32)) == (60).to_bytes(8, "little")
    assert m.delete(ctypes.c_uint32(5)) is True and m.lookup(5) is None
    assert m.lookup(np.uint32(7)) == 70 and m.delete(np.uint32(7)) is True


def test_a_typed_next_key_the_map_does_not_hold_is_refused(maps):
    """A key struct with padding: the view shows ``{"a": 2, "b": 2}`` whatever the padding
    bytes hold, so that key, encoded, is not the stored one; walking from it would start
    over for ever (the kernel answers an absent key with the first)."""
    with BtfBuilder() as b:
        u8, u32 = b.integer("u8", 1), b.integer("u32", 4)
        key = b.struct("k", [("a", u8), ("b", u32)])
        m = maps(MapType.HASH, 8, 4, 8, btf_fd=b.load(), btf_key_type_id=key,
                 btf_value_type_id=u32)
    stored = bytes([2, 0xAA, 0xBB, 0xCC]) + (2).to_bytes(4, "little")
    m.update(stored, bytes(4))
    (shown, _), = m.items()
    assert shown == {"a": 2, "b": 2}
    with pytest.raises(NotFoundError, match="padding"):
        m.next_key(shown)
    assert m.delete(shown) is False and m.next_key(stored) is None and m.delete(stored)


def test_an_address_compares_equal_as_shown_or_as_stored(flows, tmp_path):
    """The README's example: ``"10.0.0.1"`` and the stored ``16777226`` (its bytes read as the
    host's integer, as ``--decode none`` prints it) are the same key; the address's value in
    network order (``167772161``) is another."""
    m, path = flows
    (key, value), = [(k, v) for k, v in m.items()][:1]
    files = {}
    for name, saddr in (("shown", "10.0.0.1"), ("stored", 16777226), ("network", 167772161)):
        files[name] = tmp_path / f"{name}.jsonl"
        files[name].write_text(json.dumps({"key": {**key, "saddr": saddr}, "value": value}) + "\n")
    stored = json.loads(bpfbatch("dump", "pinned", path, "-o", "jsonl", "--decode", "none")
                        .stdout.decode().splitlines()[0])["key"]["saddr"]
    assert isinstance(stored, int)  # --decode none prints the stored integer
    for other, same in (("stored", True), ("network", False)):
        compared = bpfbatch("diff", str(files["shown"]), str(files[other]), "--like", path)
        assert compared.returncode == (0 if same else 1), compared.stderr


def test_the_batch_calls_take_stored_bytes_in_any_buffer(maps):
    """``update_items`` and ``delete_keys`` take ctypes keys and numpy rows as ``bytes`` (a
    list all of stored bytes, or all in the view's forms)."""
    import ctypes

    import numpy as np

    with BtfBuilder() as b:
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        m = maps(MapType.HASH, 4, 8, 8, btf_fd=b.load(), btf_key_type_id=u32,
                 btf_value_type_id=u64)
    m.update_items([(ctypes.c_uint32(5), np.array([50], np.uint64)),
                    (ctypes.c_uint32(6), np.array([60], np.uint64))])
    assert dict(m.items()) == {5: 50, 6: 60}
    assert m.delete_keys([ctypes.c_uint32(5), np.array([6, 0], np.uint16)]) == 2
    with pytest.raises(BpfBatchError, match="2 bytes, the map's are 4"):
        m.delete_keys([np.array([6], np.uint16)])
