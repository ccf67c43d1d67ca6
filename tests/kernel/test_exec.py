"""Map exec on the real kernel: the in-kernel program and the user-space emulation select,
dump and delete exactly what a plain-Python evaluation of the decoded records selects, on
every map type the program walks; cross-checked with bpftool and through the CLI."""

import json
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch._sys.libbpf import num_possible_cpus
from bpfbatch.btf import BtfBuilder
from bpfbatch.errors import InputError, NotSupportedError
from bpfbatch.exec import predicate, walker
from bpfbatch.map import cursor, probes, writes
from bpfbatch.records.codec import map_codecs

pytestmark = pytest.mark.skipif(not probes.syscall_program(),
                                reason=f"syscall programs: {probes.syscall_program().reason}")

S = 10**9
N = 3000
TYPES = [MapType.HASH, MapType.LRU_HASH, MapType.PERCPU_HASH, MapType.LRU_PERCPU_HASH,
         MapType.ARRAY, MapType.PERCPU_ARRAY]


def make_map(map_type: MapType, entries: int = N, *, seed: int = 3) -> Map:
    """``u32 → struct st { u64 packets; s32 delta; u32 port; u64 last_seen_ns; }``, filled
    with random values (different on every CPU for per-CPU maps), ages 0, 10, ... 60 s: the
    predicates cut at 5 s from a step, so a run starting a little after its reference's
    ``now`` selects the same elements."""
    with BtfBuilder() as b:
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        s32 = b.integer("s32", 4, signed=True)
        value = b.struct("st", [("packets", u64), ("delta", s32), ("port", u32),
                                ("last_seen_ns", u64)])
        capacity = 2 * entries if map_type in (MapType.LRU_HASH, MapType.LRU_PERCPU_HASH) \
            else entries
        m = Map.create(map_type, 4, 24, capacity, name="bb_exec_test", btf_fd=b.load(),
                       btf_key_type_id=u32, btf_value_type_id=value)
    info = m.info
    rng = np.random.default_rng(seed)
    cpus = num_possible_cpus() if info.percpu else 1
    base = map_codecs(info)[1]
    base = base.base if info.percpu else base
    one = np.zeros((entries, cpus), np.dtype({"names": ["v"], "formats": [base.dtype],
                                              "itemsize": info.cpu_stride}))
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    one["v"]["packets"] = rng.integers(0, 100, one.shape)
    one["v"]["delta"] = rng.integers(-50, 50, one.shape)
    one["v"]["port"] = rng.choice([53, 80, 443], one.shape)
    # (clamped at 1 ns after boot: on a machine up for less than a minute, the comparisons
    # with `now - 35s` select nothing, in the kernel, the emulation and the reference alike)
    one["v"]["last_seen_ns"] = np.maximum(now - rng.integers(0, 7, one.shape) * 10 * S, 1)
    keys = np.arange(entries, dtype=np.uint32)
    writes.update(m, keys, one, entries)
    assert sum(b.count for b in cursor.BatchCursor(m)) == entries
    return m


def decoded(m: Map) -> dict[int, object]:
    """key → decoded value (a dict, or a list of per-CPU dicts), read with batch lookups."""
    key_codec, value_codec = map_codecs(m.info)
    keys, values = cursor.read_all(m)
    return {key_codec.decode(k.tobytes()): value_codec.decode(v.tobytes())
            for k, v in zip(keys, values)}


def field(value, name):
    """What the predicate compares: the field, or its largest per-CPU value."""
    if isinstance(value, list):
        return max(cpu[name] for cpu in value)
    return value[name]


PREDICATES = {
    "packets < 30": lambda k, v, now: field(v, "packets") < 30,
    "delta >= -10 and port == 443":
        lambda k, v, now: field(v, "delta") >= -10 and field(v, "port") == 443,
    "last_seen_ns < now - 35s": lambda k, v, now: field(v, "last_seen_ns") < now - 35 * S,
    "(packets > 90 or delta < -45) and last_seen_ns >= now - 45s":
        lambda k, v, now: (field(v, "packets") > 90 or field(v, "delta") < -45)
        and field(v, "last_seen_ns") >= now - 45 * S,
    "key < 1000 or key >= 2900 and packets != 7":
        lambda k, v, now: k < 1000 or k >= 2900 and field(v, "packets") != 7,
    # an unsigned operand >= 2**63 (the kernel's operand is an s64: its bits must travel)
    "packets <= 0x8000000000000000 and packets != 0xffffffffffffffff":
        lambda k, v, now: True,
    "packets > 9223372036854775807": lambda k, v, now: False,
}

def reference(before: dict, text: str, now: int) -> set[int]:
    return {k for k, v in before.items() if PREDICATES[text](k, v, now)}


@pytest.fixture(params=TYPES, ids=lambda t: t.label)
def typed_map(request):
    with make_map(request.param) as m:
        yield m


def run_collect(m, text, action, mode, **kw):
    """exec_map with a sink collecting (key, value bytes); the CLOCK_MONOTONIC bracket."""
    info = m.info
    records = {}

    def sink(batch):
        keys = np.frombuffer(batch.keys, np.uint8).reshape(batch.count, info.key_size)
        values = np.frombuffer(batch.values, np.uint8).reshape(batch.count, info.value_stride)
        for k, v in zip(keys, values):
            key = int.from_bytes(k.tobytes(), "little")
            assert key not in records, "a record handed over twice"
            records[key] = v.tobytes()

    start = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    result = walker.exec_map(m, text, action, mode=mode, sink=sink if action != "count" else None,
                              **kw)
    return result, records, start


@pytest.mark.parametrize("text", PREDICATES)
@pytest.mark.parametrize("mode", ["kernel", "user"])
def test_count_and_dump_match_reference(typed_map, text, mode):
    before = decoded(typed_map)
    keys, values = cursor.read_all(typed_map)
    raw = {int.from_bytes(k.tobytes(), "little"): v.tobytes() for k, v in zip(keys, values)}
    counted, _, start = run_collect(typed_map, text, "count", mode)
    want = reference(before, text, start)
    assert counted.mode == mode and counted.visited == len(before)
    assert counted.selected == len(want)
    dumped, records, start = run_collect(typed_map, text, "dump", mode)
    assert set(records) == reference(before, text, start)
    assert all(records[k] == raw[k] for k in records), "dumped values differ from the map's"
    assert dumped.selected == len(records) and dumped.deleted == 0
    assert decoded(typed_map) == before  # count and dump change nothing


@pytest.mark.parametrize("map_type", [t for t in TYPES if t not in (MapType.ARRAY,
                                                                     MapType.PERCPU_ARRAY)],
                         ids=lambda t: t.label)
def test_delete_kernel_and_user_agree(map_type):
    text = "last_seen_ns < now - 35s or packets > 95"
    results = {}
    for mode in ("kernel", "user"):
        with make_map(map_type, seed=11) as m:
            before = decoded(m)
            raw_before = {int.from_bytes(k.tobytes(), "little"): v.tobytes()
                          for k, v in zip(*cursor.read_all(m))}
            result, records, start = run_collect(m, text, "delete", mode)
            after = decoded(m)
            want = {k for k, v in before.items()
                    if field(v, "last_seen_ns") < start - 35 * S or field(v, "packets") > 95}
            assert set(records) == want, mode
            assert set(after) == set(before) - want, mode
            assert all(records[k] == raw_before[k] for k in records), "a deleted record differs"
            assert result.deleted == result.selected == len(want) and result.kept == 0
            results[mode] = (set(records), set(after))
            if shutil.which("bpftool") and not m.info.percpu:  # an independent reader
                dump = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m.info.id)],
                                      capture_output=True, text=True, check=True)
                assert len(json.loads(dump.stdout)) == len(after)
    assert results["kernel"] == results["user"]


def test_out_map_overflow_resumes(typed_map):
    """A tiny out map: the kernel path needs several passes and still hands over each
    selected record exactly once (dump skips what it emitted; delete finds the rest)."""
    info = typed_map.info
    text = "packets < 30"
    before = decoded(typed_map)
    want = reference(before, text, 0)
    with walker.KernelWalker(typed_map, out_bytes=97 * (8 + ((info.value_stride + 7) & ~7))) \
            as kernel:
        assert kernel.slots == 97
        got = []
        result = kernel.run(walker.compile_for(typed_map, text), "dump",
                            sink=lambda b: got.extend(np.frombuffer(b.keys, "<u4").tolist()))
        assert sorted(got) == sorted(want) and result.passes == max(1, -(-len(want) // 97))
        if info.type in walker.DELETABLE_TYPES:
            got.clear()
            result = kernel.run(walker.compile_for(typed_map, text), "delete",
                                sink=lambda b: got.extend(np.frombuffer(b.keys, "<u4").tolist()))
            assert sorted(got) == sorted(want) and result.deleted == len(want)
            assert set(decoded(typed_map)) == set(before) - want


@pytest.mark.parametrize("map_type", [MapType.HASH, MapType.LRU_PERCPU_HASH],
                         ids=lambda t: t.label)
def test_a_delete_resumes_where_it_stopped_or_from_the_start(map_type):
    """A delete in batches passes over what the last run judged and kept, checked by the key
    it kept last; when the map changed there it starts again from the start and still deletes
    every selected element exactly once. Here the sink, between two runs, moves every element
    the walk keeps (delete, then insert again: to the head of its bucket), or deletes them.
    Without the check the walk would pass over elements it never judged."""
    with make_map(map_type) as m:
        before = decoded(m)
        text = "packets < 30"
        want = reference(before, text, 0)
        keys, values = cursor.read_all(m)
        kept = ~np.isin(keys.view("<u4").reshape(-1), list(want))
        for move in (True, False):
            got: list[int] = []

            def sink(batch, got=got, move=move):
                if not got:
                    writes.delete(m, keys[kept], int(kept.sum()))
                    if move:
                        writes.update(m, keys[kept], values[kept], int(kept.sum()))
                got.extend(np.frombuffer(batch.keys, "<u4").tolist())

            result = walker.exec_map(m, text, "delete", mode="kernel", sink=sink, batch_size=64)
            assert sorted(got) == sorted(want) and result.deleted == len(want)
            assert set(decoded(m)) == (set(before) - want if move else set())
            writes.update(m, keys, values, len(keys))


@pytest.mark.parametrize("mode", ["kernel", "user"])
def test_max_selected_stops_early(mode):
    with make_map(MapType.HASH) as m:
        result, records, _ = run_collect(m, "packets < 50", "delete", mode, max_selected=100)
        assert result.deleted == len(records) == 100
        assert len(decoded(m)) == N - 100
        counted = walker.exec_map(m, predicate.EVERY_ELEMENT, "count", mode=mode, max_selected=7)
        assert counted.selected == 7


@pytest.mark.parametrize("mode", ["kernel", "user"])
def test_array_elements_cannot_be_deleted(mode):
    with make_map(MapType.ARRAY, 10) as m:
        with pytest.raises(NotSupportedError, match="array elements cannot be deleted"):
            walker.exec_map(m, "packets < 50", "delete", mode=mode)


def test_unknown_field_names_the_token():
    with make_map(MapType.HASH, 10) as m:
        with pytest.raises(InputError, match=r"^where column 14 'pakets': no such field"):
            walker.exec_map(m, "port == 1 or pakets < 3", "count")


def test_auto_mode_picks_the_kernel_here():
    with make_map(MapType.HASH, 10) as m:
        assert walker.exec_map(m, "packets < 50", "count").mode == "kernel"


def test_cli_exec_dump_delete_and_errors():
    with make_map(MapType.HASH) as m:
        before = decoded(m)
        cli = [sys.executable, "-m", "bpfbatch", "exec", "--map-id", str(m.info.id)]
        want = {k for k, v in before.items() if v["packets"] < 10}
        out = subprocess.run([*cli, "--where", "packets < 10", "--action", "dump", "-o", "jsonl"],
                             capture_output=True, text=True, check=True)
        dumped = [json.loads(line) for line in out.stdout.splitlines()]
        assert {d["key"] for d in dumped} == want
        assert all(d["value"] == before[d["key"]] for d in dumped)
        assert f"{len(want)} of {N} elements dumped" in out.stderr
        counted = subprocess.run([*cli, "--where", "packets < 10", "--mode", "user"],
                                 capture_output=True, text=True, check=True)
        assert counted.stdout == f"{len(want)}\n" and "(user, 1 pass)" in counted.stderr
        deleted = subprocess.run([*cli, "--where", "packets < 10", "--action", "delete"],
                                 capture_output=True, text=True, check=True)
        assert deleted.stdout == "" and f"{len(want)} of {N} elements deleted" in deleted.stderr
        assert set(decoded(m)) == set(before) - want
        bad = subprocess.run([*cli, "--where", "packets < 10 and"], capture_output=True, text=True)
        assert bad.returncode == 2  # a usage error: the option's value
        assert bad.stderr == ("bpfbatch: error: --where column 17 (end of expression): "
                              "expected a field name\n")
        assert set(decoded(m)) == set(before) - want  # nothing done
        for unset in ("", "   "):  # --where "$UNSET" --action delete must not empty the map
            blank = subprocess.run([*cli, "--where", unset, "--action", "delete"],
                                   capture_output=True, text=True)
            assert blank.returncode == 2 and blank.stdout == ""
            assert blank.stderr.startswith("bpfbatch: error: --where: empty expression")
        assert set(decoded(m)) == set(before) - want


@pytest.mark.parametrize("mode", ["kernel", "user"])
def test_scalar_key_and_value_smaller_than_a_u64(mode):
    """``u32 → u16``: the program's bounds hold for objects smaller than the widest field."""
    with BtfBuilder() as b:
        u16, u32 = b.integer("u16", 2), b.integer("u32", 4)
        m = Map.create(MapType.HASH, 4, 2, 500, name="bb_exec_small", btf_fd=b.load(),
                       btf_key_type_id=u32, btf_value_type_id=u16)
    with m:
        keys = np.arange(500, dtype=np.uint32)
        writes.update(m, keys, (keys * 7 % 1000).astype(np.uint16), 500)
        want = {k for k in range(500) if k * 7 % 1000 < 100 or k > 490}
        result, records, _ = run_collect(m, "value < 100 or key > 490", "delete", mode)
        assert set(records) == want and result.deleted == len(want)
        assert set(decoded(m)) == set(range(500)) - want


@pytest.mark.skipif(not shutil.which("bpftool"), reason="needs bpftool")
@pytest.mark.parametrize("mode", ["kernel", "user"])
def test_dump_matches_bpftools_entries(mode):
    """The selected records, printed as bpftool prints them, are exactly the entries of
    ``bpftool -j map dump`` whose decoded value passes the predicate."""
    with make_map(MapType.PERCPU_HASH, 500) as m:
        out = subprocess.run([sys.executable, "-m", "bpfbatch", "exec", "--map-id",
                              str(m.info.id), "--where", "packets < 40", "--action", "dump",
                              "--mode", mode, "-o", "bpftool-json"],
                             capture_output=True, text=True, check=True)
        ours = json.loads(out.stdout)
        theirs = json.loads(subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m.info.id)],
                                           capture_output=True, text=True, check=True).stdout)
        selected = [e for e in theirs
                    if max(cpu["value"]["packets"] for cpu in e["formatted"]["values"]) < 40]
        assert 0 < len(selected) < len(theirs)
        key = lambda e: json.dumps(e, sort_keys=True)  # noqa: E731
        assert sorted(map(key, ours)) == sorted(map(key, selected))
