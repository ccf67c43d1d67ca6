"""Fixtures shared by the kernel tests."""

from __future__ import annotations

import os

import pytest

from bpfbatch import Map
from bpfbatch._sys.abi import MapType

#: Every Python child a kernel test starts prints its threads' stacks on SIGABRT, which
#: :func:`fault_helpers.communicate` sends to one that outlived its timeout.
os.environ.setdefault("PYTHONFAULTHANDLER", "1")


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


@pytest.fixture
def pins():
    """``pin(map, what)`` pins ``map`` at ``/sys/fs/bpf/bbtest_<what>_<pid>`` (unique to this
    run: other engineers' tests run at the same time) and returns the path; every pin is
    removed when the test ends."""
    import os

    made = []

    def pin(m: Map, what: str) -> str:
        path = f"/sys/fs/bpf/bbtest_{what}_{os.getpid()}"
        if os.path.exists(path):
            os.unlink(path)
        m.pin(path)
        made.append(path)
        return path

    yield pin
    for path in made:
        if os.path.exists(path):
            os.unlink(path)
