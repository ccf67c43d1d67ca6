"""Undoing filter adds after a failure, against the kernel's deferred release: a deleted filter
lets go of its actions only after an RCU grace period (``tcf_queue_work``), so right after the
delete they are still listed, still hold their indexes and are still bound. The sender must
wait that out before deleting the actions those filters were bound to, and before it returns:
the next command — ours or anyone's — must find the kernel as ``tc -b`` left it."""

from __future__ import annotations

import pytest

from bpfbatch import tc
from tc_helpers import STATE_QUERIES, side_by_side, tc_batch, tc_state, veth_netns

_HASH_HEAD = ("qdisc add dev vethA ingress\n"
              "filter add dev vethA ingress protocol ip prio 1 handle 1: u32 divisor 16\n"
              "filter add dev vethA ingress protocol ip prio 1 u32 ht 800:: match ip dst 10.0.0.0/8 "
              "hashkey mask 0x0000000f at 16 link 1:\n")


def _filter(i: int, handle: str = "") -> str:
    """A u32 key node in bucket i % 16 whose mirred action takes an index the kernel picks."""
    return (f"filter add dev vethA ingress protocol ip prio 1 {handle}u32 ht 1:{i & 15:x}: "
            f"match ip dst 10.0.{i >> 8}.{i & 255}/32 action mirred egress redirect dev vethB\n")


def test_the_next_batch_finds_what_tc_left(tmp_path):
    """Line 10 fails; the 30 filters after it travelled in the same sendmsg and are undone. The
    same session at once sends a second batch whose actions the kernel numbers (lowest free
    index): with the undone filters' actions still held, they would get other indexes than
    after ``tc -b``."""
    first = tmp_path / "first.tc"
    first.write_text(_HASH_HEAD + _filter(0, "handle 1:0:5 ") + "".join(map(_filter, range(1, 6)))
                     + _filter(0, "handle 1:0:5 ") + "".join(map(_filter, range(6, 36))))
    second = tmp_path / "second.tc"
    second.write_text("".join(map(_filter, range(100, 110))))
    with veth_netns() as ns_tc, veth_netns() as ns_ours:
        with tc.Session(netns=ns_ours) as session:
            with first.open() as stream:
                report = session.send_batch(stream, str(first))
            assert (report.first_failure.line, report.stopped, report.undone) == (10, True, 30)
            with second.open() as stream:
                assert session.send_batch(stream, str(second)).ok
        assert [tc_batch(ns_tc, path).returncode for path in (first, second)] == [1, 0]
        assert tc_state(ns_ours, *STATE_QUERIES) == tc_state(ns_tc, *STATE_QUERIES)


#: Line 5 fails. Lines 6 and 7 were applied in the same sendmsg: action 50, then a filter bound
#: to it. The filter goes first; action 50 can be deleted only once the kernel has released
#: the filter's binding (before that the delete is refused: EPERM, "action bound").
_BOUND = ("qdisc add dev vethA ingress\n"
          "filter add dev vethA ingress protocol ip prio 1 handle 800::1 u32 match ip dst 10.0.0.1/32 "
          "action mirred egress redirect dev vethB\n"
          "actions replace action mirred egress redirect dev vethB index 1\n"
          "actions add action mirred egress redirect dev vethB index 2\n"
          "actions add action mirred egress redirect dev vethB index 2\n"
          "actions add action mirred egress redirect dev vethB index 50\n")
BINDERS = {
    "u32": "filter add dev vethA ingress protocol ip prio 1 handle 800::3 u32 match ip dst "
           "10.0.0.3/32 action mirred egress redirect dev vethB index 50\n",
    "bpf": "filter add dev vethA ingress protocol ip prio 7 handle 3 bpf bytecode '1,6 0 0 0' "
           "action mirred egress redirect dev vethB index 50\n",
}


@pytest.mark.parametrize("binder", BINDERS)
def test_an_action_bound_by_an_undone_filter_is_undone_after_it(tmp_path, binder):
    batch = tmp_path / "bound.tc"
    batch.write_text(_BOUND + BINDERS[binder])
    theirs, their_state, ours, our_state = side_by_side(batch)
    assert theirs.stderr.endswith("Command failed %s:5\n" % batch)
    assert (ours.returncode, ours.stderr, our_state) == (theirs.returncode, theirs.stderr, their_state)
