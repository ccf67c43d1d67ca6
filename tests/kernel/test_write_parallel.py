"""Writers side by side (``writes.update(jobs=N)``, ``load --jobs``) on the real kernel: the
end state must be the one a single writer leaves — the last record of each key wins, checked
against a Python oracle and bpftool — and a write the kernel stops part-way must count
exactly what went in and say that it is not a prefix of the input."""

from __future__ import annotations

import errno
import functools
import json
import subprocess
import sys

import numpy as np
import pytest

from bpfbatch._sys import libbpf
from bpfbatch._sys.abi import MapType
from bpfbatch.errors import PartialError
from bpfbatch.map import cursor, writes
from bpfbatch.map.whole import LoadError, load

NCPUS = libbpf.num_possible_cpus()


@pytest.fixture
def maps(maps):
    return functools.partial(maps, value_size=8, name="bb_wpar")


def contents(m) -> dict[int, bytes]:
    keys, values = cursor.read_all(m)
    return {int.from_bytes(k.tobytes(), "little"): v.tobytes() for k, v in zip(keys, values)}


def records(m, n: int, distinct: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` records over ``distinct`` keys in random order, each key repeated; record ``i``'s
    value is ``i`` on every CPU, so the survivor of a key tells which record it came from."""
    keys = np.random.default_rng(seed).integers(0, distinct, n, dtype=np.uint32)
    per_cpu = m.info.value_stride // 8
    values = np.repeat(np.arange(n, dtype=np.uint64), per_cpu).reshape(n, per_cpu)
    return keys, values


@pytest.mark.parametrize("map_type", [MapType.HASH, MapType.PERCPU_HASH, MapType.ARRAY,
                                      MapType.PERCPU_ARRAY])
@pytest.mark.parametrize("jobs", [2, 3])
def test_writers_side_by_side_keep_the_last_record_of_every_key(maps, map_type, jobs):
    distinct, n = 20_000, 150_000
    m = maps(map_type, max_entries=distinct)
    keys, values = records(m, n, distinct, seed=jobs)
    assert writes.update(m, keys, values, n, batch_size=1000, jobs=jobs) == n
    last = {}
    for key, index in zip(keys.tolist(), range(n)):
        last[key] = index
    got = contents(m)
    expected = {key: values[index].tobytes() for key, index in last.items()}
    if map_type in (MapType.ARRAY, MapType.PERCPU_ARRAY):  # never written: zero
        expected = {k: expected.get(k, bytes(m.info.value_stride)) for k in range(distinct)}
    assert got == expected


def test_writers_side_by_side_agree_with_bpftool(maps):
    distinct, n = 5_000, 80_000
    m = maps(MapType.HASH, max_entries=distinct)
    keys, values = records(m, n, distinct, seed=7)
    writes.update(m, keys, values, n, batch_size=512, jobs=2)
    dumped = json.loads(subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m.info.id)],
                                       capture_output=True, text=True, check=True).stdout)
    shown = {bytes(int(b, 16) for b in e["key"]): bytes(int(b, 16) for b in e["value"])
             for e in dumped}
    last = {}
    for key, index in zip(keys.tolist(), range(n)):
        last[key] = index
    assert shown == {key.to_bytes(4, "little"): values[index].tobytes()
                     for key, index in last.items()}


def test_update_items_with_writers_side_by_side(maps):
    m = maps(MapType.HASH, max_entries=1000)
    pairs = [((i % 700).to_bytes(4, "little"), i.to_bytes(8, "little")) for i in range(90_000)]
    assert m.update_items(pairs, batch_size=256, jobs=2) == len(pairs)
    assert contents(m) == {int.from_bytes(k, "little"): v for k, v in dict(pairs).items()}


def test_a_full_map_stops_every_writer_and_counts_exactly_what_went_in(maps):
    room, n = 30_000, 100_000
    m = maps(MapType.HASH, max_entries=room)
    keys = np.random.default_rng(3).permutation(n).astype(np.uint32)  # distinct
    values = keys.astype(np.uint64)
    with pytest.raises(PartialError) as caught:
        writes.update(m, keys, values, n, batch_size=2048, jobs=2)
    exc = caught.value
    got = contents(m)
    assert exc.errno == errno.E2BIG and not exc.prefix
    assert exc.applied == len(got) <= room
    assert int(keys[exc.failed]) not in got
    assert all(int.from_bytes(v, "little") == k for k, v in got.items())


def test_a_load_that_fails_with_writers_side_by_side_names_the_failing_record(maps):
    m = maps(MapType.HASH, max_entries=20_000)
    keys = np.arange(100_000, dtype=np.uint32)[::-1].copy()
    with pytest.raises(LoadError) as caught:
        load(m, keys, keys.astype(np.uint64), len(keys), batch_size=4096, jobs=2)
    exc = caught.value
    assert exc.key == keys[exc.index].tobytes() and exc.index == exc.failed
    assert "not the first" in str(exc) and f"{exc.applied} of 100000 entries" in str(exc)
    assert len(contents(m)) == exc.applied


def test_one_writer_still_fails_at_a_prefix(maps):
    m = maps(MapType.HASH, max_entries=20_000)
    keys = np.arange(100_000, dtype=np.uint32)
    with pytest.raises(LoadError) as caught:
        load(m, keys, keys.astype(np.uint64), len(keys), batch_size=4096, jobs=1)
    exc = caught.value
    assert exc.prefix and exc.applied == exc.index == 20_000
    assert sorted(contents(m)) == list(range(20_000))
    assert "not the first" not in str(exc)


def test_no_more_writers_than_chunks_to_share(maps, monkeypatch):
    started = []
    real = writes.threading.Thread
    monkeypatch.setattr(writes.threading, "Thread",
                        lambda *a, **kw: started.append(1) or real(*a, **kw))
    m = maps(MapType.HASH, max_entries=1000)
    keys = np.arange(1000, dtype=np.uint32)
    assert writes.update(m, keys, keys.astype(np.uint64), 1000, batch_size=200, jobs=1000) == 1000
    assert len(started) == 3  # 5 chunks: the first alone, 4 left for 4 writers, 3 of them threads
    assert sorted(contents(m)) == list(range(1000))


@pytest.mark.parametrize("map_type", [MapType.LRU_HASH, MapType.LPM_TRIE])
def test_types_whose_end_state_depends_on_order_are_written_by_one_writer(map_type):
    assert map_type not in writes.PARALLEL_TYPES


def test_cli_load_with_jobs_says_the_applied_records_are_not_the_first(maps, tmp_path):
    m = maps(MapType.HASH, max_entries=10_000)
    path = tmp_path / "in.jsonl"
    path.write_text("".join(f'{{"key":"{k.to_bytes(4, "little").hex()}",'
                            f'"value":"{k.to_bytes(8, "little").hex()}"}}\n'
                            for k in range(70_000)))
    failed = subprocess.run([sys.executable, "-m", "bpfbatch", "load", "--map-id",
                             str(m.info.id), str(path), "--jobs", "2"],
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1
    assert "not the first" in failed.stderr and f"record at {path}:" in failed.stderr
    assert failed.stderr.count("\n") == 1
    assert len(contents(m)) == int(failed.stderr.split(" of 70000")[0].rsplit(" ", 1)[1])
