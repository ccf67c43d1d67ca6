"""The public API, ``from bpfbatch import Map``, against the real kernel, each result checked
with bpftool (an independent reader) where it reads a map."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from bpfbatch import BpfBatchError, Map
from bpfbatch._sys.abi import MapType
from bpfbatch.errors import InputError, KernelError, NotFoundError
from bpfbatch.labs.demo import create_flow_table, fill_flow_table

pytestmark = pytest.mark.skipif(not shutil.which("bpftool"), reason="needs bpftool")

NAME = f"bb_api_{os.getpid() % 100000}"


def bpftool_entries(m: Map) -> list[dict]:
    out = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m.info.id)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def formatted(m: Map) -> dict:
    """bpftool's decoded view of the map, key (as JSON text) → value."""
    return {json.dumps(e["formatted"]["key"], sort_keys=True): e["formatted"]["value"]
            for e in bpftool_entries(m)}


def as_dict(pairs) -> dict:
    return {json.dumps(k, sort_keys=True): v for k, v in pairs}


@pytest.fixture
def flows():
    with create_flow_table(4096, name=NAME) as m:
        fill_flow_table(m, 3000)
        yield m


def test_open_by_id_pinned_and_name(flows, tmp_path):
    pin = f"/sys/fs/bpf/{NAME}"
    flows.pin(pin)
    try:
        for how in ({"id": flows.info.id}, {"pinned": pin}, {"name": NAME}):
            with Map.open(**how, read_only=True) as m:
                assert m.info.id == flows.info.id
                assert m.count() == 3000
                key = next(iter(m.batches(batch_size=1))).keys.tobytes()[:16]
                with pytest.raises(KernelError, match="EPERM"):
                    m.update(key, bytes(m.info.value_stride))
    finally:
        os.unlink(pin)


@pytest.mark.parametrize("how", [{}, {"id": 1, "name": "x"}])
def test_open_needs_exactly_one_address(how):
    with pytest.raises(InputError, match="Map.open: name the map with exactly one of id, "
                                         "pinned, name"):
        Map.open(**how)


def test_open_missing_is_a_bpfbatch_error():
    with pytest.raises(NotFoundError):
        Map.open(name=NAME + "_none")
    with pytest.raises(BpfBatchError):
        Map.open(pinned="/sys/fs/bpf/" + NAME + "_none")


def test_count_and_items_match_bpftool(flows):
    assert flows.count() == flows.count(batch_size=7) == len(bpftool_entries(flows))
    items = list(flows.items(batch_size=100, decode="none"))  # as stored, as bpftool shows
    assert len(items) == 3000
    assert as_dict(items) == formatted(flows)
    key, value = items[0]
    assert set(key) == {"saddr", "daddr", "sport", "dport", "proto", "pad"}
    assert key["proto"] in ("IPPROTO_TCP", "IPPROTO_UDP", "IPPROTO_ICMP")


def test_to_numpy_has_btf_field_names_and_the_same_values(flows):
    keys, values = flows.to_numpy()
    assert keys.dtype.names == ("saddr", "daddr", "sport", "dport", "proto", "pad")
    assert values.dtype.names == ("packets", "bytes", "first_seen_ns", "last_seen_ns")
    assert len(keys) == len(values) == 3000
    reference = formatted(flows)
    for k, v in zip(keys[:50], values[:50]):
        entry = reference[json.dumps({"saddr": int(k["saddr"]), "daddr": int(k["daddr"]),
                                      "sport": int(k["sport"]), "dport": int(k["dport"]),
                                      "proto": {1: "IPPROTO_ICMP", 6: "IPPROTO_TCP",
                                                17: "IPPROTO_UDP"}[int(k["proto"])],
                                      "pad": [0, 0, 0]}, sort_keys=True)]
        assert entry["packets"] == int(v["packets"]) and entry["bytes"] == int(v["bytes"])


def test_update_items_round_trips_what_items_yields(flows):
    items = list(flows.items())
    with create_flow_table(4096, name=NAME + "b") as copy:
        assert copy.update_items(items, batch_size=256) == 3000
        assert formatted(copy) == formatted(flows)
        # Raw bytes are accepted too, and a bad pair writes nothing.
        bad = [(items[0][0], items[0][1]), ({"saddr": "x"}, items[1][1])]
        with pytest.raises(InputError, match="item 1: key"):
            copy.update_items(bad)
        with pytest.raises(InputError, match="item 0: value"):
            copy.update_items([(bytes(16), b"short")])


def test_update_items_fresh_values_are_read_back_by_bpftool(flows):
    key = next(k for k, _ in flows.items(decode="none"))
    value = {"packets": 7, "bytes": 700, "first_seen_ns": 1, "last_seen_ns": 2}
    assert flows.update_items([(key, value)], decode="none") == 1
    assert formatted(flows)[json.dumps(key, sort_keys=True)] == value


def test_delete_keys_counts_what_it_deleted_and_skips_missing(flows):
    keys = [k for k, _ in flows.items()][:100]
    missing = dict(keys[0], saddr=1)  # 0.0.0.1 is never generated
    assert flows.delete_keys(keys[:60] + [missing] + keys[60:]) == 100
    assert len(bpftool_entries(flows)) == 2900
    assert flows.delete_keys(keys) == 0
    assert flows.delete_keys([bytes(16)]) == 0


def test_drain_yields_everything_and_empties_the_map(flows):
    before = formatted(flows)
    assert as_dict(flows.drain(batch_size=512, decode="none")) == before
    assert bpftool_entries(flows) == []


def test_drain_stopped_early_puts_the_rest_back(flows):
    before = formatted(flows)
    taken = []
    for pair in flows.drain(batch_size=1000, decode="none"):
        taken.append(pair)
        if len(taken) == 1500:
            break
    after = formatted(flows)
    assert len(after) == 1500
    assert {**after, **as_dict(taken)} == before
    assert not set(after) & set(as_dict(taken))


def test_batches_are_raw_zero_copy_batches(flows):
    counts = [b.count for b in flows.batches(batch_size=500)]
    assert sum(counts) == 3000 and max(counts) <= 1024  # may grow past 500 on ENOSPC only
    batch = next(iter(flows.batches(batch_size=500)))
    assert len(batch.keys) == batch.count * 16 and len(batch.values) == batch.count * 32


def test_per_cpu_items_hold_one_value_per_possible_cpu(maps):
    m = maps(MapType.PERCPU_HASH, 4, 8, 16, name=NAME[:15])
    ncpus = m.info.value_stride // 8
    assert m.update_items([((5).to_bytes(4, "little"), (9).to_bytes(8, "little") * ncpus)]) == 1
    [(key, value)] = list(m.items())
    assert key == (5).to_bytes(4, "little") and value == [(9).to_bytes(8, "little")] * ncpus
    entry = bpftool_entries(m)[0]
    assert len(entry["values"]) == ncpus


def test_per_key_calls_check_sizes(flows):
    for call in (lambda: flows.lookup(b"abc"), lambda: flows.delete(b"abc"),
                 lambda: flows.next_key(b"abc"),
                 lambda: flows.update(bytes(16), b"short")):
        with pytest.raises(InputError, match=r"has \d+ bytes, the map's (key|value)s have"):
            call()


def test_importing_the_package_loads_neither_numpy_nor_libbpf():
    code = ("import sys, bpfbatch; "
            "print('numpy' in sys.modules, 'bpfbatch._sys.libbpf' in sys.modules); "
            "bpfbatch.Map; print('bpfbatch._sys.libbpf' in sys.modules)")
    out = subprocess.run([os.sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False", "True"]


def test_numpy_view_of_raw_map(maps):
    m = maps(MapType.HASH, 4, 8, 16, name=NAME[:15])
    m.update_items([(np.uint32(i).tobytes(), np.uint64(i * 3).tobytes()) for i in range(10)])
    keys, values = m.to_numpy()
    assert sorted(keys.view("<u4").ravel().tolist()) == list(range(10))
    assert sorted(values.view("<u8").ravel().tolist()) == [i * 3 for i in range(10)]


def test_readme_pandas_example(flows):
    pd = pytest.importorskip("pandas")
    keys, values = flows.to_numpy()
    table = pd.DataFrame({**{f: keys[f] for f in ("saddr", "daddr", "dport")},
                          **{f: values[f] for f in values.dtype.names}})
    top = table.nlargest(10, "bytes")[["saddr", "daddr", "dport", "bytes"]]
    reference = sorted((v["bytes"] for v in formatted(flows).values()), reverse=True)[:10]
    assert top["bytes"].tolist() == reference
