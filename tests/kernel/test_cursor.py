"""The batch cursor against the real kernel: the read-side cases of the batch-semantics notes,
section (d). Raw libbpf calls establish what the kernel does; the cursor must then cope."""

from __future__ import annotations

import ctypes
import errno
import json
import multiprocessing
import subprocess

import numpy as np
import pytest

from bpfbatch import Map
from bpfbatch._sys import libbpf
from bpfbatch._sys.abi import MapType
from bpfbatch.errors import InputError, NotSupportedError, RetryBudgetError
from bpfbatch.map import writes
from bpfbatch.map.cursor import BatchCursor, read_all

NCPUS = libbpf.num_possible_cpus()
HASHES = [MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH, MapType.LRU_PERCPU_HASH]


def fill(m: Map, keys: np.ndarray) -> None:
    """Insert ``keys`` (uint32) with value = key repeated in every CPU slot."""
    values = np.zeros((len(keys), m.info.value_stride), np.uint8)
    for cpu in range(NCPUS if m.info.percpu else 1):
        off = cpu * m.info.cpu_stride
        values[:, off:off + 4] = keys.astype(np.uint32).view(np.uint8).reshape(-1, 4)
    assert writes.update(m, keys.astype(np.uint32), values, len(keys)) == len(keys)


def keys_of(m: Map, **options) -> list[int]:
    keys, _ = read_all(m, **options)
    return [int.from_bytes(bytes(k), "little") for k in keys]


def raw_lookup(m: Map, in_batch, count: int, *, delete: bool = False):
    """One raw batch call: (rc, count, out_batch bytes)."""
    fn = libbpf.lib.bpf_map_lookup_and_delete_batch if delete else libbpf.lib.bpf_map_lookup_batch
    out = ctypes.create_string_buffer(max(m.info.key_size, 4))
    keys = ctypes.create_string_buffer(max(count, 1) * m.info.key_size)
    values = ctypes.create_string_buffer(max(count, 1) * m.info.value_stride)
    n = ctypes.c_uint32(count)
    rc = fn(m.fd, in_batch, out, keys, values, ctypes.byref(n), None)
    return rc, n.value, out.raw


@pytest.mark.parametrize("map_type", HASHES)
def test_empty_hash_first_call_is_enoent_and_cursor_yields_nothing(maps, map_type):
    m = maps(map_type)
    rc, n, _ = raw_lookup(m, None, 16)
    assert (rc, n) == (-errno.ENOENT, 0)
    assert list(BatchCursor(m)) == []


def test_array_exact_fill_returns_zero_then_enoent_and_cursor_yields_once(maps):
    m = maps(MapType.ARRAY, max_entries=32)
    rc, n, out = raw_lookup(m, None, 32)
    assert (rc, n) == (0, 32)
    rc2, n2, _ = raw_lookup(m, ctypes.create_string_buffer(out, 4), 32)
    assert (rc2, n2) == (-errno.ENOENT, 0)
    assert keys_of(m, batch_size=32) == list(range(32))


def test_array_first_call_passes_null_so_key_zero_is_returned(maps):
    m = maps(MapType.ARRAY, max_entries=8)
    # A zeroed token would mean "after key 0": the kernel then skips key 0.
    rc, n, _ = raw_lookup(m, ctypes.create_string_buffer(4), 8)
    assert n == 7
    assert keys_of(m, batch_size=3)[0] == 0


@pytest.mark.parametrize("map_type", HASHES)
@pytest.mark.parametrize("delta", [-1, 0, 1, 37])
def test_hash_every_key_exactly_once_around_the_batch_size(maps, map_type, delta):
    batch = 64
    n = batch + delta if delta != 37 else 5 * batch
    m = maps(map_type, max_entries=4096)
    fill(m, np.arange(n))
    got = keys_of(m, batch_size=batch)
    assert len(got) == len(set(got)) == n
    assert set(got) == set(range(n))


def test_bucket_larger_than_batch_grows_and_returns_all_once(maps):
    m = maps(MapType.HASH, max_entries=64)
    fill(m, np.arange(64))
    # With 64 keys in 64 buckets a collision is all but certain: batch 1 cannot hold it.
    rcs = set()
    token = None
    while True:
        rc, n, out = raw_lookup(m, token, 1)
        rcs.add(rc)
        if rc == -errno.ENOSPC or rc == -errno.ENOENT:
            break
        token = ctypes.create_string_buffer(out, 4)
    assert -errno.ENOSPC in rcs
    c = BatchCursor(m, batch_size=1)
    got = []
    for b in c:
        got += [int.from_bytes(b.keys[i * 4:(i + 1) * 4], "little") for i in range(b.count)]
    assert sorted(got) == list(range(64))


def test_short_batch_mid_pass_does_not_end_iteration(maps):
    # Whether a bucket straddles a batch boundary depends on the map's random hash seed:
    # over several fresh maps a short rc-0 batch before the end is all but certain.
    short_seen = False
    for _ in range(8):
        m = maps(MapType.HASH, max_entries=1024)
        fill(m, np.arange(1000))
        counts = [b.count for b in BatchCursor(m, batch_size=100)]
        assert sum(counts) == 1000
        short_seen |= any(c < 100 for c in counts[:-1])
    assert short_seen, "expected a short rc-0 batch before the end"


def test_enospc_budget_spent_raises_naming_the_map(maps):
    m = maps(MapType.HASH, max_entries=64)
    fill(m, np.arange(64))
    with pytest.raises(RetryBudgetError) as exc:
        list(BatchCursor(m, batch_size=1, max_growth=0))
    assert exc.value.errno == errno.ENOSPC
    assert f"map {m.info.id}" in str(exc.value)


def test_drain_with_batch_smaller_than_buckets_loses_nothing(maps):
    m = maps(MapType.HASH, max_entries=64)
    fill(m, np.arange(64))
    drained = keys_of(m, delete=True, batch_size=1)
    left = keys_of(m)
    assert sorted(drained + left) == list(range(64))
    assert left == []


def _churn(map_id: int, lo: int, hi: int, rounds: int, ready) -> None:
    m = Map.open_id(map_id)
    ready.set()
    for r in range(rounds):
        for k in range(lo, hi):
            key = k.to_bytes(4, "little")
            if (k + r) % 2:
                m.update(key, key)
            else:
                m.delete(key)


def test_concurrent_writer_no_key_twice_stable_keys_all_returned(maps):
    m = maps(MapType.HASH, max_entries=1 << 16)
    stable = np.arange(20000)
    fill(m, stable)
    ready = multiprocessing.Event()
    writer = multiprocessing.Process(target=_churn, args=(m.info.id, 20000, 40000, 20, ready))
    writer.start()
    try:
        ready.wait(10)
        for _ in range(5):
            got = keys_of(m, batch_size=128)
            assert len(got) == len(set(got)), "a key came back twice in one pass"
            assert set(range(20000)) <= set(got)
            assert set(got) <= set(range(40000))
    finally:
        writer.join(60)
        assert writer.exitcode == 0


def test_concurrent_writer_during_drain_loses_nothing(maps):
    m = maps(MapType.HASH, max_entries=1 << 16)
    fill(m, np.arange(20000))
    ready = multiprocessing.Event()
    writer = multiprocessing.Process(target=_churn, args=(m.info.id, 20000, 40000, 10, ready))
    writer.start()
    drained = []
    try:
        ready.wait(10)
        drained = keys_of(m, delete=True, batch_size=256)
    finally:
        writer.join(60)
    assert writer.exitcode == 0
    left = keys_of(m)
    assert len(drained) == len(set(drained))
    assert set(range(20000)) <= set(drained) | set(left)
    assert not set(drained) & set(left) - set(range(20000, 40000))


@pytest.mark.parametrize("map_type", [MapType.PERCPU_HASH, MapType.PERCPU_ARRAY])
@pytest.mark.parametrize("value_size", [4, 8, 12])
def test_percpu_layout_round_trip_with_a_distinct_value_per_cpu(maps, map_type, value_size):
    m = maps(map_type, value_size=value_size, max_entries=16)
    stride = (value_size + 7) // 8 * 8
    assert m.info.value_stride == stride * NCPUS
    keys = np.arange(16, dtype=np.uint32)
    values = np.zeros((16, m.info.value_stride), np.uint8)
    for k in range(16):
        for cpu in range(NCPUS):
            values[k, cpu * stride:cpu * stride + value_size] = (k * 16 + cpu + 1) % 256
    assert writes.update(m, keys, values, 16) == 16
    got_keys, got_values = read_all(m, batch_size=5)
    order = np.argsort(got_keys.view(np.uint32).ravel())
    for k, row in zip(range(16), got_values[order]):
        for cpu in range(NCPUS):
            assert set(row[cpu * stride:cpu * stride + value_size]) == {(k * 16 + cpu + 1) % 256}
        # An independent path: the per-element lookup agrees, every CPU slot.
        assert m.lookup(int(k).to_bytes(4, "little")) == bytes(row)


@pytest.mark.parametrize("map_type", [MapType.ARRAY, MapType.PERCPU_ARRAY])
def test_arrays_refuse_delete_and_drain_with_enotsupp_translated(maps, map_type):
    m = maps(map_type, max_entries=8)
    rc, n, _ = raw_lookup(m, None, 8, delete=True)
    assert rc == -524 and n == 8  # count left as requested on the early error
    with pytest.raises(NotSupportedError) as exc:
        list(BatchCursor(m, delete=True))
    assert exc.value.errno == 524 and "ENOTSUPP" in str(exc.value)
    with pytest.raises(NotSupportedError):
        writes.delete(m, np.arange(2, dtype=np.uint32), 2)


@pytest.mark.parametrize("key_size", [1, 2])
def test_small_keys_use_a_four_byte_token(maps, key_size):
    entries = 256 if key_size == 1 else 1000
    m = maps(MapType.HASH, key_size=key_size, value_size=4, max_entries=entries)
    keys = np.arange(entries, dtype=np.uint8 if key_size == 1 else np.uint16)
    assert writes.update(m, keys, np.zeros(entries, np.uint32), entries) == entries
    c = BatchCursor(m, batch_size=16)
    assert c.token_size == 4
    # The kernel writes a 4-byte bucket index whatever the key size: guard bytes stay intact.
    guarded = ctypes.create_string_buffer(b"\xaa" * 4 + b"\0" * 4 + b"\xbb" * 4, 12)
    out = ctypes.cast(ctypes.addressof(guarded) + 4, ctypes.c_void_p)
    kbuf = ctypes.create_string_buffer(16 * key_size)
    vbuf = ctypes.create_string_buffer(16 * 4)
    n = ctypes.c_uint32(16)
    rc = libbpf.lib.bpf_map_lookup_batch(m.fd, None, out, kbuf, vbuf, ctypes.byref(n), None)
    assert rc in (0, -errno.ENOENT)
    assert guarded.raw[:4] == b"\xaa" * 4 and guarded.raw[8:12] == b"\xbb" * 4
    got = [bytes(b.keys[i * key_size:(i + 1) * key_size]) for b in c for i in range(b.count)]
    assert sorted(int.from_bytes(k, "little") for k in got) == list(range(entries))


def test_batch_size_must_not_be_negative_and_zero_asks_for_nothing(maps):
    m = maps()
    m.update(b"\1\0\0\0", b"\2\0\0\0")
    with pytest.raises(InputError):
        BatchCursor(m, batch_size=-1)
    assert list(BatchCursor(m, batch_size=0)) == list(BatchCursor(m, delete=True, batch_size=0))
    assert list(BatchCursor(m, batch_size=0)) == [] and m.lookup(b"\1\0\0\0") is not None


def bpftool_dump(map_id: int):
    out = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(map_id)],
                         check=True, capture_output=True, text=True).stdout
    # Slots without a value (a devmap's empty indexes) come as {"error": ...}: not elements.
    return {(bytes(int(b, 16) for b in e["key"]), bytes(int(b, 16) for b in e["value"]))
            for e in json.loads(out) if isinstance(e["value"], list)}


def test_unsupported_type_falls_back_to_per_key_walk_matching_bpftool(maps):
    m = maps(MapType.DEVMAP, key_size=4, value_size=4, max_entries=64)
    rc, _, _ = raw_lookup(m, None, 8)
    assert rc == -524
    for k in range(0, 64, 3):
        m.update(k.to_bytes(4, "little"), (1).to_bytes(4, "little"))  # ifindex of lo
    keys, values = read_all(m, batch_size=4)
    ours = {(bytes(k), bytes(v)) for k, v in zip(keys, values)}
    assert len(ours) == len(range(0, 64, 3))
    assert ours == bpftool_dump(m.info.id)


def test_forced_fallback_on_a_hash_matches_the_batch_path(maps):
    m = maps(MapType.HASH, max_entries=4096)
    fill(m, np.arange(3000))
    batch = {(bytes(k), bytes(v)) for k, v in zip(*read_all(m))}
    walk = {(bytes(k), bytes(v)) for k, v in zip(*read_all(m, batch_size=100, force_fallback=True))}
    assert batch == walk and len(walk) == 3000
    drained = keys_of(m, delete=True, batch_size=100, force_fallback=True)
    assert sorted(drained) == list(range(3000)) and keys_of(m) == []


def test_hash_of_maps_yields_inner_ids_and_takes_fds(maps):
    inner = [maps(MapType.ARRAY, max_entries=4) for _ in range(3)]
    outer = maps(MapType.HASH_OF_MAPS, max_entries=8, inner_map_fd=inner[0].fd)
    keys = np.arange(3, dtype=np.uint32)
    fds = np.array([m.fd for m in inner], dtype=np.uint32)
    assert writes.update(outer, keys, fds, 3) == 3
    got_keys, got_values = read_all(outer)
    ids = dict(zip(got_keys.view(np.uint32).ravel(), got_values.view(np.uint32).ravel()))
    assert ids == {i: inner[i].info.id for i in range(3)}


def test_array_of_maps_with_empty_slots_terminates(maps):
    inner = maps(MapType.ARRAY, max_entries=4)
    outer = maps(MapType.ARRAY_OF_MAPS, max_entries=8, inner_map_fd=inner.fd)
    outer.update((5).to_bytes(4, "little"), inner.fd.to_bytes(4, "little"))
    keys, values = read_all(outer, batch_size=2)
    got = dict(zip(keys.view(np.uint32).ravel(), values.view(np.uint32).ravel()))
    assert got == {5: inner.info.id}
    # Its slots can be emptied (unlike a plain array's): delete falls back to per-key.
    assert writes.delete(outer, np.array([5, 6], np.uint32), 2) == writes.DeleteResult(1, 1)
    assert len(read_all(outer)[0]) == 0


def test_token_reuse_across_maps_refused_and_fresh_cursor_restarts(maps):
    a, b = maps(), maps()
    fill(a, np.arange(100))
    fill(b, np.arange(100))
    c = BatchCursor(a, batch_size=10)
    first = next(iter(c))
    seen = [int.from_bytes(first.keys[i * 4:(i + 1) * 4], "little") for i in range(first.count)]
    with pytest.raises(InputError):
        BatchCursor(b, resume=c.token())
    seen += [int.from_bytes(batch.keys[i * 4:(i + 1) * 4], "little")
             for batch in BatchCursor(a, resume=c.token(), batch_size=10)
             for i in range(batch.count)]
    assert sorted(seen) == list(range(100)), "resumed pass lost or repeated keys"
    done = BatchCursor(a)
    assert sum(x.count for x in done) == 100 and done.done
    assert sum(x.count for x in BatchCursor(a)) == 100


def test_sparse_huge_map_one_pass(maps):
    m = maps(MapType.HASH, max_entries=1 << 22)
    fill(m, np.arange(0, 10_000_000, 1_000_000))
    assert sorted(keys_of(m)) == list(range(0, 10_000_000, 1_000_000))


def test_empty_writes_are_no_ops(maps):
    m = maps()
    none = np.zeros((0, 4), np.uint8)
    assert writes.update(m, none, none, 0) == 0
    assert writes.delete(m, none, 0) == writes.DeleteResult(0, 0)


@pytest.mark.parametrize("map_type,value_size,max_entries",
                         [(MapType.QUEUE, 4, 16), (MapType.RINGBUF, 0, 4096)])
def test_keyless_maps_are_refused_with_a_reason(maps, map_type, value_size, max_entries):
    m = maps(map_type, key_size=0, value_size=value_size, max_entries=max_entries)
    with pytest.raises(NotSupportedError) as exc:
        BatchCursor(m)
    assert f"map {m.info.id}" in str(exc.value) and f"{map_type.label} maps: " in str(exc.value)


def test_per_key_walk_resumes_from_its_token(maps):
    m = maps(MapType.HASH, max_entries=256)
    fill(m, np.arange(100))
    c = BatchCursor(m, batch_size=30, force_fallback=True)
    first = next(iter(c))
    later = BatchCursor(m, resume=c.token(), batch_size=30, force_fallback=True)
    keys = [bytes(first.keys[i * 4:(i + 1) * 4]) for i in range(first.count)]
    keys += [bytes(b.keys[i * 4:(i + 1) * 4]) for b in later for i in range(b.count)]
    assert sorted(int.from_bytes(k, "little") for k in keys) == list(range(100))


@pytest.mark.parametrize("bad", [0, -1])
def test_writes_refuse_a_batch_size_that_would_hang_or_overrun(maps, bad):
    m = maps()
    keys = np.arange(4, dtype=np.uint32)
    with pytest.raises(InputError, match="batch_size"):
        writes.update(m, keys, keys, 4, batch_size=bad)
    with pytest.raises(InputError, match="batch_size"):
        writes.delete(m, keys, 4, batch_size=bad)
    assert keys_of(m) == []


def test_non_map_fd_is_refused(maps):
    from bpfbatch.errors import NotFoundError

    with open("/dev/null") as f, pytest.raises(NotFoundError, match="not a BPF map"):
        Map(f.fileno(), owned=False)
