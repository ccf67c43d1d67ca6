"""The stream contract's Batch over plain memory: record boundaries, copies that outlive the
ring, views only where records lie at one stride, and commits that never go back."""

from __future__ import annotations

import numpy as np
import pytest

from bpfbatch.events.batch import Batch


def batch_of(records: list[bytes], *, stride: int | None = None, commits=None):
    """``records`` laid out as a ring lays them: an 8-byte header, then padding to 8."""
    data, offsets = bytearray(), []
    for record in records:
        data += bytes(8)
        offsets.append(len(data))
        data += record + bytes(-len(record) % 8)
    calls = commits if commits is not None else []
    return Batch(np.frombuffer(bytes(data), np.uint8), np.array(offsets, np.int64),
                 np.array([len(r) for r in records], np.uint32), calls.append, stride=stride)


def test_fixed_records_view_and_copy():
    records = [bytes([i]) * 16 for i in range(5)]
    batch = batch_of(records, stride=24)
    assert batch.size == 16 and batch.records() == records
    view = batch.view(np.dtype([("a", "<u8"), ("b", "<u8")]))
    assert view["a"].tolist() == [int.from_bytes(bytes([i]) * 8, "little") for i in range(5)]
    rows = batch.rows()
    assert rows.flags.owndata or rows.base is not None and not np.shares_memory(rows, batch.data)
    assert [bytes(r) for r in rows] == records
    assert [bytes(r) for r in batch.rows(4)] == [r[:4] for r in records]


def test_variable_records_padded_and_no_view():
    records = [b"x" * n for n in (3, 9, 1)]
    batch = batch_of(records)
    assert batch.size is None and batch.view(np.dtype("u1")) is None
    with pytest.raises(ValueError):
        batch.rows()
    assert [bytes(r) for r in batch.rows(9)] == [r.ljust(9, b"\0") for r in records]
    single = batch_of([b"abcd"], stride=16)
    assert not np.shares_memory(single.rows(), single.data)  # one row: still a copy


def test_commit_counts_records_once_and_upto():
    calls = []
    batch = batch_of([b"a" * 8] * 4, stride=16, commits=calls)
    batch.commit(upto=2)
    assert calls == [2] and not batch.committed
    batch.commit()
    batch.commit()
    assert calls == [2, 4] and batch.committed
