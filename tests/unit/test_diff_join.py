"""The key join of ``diff`` (:mod:`bpfbatch.compare.keyjoin`) against a dict of the keys' bytes:
keys of every width (one word, exact; several, hashed), repeated keys (the last row wins, as
``load`` applies a file), empty sides, and hashes made to collide (met by hashing again,
then by the exact join)."""

from __future__ import annotations

import numpy as np
import pytest

from bpfbatch.compare import keyjoin as join_module
from bpfbatch.compare.keyjoin import join


def oracle(keys_a: np.ndarray, keys_b: np.ndarray):
    last_a = {row.tobytes(): i for i, row in enumerate(keys_a)}
    last_b = {row.tobytes(): i for i, row in enumerate(keys_b)}
    pairs = {(last_a[k], last_b[k]) for k in last_a.keys() & last_b.keys()}
    return ({i for k, i in last_a.items() if k not in last_b},
            {i for k, i in last_b.items() if k not in last_a}, pairs)


def result(j):
    return set(j.only_a.tolist()), set(j.only_b.tolist()), set(zip(j.pairs_a.tolist(),
                                                                    j.pairs_b.tolist()))


def sides(rng, size: int, n: int, m: int, alphabet: int = 3):
    """Two sides drawn from a small alphabet of bytes: many shared and repeated keys."""
    return (rng.integers(0, alphabet, (n, size), dtype=np.uint8),
            rng.integers(0, alphabet, (m, size), dtype=np.uint8))


@pytest.mark.parametrize("size", [1, 3, 4, 8, 12, 16, 20, 64])
def test_the_join_is_the_dicts(size):
    rng = np.random.default_rng(size)
    for n, m in ((0, 0), (0, 5), (5, 0), (1, 1), (200, 300), (3000, 2000)):
        a, b = sides(rng, size, n, m)
        assert result(join(a, b)) == oracle(a, b), (size, n, m)


def test_colliding_hashes_are_met(monkeypatch):
    """Every hash in 16 values: a side's different keys collide; the join is still exact."""
    real = join_module._hashes
    monkeypatch.setattr(join_module, "_hashes",
                        lambda w, seed: real(w, seed) & np.uint64(15) if seed else w[:, 0])
    rng = np.random.default_rng(1)
    a, b = sides(rng, 16, 500, 400, alphabet=4)
    assert result(join(a, b)) == oracle(a, b)
    a, b = a[:3], b[:0]  # few keys: some seed may not collide
    assert result(join(a, b)) == oracle(a, b)
