"""The kernel's batch selftests, ported onto the cursor: an outside check of it.

``tools/testing/selftests/bpf/map_tests/`` ``htab_map_batch_ops.c`` (hash and per-CPU hash),
``array_map_batch_ops.c`` (array and per-CPU array) and ``lpm_trie_map_batch_ops.c``: the same
maps (10 entries), the same keys and values, the same steps (every batch size from 1 to 9),
and every ``CHECK`` they make, asked of ``BatchCursor`` / ``writes.update`` / ``writes.delete`` instead of
raw libbpf calls. Two differences, both stricter: where the selftests give up on a step that
hits ENOSPC (``nospace_err``), the cursor must grow and succeed; and each pass must hand out
every key exactly once, not only the right total.

Assertion sites ported (each C ``CHECK`` that tests the map, not ``malloc``): htab 17,
array 8, lpm_trie 10 — 35, each one below marked with the selftest's label.
"""

from __future__ import annotations

import numpy as np
import pytest

from bpfbatch import Map
from bpfbatch._sys.abi import BPF_F_NO_PREALLOC, MapType
from bpfbatch._sys.libbpf import num_possible_cpus
from bpfbatch.map import writes
from bpfbatch.map.cursor import BatchCursor

MAX_ENTRIES = 10
STEPS = range(1, MAX_ENTRIES)


def collect(m: Map, *, delete: bool = False, batch_size: int) -> tuple[np.ndarray, np.ndarray, list]:
    """Every key and value one pass hands out, and the batch sizes it came in."""
    keys, values, counts = [], [], []
    for batch in BatchCursor(m, delete=delete, batch_size=batch_size):
        keys.append(bytes(batch.keys))
        values.append(bytes(batch.values))
        counts.append(batch.count)
    key_rows = np.frombuffer(b"".join(keys), np.uint8).reshape(-1, m.info.key_size)
    value_rows = np.frombuffer(b"".join(values), np.uint8).reshape(-1, m.info.value_stride)
    return key_rows, value_rows, counts


def per_cpu(values: np.ndarray, dtype: str, cpus: int, stride: int) -> np.ndarray:
    """``(n, cpus)`` scalars of per-CPU rows (``stride`` bytes per CPU)."""
    size = np.dtype(dtype).itemsize
    return np.stack([values[:, c * stride:c * stride + size].copy().view(dtype)[:, 0]
                     for c in range(cpus)], axis=1)


# -- htab_map_batch_ops.c ------------------------------------------------------------------

class Htab:
    """``int`` keys ``i + 1`` and values ``i + 2`` (``+ cpu`` per CPU on a per-CPU map)."""

    def __init__(self, map_type: MapType):
        self.m = Map.create(map_type, 4, 4, MAX_ENTRIES, name="hash_map")
        self.cpus = num_possible_cpus() if self.m.info.percpu else 1

    def update(self) -> None:
        keys = np.arange(1, MAX_ENTRIES + 1, dtype=np.int32)
        stride = self.m.info.value_stride // self.cpus
        values = np.zeros((MAX_ENTRIES, self.cpus * stride // 4), np.int32)
        for cpu in range(self.cpus):
            values[:, cpu * stride // 4] = keys + 1 + cpu
        # CHECK "bpf_map_update_batch()"
        assert writes.update(self.m, keys, values, MAX_ENTRIES) == MAX_ENTRIES

    def verify(self, keys: np.ndarray, values: np.ndarray) -> None:
        k = keys.copy().view(np.int32)[:, 0]
        v = per_cpu(values, "<i4", self.cpus, self.m.info.value_stride // self.cpus)
        # CHECK "key/value checking": value (of CPU j) == key + 1 + j
        assert (v == (k[:, None] + 1 + np.arange(self.cpus))).all()
        # CHECK "visited checking": every key, once
        assert sorted(k.tolist()) == list(range(1, MAX_ENTRIES + 1))


@pytest.mark.parametrize("map_type", [MapType.HASH, MapType.PERCPU_HASH])
def test_htab_map_batch_ops(map_type):
    t = Htab(map_type)
    with t.m as m:
        # test 1: lookup/delete an empty hash table, -ENOENT. CHECK "empty map"
        assert collect(m, delete=True, batch_size=MAX_ENTRIES)[2] == []
        t.update()
        # test 2: lookup/delete with count = 0, success. CHECK "count = 0"
        assert collect(m, delete=True, batch_size=0)[2] == []
        assert m.next_key(None) is not None  # (nothing was taken)
        # test 3: lookup/delete with count = max_entries. CHECK "count = max_entries" (twice)
        keys, values, counts = collect(m, delete=True, batch_size=MAX_ENTRIES)
        assert counts == [MAX_ENTRIES]
        t.verify(keys, values)
        # CHECK "bpf_map_get_next_key()": the map is empty
        assert m.next_key(None) is None
        # test 4: lookup/delete in a loop with various steps; CHECK "check total_success"
        for step in STEPS:
            t.update()
            keys, values, counts = collect(m, batch_size=step)
            # CHECK "lookup with steps" (no error but ENOENT; no ENOSPC give-up here) and
            # CHECK "lookup with steps" total == max_entries
            assert sum(counts) == MAX_ENTRIES and max(counts) <= MAX_ENTRIES
            t.verify(keys, values)
            # CHECK "delete batch" and "delete with steps": step keys at a time
            result = writes.delete(m, keys, MAX_ENTRIES, batch_size=step)
            assert (result.deleted, result.missing) == (MAX_ENTRIES, 0)
            # CHECK "bpf_map_get_next_key()" == ENOENT
            assert m.next_key(None) is None
            t.update()
            keys, values, counts = collect(m, delete=True, batch_size=step)
            # CHECK "lookup with steps" (lookup_and_delete) and "lookup/delete with steps"
            assert sum(counts) == MAX_ENTRIES
            t.verify(keys, values)
            # CHECK "bpf_map_get_next_key()"
            assert m.next_key(None) is None


# -- array_map_batch_ops.c -----------------------------------------------------------------

@pytest.mark.parametrize("map_type", [MapType.ARRAY, MapType.PERCPU_ARRAY])
def test_array_map_batch_ops(map_type):
    with Map.create(map_type, 4, 8, MAX_ENTRIES, name="array_map") as m:
        cpus = num_possible_cpus() if m.info.percpu else 1
        stride = m.info.value_stride // cpus
        assert cpus > 0  # CHECK "nr_cpus checking"
        keys = np.arange(MAX_ENTRIES, dtype=np.int32)
        values = np.zeros((MAX_ENTRIES, cpus * stride // 8), np.int64)
        for cpu in range(cpus):
            values[:, cpu * stride // 8] = keys + 1 + cpu

        def verify(k: np.ndarray, v: np.ndarray) -> None:
            k = k.copy().view(np.int32)[:, 0]
            # CHECK "key/value checking" (per-CPU and plain)
            assert (per_cpu(v, "<i8", cpus, stride) == k[:, None] + 1 + np.arange(cpus)).all()
            # CHECK "visited checking"
            assert sorted(k.tolist()) == list(range(MAX_ENTRIES))

        for step in STEPS:  # CHECK "check total_success"
            # CHECK "bpf_map_update_batch()"
            assert writes.update(m, keys, values, MAX_ENTRIES) == MAX_ENTRIES
            found_keys, found_values, counts = collect(m, batch_size=step)
            # CHECK "lookup with steps" twice: no error but the end, and the total
            assert sum(counts) == MAX_ENTRIES
            # the generic op fills exactly `step` per call, the last call the rest
            assert counts == [step] * (MAX_ENTRIES // step) + (
                [MAX_ENTRIES % step] if MAX_ENTRIES % step else [])
            verify(found_keys, found_values)


# -- lpm_trie_map_batch_ops.c ----------------------------------------------------------------

LPM_KEY = np.dtype([("prefix", "<u4"), ("ipv4", "u1", 4)])


def test_lpm_trie_map_batch_ops():
    with Map.create(MapType.LPM_TRIE, LPM_KEY.itemsize, 4, MAX_ENTRIES, name="lpm_trie_map",
                    flags=BPF_F_NO_PREALLOC) as m:
        keys = np.zeros(MAX_ENTRIES, LPM_KEY)
        keys["prefix"] = 32
        keys["ipv4"] = [[192, 168, 1, i + 1] for i in range(MAX_ENTRIES)]  # 192.168.1.(i+1)
        values = np.arange(1, MAX_ENTRIES + 1, dtype=np.int32)

        def verify(k: np.ndarray, v: np.ndarray) -> None:
            found = k.copy().view(LPM_KEY)[:, 0]
            # CHECK "sscanf()": the address is 192.168.1.x
            assert (found["ipv4"][:, :3] == [192, 168, 1]).all()
            # CHECK "key/value checking": lower byte == value
            assert (found["ipv4"][:, 3] == v.copy().view("<i4")[:, 0]).all()
            # CHECK "visited checking"
            assert sorted(found["ipv4"][:, 3].tolist()) == list(range(1, MAX_ENTRIES + 1))

        for step in STEPS:  # CHECK "check total_success"
            # CHECK "bpf_map_update_batch()"
            assert writes.update(m, keys, values, MAX_ENTRIES) == MAX_ENTRIES
            found_keys, found_values, counts = collect(m, batch_size=step)
            # CHECK "lookup with steps" twice
            assert sum(counts) == MAX_ENTRIES
            verify(found_keys, found_values)
            # CHECK "delete batch" and "delete with steps"
            result = writes.delete(m, found_keys, MAX_ENTRIES, batch_size=step)
            assert (result.deleted, result.missing) == (MAX_ENTRIES, 0)
            # CHECK "bpf_map_get_next_key()": empty
            assert m.next_key(None) is None
