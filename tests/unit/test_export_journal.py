"""The drain journal reads back what was appended, and a record torn by the death of its
writer (SIGKILL during the append) is left out and said, never misread."""

from __future__ import annotations

import os

import pytest

from bpfbatch.errors import BpfBatchError
from bpfbatch.export.config import MapRef
from bpfbatch.export.journal import Journal
from bpfbatch.map.cursor import Batch


def test_records_read_back_and_a_torn_last_one_is_left_out(tmp_path):
    path = str(tmp_path / "j")
    j = Journal(path)
    ref = MapRef(pinned="/sys/fs/bpf/x")
    j.append(ref, 4, 8, Batch(2, b"\1\0\0\0\2\0\0\0", bytes(range(16))))
    first = os.path.getsize(path)
    j.append(MapRef(id=7), 2, 1, Batch(1, b"\3\0", b"\4"))
    records, torn = j.records()
    assert not torn
    assert [(r.ref, r.key_size, r.value_stride, r.batch.count, bytes(r.batch.keys),
             bytes(r.batch.values)) for r in records] == [
        (ref, 4, 8, 2, b"\1\0\0\0\2\0\0\0", bytes(range(16))), (MapRef(id=7), 2, 1, 1, b"\3\0", b"\4")]
    for cut in range(first + 1, os.path.getsize(path)):  # the second cut at every byte
        os.truncate(path, cut)
        records, torn = j.records()
        assert torn and len(records) == 1 and records[0].ref == ref
    j.clear()
    assert j.records() == ([], False)
    j.close()


def test_one_exporter_holds_a_journal(tmp_path):
    j = Journal(str(tmp_path / "j"))
    with pytest.raises(BpfBatchError, match="in use by another exporter"):
        Journal(str(tmp_path / "j"))
    j.close()
