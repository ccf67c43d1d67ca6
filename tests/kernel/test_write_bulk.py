"""Write side on the real kernel: partial updates with exact counts, delete skipping missing
keys, arrays, LRU eviction, BPF_F_LOCK, clear per map type, drain that never loses data, and
the --if-absent/--if-present load semantics."""

from __future__ import annotations

import ctypes
import errno
import functools
import multiprocessing
import os
import subprocess
import sys

import numpy as np
import pytest

from bpfbatch import Map
from bpfbatch._sys import abi, libbpf
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.delivery import DeliveryError
from bpfbatch.errors import InputError, NotSupportedError, PartialError
from bpfbatch.map import cursor, whole, writes
from bpfbatch.map.whole import Existing, LoadError

NCPUS = libbpf.num_possible_cpus()


@pytest.fixture
def maps(maps):
    """The shared map factory, with 8-byte values and this module's map name by default."""
    return functools.partial(maps, value_size=8, name="bb_write")


def u32(*values) -> np.ndarray:
    return np.array(values, dtype=np.uint32)


def load_u64(m: Map, keys, values=None, **kw) -> whole.LoadResult:
    keys = np.asarray(keys, dtype=np.uint32)
    values = np.asarray(keys if values is None else values, dtype=np.uint64)
    return whole.load(m, keys, values, len(keys), **kw)


def contents(m: Map) -> dict[int, int]:
    keys, values = cursor.read_all(m)
    return {int.from_bytes(k.tobytes(), "little"): int.from_bytes(v.tobytes()[:8], "little")
            for k, v in zip(keys, values)}


def test_partial_update_e2big_reports_exact_count_and_failing_key(maps):
    m = maps(max_entries=8)
    with pytest.raises(PartialError) as exc:
        load_u64(m, range(100, 112), batch_size=5)
    assert exc.value.errno == errno.E2BIG and exc.value.applied == 8
    assert "8 of 12 entries applied" in str(exc.value)
    assert (108).to_bytes(4, "little").hex() in str(exc.value)  # the failing key
    assert sorted(contents(m)) == list(range(100, 108))


def test_array_index_past_max_entries_is_e2big_with_count(maps):
    m = maps(MapType.ARRAY, max_entries=4)
    with pytest.raises(PartialError) as exc:
        load_u64(m, [0, 1, 2, 9, 3])
    assert (exc.value.errno, exc.value.applied) == (errno.E2BIG, 3)


def test_noexist_flag_refused_as_not_batchable(maps):
    m = maps()
    with pytest.raises(NotSupportedError, match="not supported by batch update"):
        writes.update(m, u32(1), np.zeros(1, np.uint64), 1, elem_flags=abi.BPF_NOEXIST)


def test_delete_skips_a_missing_key_and_deletes_the_rest(maps):
    m = maps()
    load_u64(m, range(10))
    # The raw kernel call stops at the missing key with ENOENT and count = its index.
    keys = u32(0, 1, 50, 2, 3)
    n = ctypes.c_uint32(5)
    rc = libbpf.lib.bpf_map_delete_batch(m.fd, keys.ctypes.data, ctypes.byref(n), None)
    assert (rc, n.value) == (-errno.ENOENT, 2)
    result = writes.delete(m, u32(2, 3, 77, 4, 5, 88), 6)
    assert (result.deleted, result.missing) == (4, 2)
    assert sorted(contents(m)) == [6, 7, 8, 9]


@pytest.mark.parametrize("map_type", [MapType.ARRAY, MapType.PERCPU_ARRAY])
def test_arrays_refuse_delete_and_clear_zeroes_them(maps, map_type):
    m = maps(map_type, value_size=12, max_entries=50)
    ones = np.full((50, m.info.value_stride), 0xAB, np.uint8)
    writes.update(m, np.arange(50, dtype=np.uint32), ones, 50)
    with pytest.raises(NotSupportedError) as exc:  # refused before the kernel's ENOTSUPP
        writes.delete(m, u32(1), 1)
    assert f"{map_type.label} maps: elements always exist: clear zeroes them" in str(exc.value)
    assert whole.clear(m, batch_size=16) == 50
    keys, values = cursor.read_all(m)
    assert len(keys) == 50 and not values.any()


def test_array_if_absent_refused(maps):
    m = maps(MapType.ARRAY, max_entries=4)
    with pytest.raises(InputError, match="always exist"):
        load_u64(m, [1], only=Existing.ABSENT)


def test_lru_update_past_capacity_evicts_and_counts_every_write(maps):
    m = maps(MapType.LRU_HASH, max_entries=256, flags=abi.BPF_F_NO_COMMON_LRU)
    result = load_u64(m, range(2000), batch_size=100)
    assert result.applied == 2000
    left = contents(m)
    assert 0 < len(left) <= 256 * NCPUS
    assert 1999 in left and left[1999] == 1999  # the latest write survives eviction
    assert all(v == k for k, v in left.items())


@pytest.mark.parametrize("map_type", [MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH,
                                      MapType.LRU_PERCPU_HASH])
def test_clear_hash_family(maps, map_type):
    m = maps(map_type, max_entries=4096)
    values = np.zeros((3000, m.info.value_stride), np.uint8)
    writes.update(m, np.arange(3000, dtype=np.uint32), values, 3000)
    assert whole.clear(m, batch_size=64) == 3000
    assert contents(m) == {}
    assert whole.clear(m) == 0


def test_clear_lpm_trie_with_batch_delete(maps):
    m = maps(MapType.LPM_TRIE, key_size=8, max_entries=512, flags=abi.BPF_F_NO_PREALLOC)
    keys = np.zeros((300, 2), np.uint32)
    keys[:, 0] = 32  # prefix length
    keys[:, 1] = np.arange(300, dtype=">u4").view(np.uint32)  # distinct addresses
    writes.update(m, keys, np.zeros(300, np.uint64), 300)
    assert whole.clear(m, batch_size=32) == 300
    assert cursor.read_all(m)[0].shape[0] == 0


def test_clear_map_of_maps_empties_every_slot_key_by_key(maps):
    """Map-in-map types have no batch delete: the per-key path. (Whether it fetches the next
    key before deleting cannot show here: an array's next key does not depend on deletes.)"""
    inner = [maps(MapType.ARRAY, value_size=4, max_entries=1) for _ in range(3)]
    outer = maps(MapType.ARRAY_OF_MAPS, value_size=4, max_entries=8, inner_map_fd=inner[0].fd)
    for slot, child in zip((1, 4, 6), inner):
        outer.update(slot.to_bytes(4, "little"), child.fd.to_bytes(4, "little"))
    assert whole.clear(outer) == 3
    assert all(outer.lookup(i.to_bytes(4, "little")) is None for i in range(8))


def _cgroup2_mount() -> str | None:
    with open("/proc/self/mounts") as mounts:
        return next((line.split()[1] for line in mounts if line.split()[2] == "cgroup2"), None)


def test_clear_a_map_whose_values_cannot_be_looked_up(maps):
    """A cgroup array refuses lookups from a syscall (ENOTSUPP): clear needs only keys."""
    mount = _cgroup2_mount()
    if mount is None:
        pytest.skip("no cgroup2 mount")
    m = maps(MapType.CGROUP_ARRAY, value_size=4, max_entries=4)
    cgroup = os.open(mount, os.O_RDONLY)
    try:
        for slot in (1, 3):
            m.update(slot.to_bytes(4, "little"), cgroup.to_bytes(4, "little"))
    finally:
        os.close(cgroup)
    assert whole.clear(m) == 2
    assert not any(m.delete(i.to_bytes(4, "little")) for i in range(4))  # all were empty


# -- BPF_F_LOCK ----------------------------------------------------------------------------


def test_f_lock_update_and_lookup_on_a_spin_lock_map(maps):
    with BtfBuilder() as b:
        u32 = b.integer("__u32", 4)
        lock = b.struct("bpf_spin_lock", [("val", u32)])
        value = b.struct("val", [("lock", lock), ("data", u32)])
        m = maps(MapType.HASH, value_size=8, max_entries=64, btf_fd=b.load(),
                 btf_key_type_id=u32, btf_value_type_id=value)
    values = np.zeros((10, 2), np.uint32)
    values[:, 1] = np.arange(10) * 7
    result = whole.load(m, np.arange(10, dtype=np.uint32), values, 10, elem_flags=abi.BPF_F_LOCK)
    assert result.applied == 10
    keys, got = cursor.read_all(m, elem_flags=abi.BPF_F_LOCK)
    data = {int(k.view(np.uint32)[0]): int(v.view(np.uint32)[1]) for k, v in zip(keys, got)}
    assert data == {i: i * 7 for i in range(10)}
    plain = maps()
    with pytest.raises(PartialError) as exc:
        load_u64(plain, [1], elem_flags=abi.BPF_F_LOCK)
    assert exc.value.errno == errno.EINVAL and exc.value.applied == 0


# -- load --if-absent / --if-present -------------------------------------------------------


@pytest.mark.parametrize("per_key", [False, True])
def test_if_absent_keeps_existing_values_and_first_duplicate_wins(maps, per_key):
    m = maps()
    load_u64(m, [1, 2, 3], [10, 20, 30])
    result = load_u64(m, [2, 4, 5, 4], [0, 40, 50, 99], only=Existing.ABSENT, per_key=per_key)
    assert (result.applied, result.skipped) == (2, 2)
    assert contents(m) == {1: 10, 2: 20, 3: 30, 4: 40, 5: 50}


@pytest.mark.parametrize("per_key", [False, True])
def test_if_present_only_overwrites_existing_keys(maps, per_key):
    m = maps()
    load_u64(m, [1, 2, 3], [10, 20, 30])
    result = load_u64(m, [2, 4, 3], [21, 40, 31], only=Existing.PRESENT, per_key=per_key)
    assert (result.applied, result.skipped) == (2, 1)
    assert contents(m) == {1: 10, 2: 21, 3: 31}


@pytest.mark.parametrize("only", [Existing.ABSENT, Existing.PRESENT])
def test_if_absent_if_present_with_keys_no_integer_fits(maps, only):
    """12-byte keys take the byte-row comparison, not the integer one."""
    m = maps(key_size=12)
    rows = lambda *ids: np.array([[i, 7, i] for i in ids], np.uint32)  # noqa: E731
    writes.update(m, rows(1, 2), np.array([10, 20], np.uint64), 2)
    result = whole.load(m, rows(2, 3, 3, 1), np.array([21, 30, 31, 11], np.uint64), 4, only=only)
    keys, values = cursor.read_all(m)
    got = {int(k.view(np.uint32)[0]): int(v.view(np.uint64)[0]) for k, v in zip(keys, values)}
    if only is Existing.ABSENT:
        assert (result.applied, result.skipped) == (1, 3) and got == {1: 10, 2: 20, 3: 30}
    else:
        assert (result.applied, result.skipped) == (2, 2) and got == {1: 11, 2: 21}


def test_if_absent_partial_failure_names_key(maps):
    m = maps(max_entries=4)
    load_u64(m, [1, 2])
    with pytest.raises(LoadError) as exc:
        load_u64(m, [1, 3, 4, 5, 6], only=Existing.ABSENT)
    assert exc.value.applied == 2 and exc.value.key == (5).to_bytes(4, "little")
    assert exc.value.index == 3  # among the caller's records, not the filtered ones


# -- drain ---------------------------------------------------------------------------------


def _writer(map_id: int, lo: int, hi: int, ready, drained_one) -> None:
    """Write keys ``lo..hi-1``. Halfway, wait until the drain has taken one of them, so the
    two provably overlap; exit code 3 if that never happens."""
    m = Map.open_id(map_id)
    ready.set()
    for k in range(lo, hi):
        if k == (lo + hi) // 2 and not drained_one.wait(30):
            sys.exit(3)
        m.update(k.to_bytes(4, "little"), k.to_bytes(8, "little"))


def test_drain_with_concurrent_writer_loses_nothing_and_repeats_nothing(maps):
    m = maps(max_entries=1 << 16)
    load_u64(m, range(20000))
    ready, drained_one = multiprocessing.Event(), multiprocessing.Event()
    writer = multiprocessing.Process(target=_writer,
                                     args=(m.info.id, 20000, 40000, ready, drained_one))
    writer.start()
    drained: list[int] = []

    def sink(batch):
        keys = np.frombuffer(batch.keys, np.uint32)
        values = np.frombuffer(batch.values, np.uint64)
        assert (keys == values).all()
        drained.extend(keys.tolist())
        if (keys >= 20000).any():
            drained_one.set()

    try:
        assert ready.wait(10), "the writer did not start"
        while writer.is_alive():  # the writer cannot finish before a drain took its keys
            whole.drain(m, sink, batch_size=256)
    finally:
        drained_one.set()
        writer.join(60)
    assert writer.exitcode == 0
    assert any(k >= 20000 for k in drained), "no key of the writer was drained"
    left = contents(m)
    assert len(drained) == len(set(drained)), "an entry was drained twice"
    assert not set(drained) & set(left)
    assert set(drained) | set(left) == set(range(40000))


def test_drain_sink_failure_puts_the_batch_back(maps):
    m = maps(max_entries=4096)
    load_u64(m, range(1000))
    delivered: list[int] = []

    def sink(batch):
        if len(delivered) >= 300:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        delivered.extend(np.frombuffer(batch.keys, np.uint32).tolist())

    with pytest.raises(DeliveryError) as exc:
        whole.drain(m, sink, batch_size=100)
    assert exc.value.errno == errno.ENOSPC and exc.value.delivered == len(delivered)
    assert "put back" in str(exc.value)
    left = contents(m)
    assert set(left) | set(delivered) == set(range(1000)) and not set(left) & set(delivered)
    assert all(v == k for k, v in left.items())


def test_put_back_keeps_a_value_a_writer_wrote_meanwhile_and_counts_what_it_could_not(maps):
    """The put-back rule: BPF_NOEXIST, so a key re-created since the drain keeps the newer
    value (superseded, counted); a record the full map refuses is counted as lost."""
    m = maps(max_entries=4)
    load_u64(m, range(4))
    keys, values = cursor.read_all(m, delete=True)
    m.update((2).to_bytes(4, "little"), (99).to_bytes(8, "little"))   # a writer re-creates 2
    m.update((7).to_bytes(4, "little"), (7).to_bytes(8, "little"))    # and inserts 7
    back = whole.put_back(m, cursor.Batch(len(keys), memoryview(keys.tobytes()),
                                          memoryview(values.tobytes())))
    assert (back.restored, back.superseded, back.lost) == (2, 1, 1)
    assert back.errno == errno.E2BIG
    assert contents(m)[2] == 99 and len(contents(m)) == 4
    assert "1 not put back because a writer re-created the key" in str(back)
    assert "1 could not be put back (E2BIG) and are lost" in str(back)


def test_drain_into_a_pipe_that_closes_midway_loses_nothing(maps):
    m = maps(max_entries=1 << 17)
    load_u64(m, range(100000))  # ~600 KB of lines: far more than a pipe buffer holds
    reader = subprocess.Popen(["head", "-c", "1000"], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL)
    written: list[int] = []

    def sink(batch):
        keys = np.frombuffer(batch.keys, np.uint32)
        reader.stdin.write("".join(f"{k}\n" for k in keys.tolist()).encode())
        reader.stdin.flush()
        written.extend(keys.tolist())

    try:
        with pytest.raises(DeliveryError) as exc:
            whole.drain(m, sink, batch_size=64)
    finally:
        reader.wait(10)
        try:
            reader.stdin.close()
        except BrokenPipeError:
            pass
    assert exc.value.errno == errno.EPIPE and exc.value.delivered == len(written)
    left = contents(m)
    assert not set(left) & set(written)
    assert set(left) | set(written) == set(range(100000))


def test_drain_refuses_map_in_map(maps):
    inner = maps(MapType.ARRAY, value_size=4, max_entries=1)
    outer = maps(MapType.HASH_OF_MAPS, value_size=4, max_entries=8, inner_map_fd=inner.fd)
    with pytest.raises(NotSupportedError, match="put back"):
        whole.drain(outer, lambda batch: None)


@pytest.mark.parametrize("map_type", [MapType.QUEUE, MapType.STACK])
def test_drain_of_a_queue_or_stack_puts_a_failed_batch_back(maps, map_type):
    """Pop order out; a failed batch pushed back: a stack gets its order again, a queue gets
    the batch behind what is still queued (the README's promise)."""
    m = maps(map_type, key_size=0, value_size=8, max_entries=16)
    for i in range(10):
        m.update(None, i.to_bytes(8, "little"))
    order = list(range(10)) if map_type == MapType.QUEUE else list(range(9, -1, -1))
    delivered: list[int] = []

    def sink(batch):
        values = np.frombuffer(batch.values, np.uint64).tolist()
        if delivered:
            raise OSError(errno.EPIPE, os.strerror(errno.EPIPE))
        delivered.extend(values)

    with pytest.raises(DeliveryError) as exc:
        whole.drain(m, sink, batch_size=3)
    assert delivered == order[:3] and exc.value.restored == 3
    left = []
    while (value := m.pop()) is not None:
        left.append(int.from_bytes(value, "little"))
    if map_type == MapType.STACK:
        assert left == order[3:]
    else:
        assert left == order[6:] + order[3:6]
