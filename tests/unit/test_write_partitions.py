"""How a write is split between writers side by side (:func:`bpfbatch.map.writes._partitions`):
every record in exactly one group, all the records of one key in the same group, each group in
input order — what makes the last record of a key win whichever writer runs first."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bpfbatch.map.writes import _partitions


@settings(max_examples=200, deadline=None)
@given(key_size=st.sampled_from([1, 2, 3, 4, 6, 8, 16, 20]),
       distinct=st.integers(1, 40), n=st.integers(0, 400), start=st.integers(0, 20),
       jobs=st.integers(2, 5), seed=st.integers(0, 2**32 - 1))
def test_every_record_once_keys_together_input_order(key_size, distinct, n, start, jobs, seed):
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, (distinct, key_size), dtype=np.uint8)
    keys = pool[rng.integers(0, distinct, start + n)]
    view = memoryview(keys.tobytes())
    groups = _partitions(view, key_size, start, start + n, jobs)
    assert len(groups) == jobs
    together = np.concatenate(groups) if groups else np.array([], int)
    assert sorted(together.tolist()) == list(range(n))
    owner = {}
    for g, group in enumerate(groups):
        assert (np.diff(group) > 0).all()
        for index in group.tolist():
            key = keys[start + index].tobytes()
            assert owner.setdefault(key, g) == g


def test_distinct_keys_spread_over_every_writer():
    keys = np.arange(100_000, dtype=np.uint32)
    sizes = [len(g) for g in _partitions(memoryview(keys.tobytes()), 4, 0, len(keys), 4)]
    assert min(sizes) > 0.2 * len(keys), sizes
