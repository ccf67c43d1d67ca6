"""The one key join (:mod:`bpfbatch.map.keyjoin`) against a dict of the keys' bytes: keys of
every width (one word, exact; several, hashed), repeated keys (the last row wins, as ``load``
applies a file), empty sides — each also with hashes made to collide (met by hashing again,
then by the exact join) — and what its two users make of it: ``diff``'s sides and
``migrate``'s catch-up of what changed between two reads."""

from __future__ import annotations

import numpy as np
import pytest

from bpfbatch.map import keyjoin
from bpfbatch.migrate import copy

SIZES = [1, 3, 4, 8, 12, 16, 20, 64]


@pytest.fixture(params=["hashed", "16 hashes", "one hash"])
def hashes(request, monkeypatch):
    """The real hashes; every hash in 16 values (a side's different keys collide, some seed
    may not); every hash the same (no seed helps: the exact join answers)."""
    real = keyjoin._hashes
    if request.param == "16 hashes":
        monkeypatch.setattr(keyjoin, "_hashes",
                            lambda w, seed: real(w, seed) & np.uint64(15) if seed else w[:, 0])
    elif request.param == "one hash":
        monkeypatch.setattr(keyjoin, "_hashes", lambda w, seed: np.zeros(len(w), np.uint64)
                            if seed else w[:, 0])
    return request.param


def oracle(keys_a: np.ndarray, keys_b: np.ndarray):
    last_a = {row.tobytes(): i for i, row in enumerate(keys_a)}
    last_b = {row.tobytes(): i for i, row in enumerate(keys_b)}
    pairs = {(last_a[k], last_b[k]) for k in last_a.keys() & last_b.keys()}
    return ({i for k, i in last_a.items() if k not in last_b},
            {i for k, i in last_b.items() if k not in last_a}, pairs)


def repeated_oracle(keys: np.ndarray):
    first, pairs = {}, {}
    for row, key in enumerate(map(np.ndarray.tobytes, keys)):
        if first.setdefault(key, row) != row:
            pairs.setdefault(key, (first[key], row))
    return min(pairs.values(), default=None)


def result(j):
    return set(j.only_a.tolist()), set(j.only_b.tolist()), set(zip(j.pairs_a.tolist(),
                                                                    j.pairs_b.tolist()))


def sides(rng, size: int, n: int, m: int, alphabet: int = 3):
    """Two sides drawn from a small alphabet of bytes: many shared and repeated keys."""
    return (rng.integers(0, alphabet, (n, size), dtype=np.uint8),
            rng.integers(0, alphabet, (m, size), dtype=np.uint8))


@pytest.mark.parametrize("size", SIZES)
def test_the_join_is_the_dicts(size, hashes):
    rng = np.random.default_rng(size)
    counts = ((0, 0), (0, 5), (5, 0), (1, 1), (3, 0), (200, 300))
    for n, m in counts + (((3000, 2000),) if hashes == "hashed" else ()):
        a, b = sides(rng, size, n, m)
        assert result(keyjoin.join(a, b)) == oracle(a, b), (size, n, m)


@pytest.mark.parametrize("size", SIZES)
def test_repeated_is_the_first_key_that_occurs_again(size, hashes):
    rng = np.random.default_rng(size)
    for n, alphabet in ((0, 3), (1, 3), (2, 256), (40, 256), (300, 2), (300, 3)):
        keys = rng.integers(0, alphabet, (n, size), dtype=np.uint8)
        assert keyjoin.repeated(keys) == repeated_oracle(keys), (size, n, alphabet)
    distinct = np.arange(500, dtype="<u4").view(np.uint8).reshape(500, 4)
    keys = np.zeros((500, size + 4), np.uint8)
    keys[:, -4:] = distinct  # keys that differ only past the first word
    assert keyjoin.repeated(keys) is None
    keys[[17, 9]] = keys[[430, 450]]  # row 17 holds 430's key, row 9 450's
    assert keyjoin.repeated(keys) == (9, 450)
    keys[[0, 250]] = keys[499]  # three rows of one key: the first two
    assert keyjoin.repeated(keys) == (0, 250)


def _rows(values, width=6):
    out = np.zeros((len(values), width), np.uint8)
    out[:, :4] = np.array(values, "<u4").view(np.uint8).reshape(-1, 4)
    return out


@pytest.mark.parametrize("width", [6, 12])
def test_migrate_catch_up_finds_new_changed_gone(width, hashes):
    keys, values = _rows([1, 2, 3], width), _rows([10, 20, 30], 8)
    now_keys, now_values = _rows([3, 1, 4], width), _rows([30, 11, 40], 8)
    changed, was, gone = copy._changes((keys, values), now_keys, now_values)
    assert changed.tolist() == [1, 2] and was.tolist() == [0, -1] and gone.tolist() == [1]
    nothing = copy._changes((keys, values), keys[::-1].copy(), values[::-1].copy())
    assert [part.tolist() for part in nothing] == [[], [], []]
