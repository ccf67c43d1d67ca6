"""Runs of records, shared by the readers: where a run of same-header records ends, and the
offset and size of every record of a pass's runs.

Both rings (:mod:`.ringbuf`, :mod:`.perfring`) lay records out header by header. Records
that share a header (the same length, and for perf the same type) follow each other at one
stride, so once a run starts, its end is found by comparing the headers at that stride as
one numpy array, in windows that grow 4× a step: a short run costs one small comparison, a
pass of fixed-size events a handful, never Python code per record.
"""

from __future__ import annotations

from .._numpy import np

#: Headers compared in the first window (then 4× more each step).
FIRST_PROBE = 64


def run_length(heads: np.ndarray, mask: int | None = None) -> int:
    """How many of ``heads`` (the headers at a run's stride from its first record on, a
    strided view) equal the first, under ``mask`` when given; at least one."""
    n = len(heads)
    key = int(heads[0]) if mask is None else int(heads[0]) & mask
    if n < 2 or (int(heads[1]) if mask is None else int(heads[1]) & mask) != key:
        return 1
    typed_mask = None if mask is None else heads.dtype.type(mask)
    count, probe = 1, FIRST_PROBE
    while count < n:
        window = heads[count:count + probe]
        same = (window if typed_mask is None else window & typed_mask) == key
        if not same.all():
            return count + int(same.argmin())
        count += len(window)
        probe *= 4
    return n


def layout(firsts, strides, counts, sizes) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, sizes)`` of every record of the runs: run ``r`` has ``counts[r]`` records
    of ``sizes[r]`` bytes, the first at ``firsts[r]``, one every ``strides[r]`` bytes."""
    if len(counts) == 1:
        first, stride, count = int(firsts[0]), int(strides[0]), int(counts[0])
        return (np.arange(first, first + count * stride, stride, dtype=np.int64),
                np.full(count, sizes[0], np.int64))
    counts_a = np.asarray(counts, np.int64)
    if not counts_a.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    index = np.arange(int(counts_a.sum()), dtype=np.int64) - np.repeat(
        np.cumsum(counts_a) - counts_a, counts_a)
    offsets = np.repeat(np.asarray(firsts, np.int64), counts_a) + \
        index * np.repeat(np.asarray(strides, np.int64), counts_a)
    return offsets, np.repeat(np.asarray(sizes, np.int64), counts_a)
