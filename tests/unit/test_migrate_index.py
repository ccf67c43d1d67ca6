"""The catch-up's key index (``bpfbatch.migrate.copy``): rows found by hash, every match
checked on the bytes — also when every hash collides."""

from __future__ import annotations

import numpy as np
import pytest

from bpfbatch.migrate import copy


def _rows(values, width=6):
    out = np.zeros((len(values), width), np.uint8)
    out[:, :4] = np.array(values, "<u4").view(np.uint8).reshape(-1, 4)
    return out


@pytest.fixture(params=["hashed", "every hash the same"])
def colliding(request, monkeypatch):
    if request.param != "hashed":
        monkeypatch.setattr(copy, "_hashes", lambda rows: np.zeros(len(rows), np.uint64))


def test_find_and_duplicate(colliding):
    index = copy._Index(_rows([5, 9, 2, 7]))
    assert index.find(_rows([2, 3, 5, 7])).tolist() == [2, -1, 0, 3]
    assert index.duplicate() is None
    assert copy._Index(_rows([1, 4, 8, 4, 1])).duplicate() == (0, 4)


def test_changes_new_changed_gone(colliding):
    keys, values = _rows([1, 2, 3]), _rows([10, 20, 30], 8)
    now_keys, now_values = _rows([3, 1, 4]), _rows([30, 11, 40], 8)
    changed, was, gone = copy._changes((keys, values), now_keys, now_values)
    assert changed.tolist() == [1, 2] and was.tolist() == [0, -1] and gone.tolist() == [1]
