"""Fixtures shared by the kernel tests."""

from __future__ import annotations

import pytest

from bpfbatch._sys.abi import MapType
from bpfbatch.map.handle import Map


@pytest.fixture
def maps():
    """A factory of real maps, ``maps(map_type, key_size, value_size, max_entries, **create)``,
    all closed (and so freed by the kernel) when the test ends."""
    created = []

    def make(map_type=MapType.HASH, key_size=4, value_size=4, max_entries=1024, *,
             name="bb_test", **kw):
        m = Map.create(map_type, key_size, value_size, max_entries, name=name, **kw)
        created.append(m)
        return m

    yield make
    for m in created:
        m.close()
