"""Key rows matched by their bytes, vectorised: the join of two sides (``diff``'s, and
``migrate``'s catch-up of what changed between two reads) and a side's repeated keys
(``migrate``'s check that no two records become one key).

Keys are their bytes, as the kernel compares them. Each side's rows become 64-bit words,
and each key one 64-bit number: the key itself when it fits in 8 bytes, else a hash of its
words. Each side is sorted by that number (one numpy ``argsort``: a lexicographic sort of
multi-word keys took ten times longer), the other side's numbers are looked up in it with
``searchsorted``, and every match of a hash is confirmed on the full words. A key that
occurs more than once on a side (a file may repeat one) counts once, as its last record,
as ``load`` applies it. Two different keys of one side with the same hash (about one
chance in 10^7 for two 1M-key sides) are met by hashing again with another seed, and
after the last seed by a dict of the keys' bytes: the answer is exact whatever the hashes.
"""

from __future__ import annotations

import dataclasses

from .._numpy import np

_SEEDS = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93)


@dataclasses.dataclass(frozen=True)
class Joined:
    """Row indices: ``only_a`` (keys B lacks), ``only_b`` (keys A lacks), and the rows of
    each key both hold, ``pairs_a[i]`` with ``pairs_b[i]``."""

    only_a: np.ndarray
    only_b: np.ndarray
    pairs_a: np.ndarray
    pairs_b: np.ndarray


def words(rows: np.ndarray) -> np.ndarray:
    """``(n, key_size)`` uint8 rows as ``(n, ceil(key_size / 8))`` little-endian uint64
    words (zero-padded), without a copy when the rows already are whole words."""
    n, size = rows.shape
    width = -(-size // 8)
    if size == width * 8 and rows.flags.c_contiguous:
        return rows.view("<u8")
    padded = np.zeros((n, width * 8), np.uint8)
    padded[:, :size] = rows
    return padded.view("<u8")


def join(keys_a: np.ndarray, keys_b: np.ndarray) -> Joined:
    """Match the key rows of two sides (``(n, key_size)`` uint8 each, the same size)."""
    wa, wb = words(keys_a), words(keys_b)
    return _hashed(wa, lambda seed: _join(wa, wb, seed), lambda: _join_exactly(wa, wb))


def repeated(keys: np.ndarray) -> tuple[int, int] | None:
    """Two rows of ``keys`` (``(n, key_size)`` uint8) that hold the same bytes, or ``None``:
    the first row whose key occurs again, and the next row holding that key."""
    w = words(keys)
    return _hashed(w, lambda seed: _repeated(w, seed), lambda: _repeated_exactly(w))


class _Collision(Exception):
    """Two different keys of one side hashed alike."""


def _hashed(w: np.ndarray, attempt, exactly):
    """``attempt(seed)`` with each seed in turn until one meets no collision (one word:
    the key itself, which cannot collide), else ``exactly()``."""
    for seed in _SEEDS if w.shape[1] > 1 else (None,):
        try:
            return attempt(seed)
        except _Collision:
            continue
    return exactly()


def _hashes(w: np.ndarray, seed: int | None) -> np.ndarray:
    if seed is None:  # one word: the key itself, exact
        return w[:, 0]
    h = np.full(len(w), seed, np.uint64)
    for column in w.T:
        h ^= column
        h *= np.uint64(0xFF51AFD7ED558CCD)
        h ^= h >> np.uint64(33)
    return h


def _index(w: np.ndarray, seed: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The side's distinct hashes, sorted, and for each the row of its key (the last row,
    where a key repeats)."""
    h = _hashes(w, seed)
    order = np.argsort(h)
    sorted_h = h[order]
    same = np.flatnonzero(sorted_h[1:] == sorted_h[:-1])
    if not same.size:
        return sorted_h, order
    if w.shape[1] > 1 and not (w[order[same]] == w[order[same + 1]]).all():
        raise _Collision
    first = np.ones(len(sorted_h), bool)
    first[same + 1] = False
    run = np.cumsum(first) - 1
    last = np.full(int(run[-1]) + 1, -1, np.int64)
    np.maximum.at(last, run, order)
    return sorted_h[first], last


def _repeated(w: np.ndarray, seed: int | None) -> tuple[int, int] | None:
    h = _hashes(w, seed)
    order = np.argsort(h, kind="stable")  # a key's rows in row order
    sorted_h = h[order]
    same = np.flatnonzero(sorted_h[1:] == sorted_h[:-1])
    if not same.size:
        return None
    first, then = order[same], order[same + 1]
    if w.shape[1] > 1 and not (w[first] == w[then]).all():
        raise _Collision
    at = int(np.argmin(first))  # a row begins one pair at most: its key's first row, or none
    return int(first[at]), int(then[at])


def _repeated_exactly(w: np.ndarray) -> tuple[int, int] | None:
    """:func:`repeated` by the keys' bytes in a dict."""
    first_row: dict[bytes, int] = {}
    pairs: dict[bytes, tuple[int, int]] = {}
    for row, key in enumerate(map(np.ndarray.tobytes, w)):
        if first_row.setdefault(key, row) != row:
            pairs.setdefault(key, (first_row[key], row))
    return min(pairs.values(), default=None)


def _join(wa: np.ndarray, wb: np.ndarray, seed: int | None) -> Joined:
    ha, rows_a = _index(wa, seed)
    hb, rows_b = _index(wb, seed)
    if not len(ha) or not len(hb):
        empty = np.empty(0, np.int64)
        return Joined(rows_a, rows_b, empty, empty)
    at = np.minimum(np.searchsorted(ha, hb), len(ha) - 1)
    hit = ha[at] == hb
    if wa.shape[1] > 1:  # a hash met on the other side: the same key only if the words agree
        found = np.flatnonzero(hit)
        hit[found] = ~rows_differ(wa, wb, rows_a[at[found]], rows_b[found])
    matched_a = np.zeros(len(ha), bool)
    matched_a[at[hit]] = True
    return Joined(rows_a[~matched_a], rows_b[~hit], rows_a[at[hit]], rows_b[hit])


def take(rows: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``rows[index]`` for a 2-D array: ``np.take`` copies whole rows, three times as fast
    as fancy indexing (which copies element by element) on 1M random rows."""
    return np.take(rows, index, axis=0)


#: Rows compared at a time by :func:`rows_differ`: its buffers stay in the cache and are
#: not faulted in anew for each million rows.
_STEP = 1 << 16


def rows_differ(a: np.ndarray, b: np.ndarray, ia: np.ndarray, ib: np.ndarray) -> np.ndarray:
    """Per pair ``i``, whether row ``ia[i]`` of ``a`` and row ``ib[i]`` of ``b`` (2-D
    arrays of one width) differ, compared a word at a time."""
    width = a.shape[1] * a.itemsize
    step = next(s for s in (8, 4, 2, 1) if width % s == 0)
    out = np.empty(len(ia), bool)
    if not width:
        out[:] = False
        return out
    a, b = a.view(np.uint8).view(f"<u{step}"), b.view(np.uint8).view(f"<u{step}")
    for at in range(0, len(ia), _STEP):
        part = slice(at, at + _STEP)
        np.any(take(a, ia[part]) != take(b, ib[part]), axis=1, out=out[part])
    return out


def _join_exactly(wa: np.ndarray, wb: np.ndarray) -> Joined:
    """The join by the keys' bytes in a dict: for sides whose hashes kept colliding."""
    index_a = {row.tobytes(): i for i, row in enumerate(wa)}
    index_b = {row.tobytes(): i for i, row in enumerate(wb)}
    both = [key for key in index_b if key in index_a]
    as_array = lambda found: np.array(found, np.int64)  # noqa: E731
    return Joined(as_array([i for key, i in index_a.items() if key not in index_b]),
                  as_array([i for key, i in index_b.items() if key not in index_a]),
                  as_array([index_a[key] for key in both]),
                  as_array([index_b[key] for key in both]))
