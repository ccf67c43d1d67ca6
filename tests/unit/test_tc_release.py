"""What the kernel owes once undone filters are deleted (:func:`bpfbatch.tc.release.releases`),
worked out from the reference counts read before the deletes, and the wait for it: it ends on
the kernel's answers (gone, or the binding dropped), or names what is still held. The kernel
side runs in ``tests/kernel/test_tc_undo_release.py``."""

from __future__ import annotations

import errno
import struct

import pytest

from bpfbatch.errors import BpfBatchError
from bpfbatch.tc import release
from bpfbatch.tc import specs as S
from bpfbatch.tc.netlink import Reply
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


def _tlv(kind: int, payload: bytes) -> bytes:
    return struct.pack("=HH", 4 + len(payload), kind) + payload + b"\0" * (-len(payload) % 4)


def _get_answer(index: int, ref: int, bind: int) -> Reply:
    """The kernel's answer to an action get: tcamsg, then TCA_ACT_TAB { 1 { KIND, OPTIONS {
    PARMS: struct tc_mirred } } }."""
    parms = S.TC_MIRRED.pack(index, 0, S.Verdict.STOLEN, ref, bind, 1, 3)
    action = _tlv(S.ActAttr.KIND, b"mirred\0") + _tlv(S.ActAttr.OPTIONS, _tlv(S.TCA_MIRRED_PARMS, parms))
    return Reply(1, 0, None, S.TCAMSG.pack(0) + _tlv(S.TCA_ACT_TAB, _tlv(1, action)))


def test_wait_ends_when_the_kernel_has_let_go():
    answers = iter([[_get_answer(7, 1, 1), _get_answer(50, 2, 1)],  # neither released yet
                    [Reply(2, errno.ENOENT, None), _get_answer(50, 1, 0)]])
    asked = []

    def query(requests):
        asked.append(len(requests))
        return next(answers)

    release.wait_released(query, {("mirred", 7): GONE, ("mirred", 50): 0}, source="f.tc")
    assert asked == [2, 2]


def test_actions_still_held_are_named(monkeypatch):
    """Something else holds the action (another process bound it meanwhile): no endless wait,
    one error naming what is held."""
    monkeypatch.setattr(release, "RELEASE_TIMEOUT", 0.0)
    with pytest.raises(BpfBatchError, match=r"^f\.tc: actions mirred 7 still held 0 s after"):
        release.wait_released(lambda requests: [_get_answer(7, 2, 1)], {("mirred", 7): GONE},
                              source="f.tc")
