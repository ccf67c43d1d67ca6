"""What the kernel owes once undone filters are deleted (:func:`bpfbatch.tc.release.releases`):
worked out from the reference counts read before the deletes."""

from __future__ import annotations

import pytest

from bpfbatch.tc.release import GONE, HeldAction, releases


@pytest.mark.parametrize("held,owed", [
    # created by the one undone filter: gone once it is deleted
    ([HeldAction("mirred", 7, 1, 1)], {("mirred", 7): GONE}),
    # created by one undone filter, bound by a second undone one: gone too
    ([HeldAction("mirred", 7, 2, 2)] * 2, {("mirred", 7): GONE}),
    # added on its own (an undone or a kept line) and bound: back to no binding, not gone
    ([HeldAction("mirred", 50, 2, 1)], {("mirred", 50): 0}),
    # bound by a kept filter as well: one binding stays
    ([HeldAction("gact", 3, 2, 2)], {("gact", 3): 1}),
    # same index, other kind: another action
    ([HeldAction("gact", 3, 1, 1), HeldAction("mirred", 3, 2, 1)],
     {("gact", 3): GONE, ("mirred", 3): 0}),
    ([], {}),
])
def test_releases(held, owed):
    assert releases(held) == owed
