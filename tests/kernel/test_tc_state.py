"""The kernel state after ``bpfbatch tc -b FILE`` equals the state after the installed
``tc -b FILE`` (compared through ``tc -j ... show``, counters and timestamps removed), for the
forms this kernel supports: ingress/clsact/htb qdiscs, htb classes, u32 (flat and hash layouts),
bpf, mirred."""

from __future__ import annotations

import pytest

from tc_helpers import action_indexes, bpfbatch_tc, pinned_program, released_state, tc_batch, veth_netns

ACTIONS = "".join(
    f"actions add action mirred egress redirect dev vethB index {i}{' no_percpu' if i % 3 == 0 else ''}\n"
    for i in range(1, 61)
) + """\
actions change action mirred egress mirror dev vethB index 5
actions replace action mirred ingress redirect dev vethA index 6
actions replace action mirred ingress mirror dev vethA index 61
actions del action mirred index 7
actions add action mirred egress redirect dev vethB index 70 action mirred egress redirect dev vethA index 71
""" + "".join(f"actions add action mirred egress redirect dev vethA index {i}\n" for i in range(80, 120))

FILTERS = """\
qdisc add dev vethA ingress
qdisc add dev vethB clsact
qdisc add dev vethB root handle 1: htb default 10 r2q 5
class add dev vethB parent 1: classid 1:1 htb rate 100mbit
class add dev vethB parent 1:1 classid 1:10 htb rate 1mbit ceil 10mbit prio 2 quantum 1500
class add dev vethB parent 1:1 classid 1:20 htb rate 5gbit ceil 40gbit
class change dev vethB parent 1:1 classid 1:10 htb rate 2mbit ceil 20mbit
# a 16-bucket hash table keyed on the last byte of the destination
filter add dev vethA ingress protocol ip prio 1 handle 1: u32 divisor 16
filter add dev vethA ingress protocol ip prio 1 u32 ht 800:: \\
    match ip dst 10.0.0.0/8 hashkey mask 0x0000000f at 16 link 1:
""" + "".join(
    f"filter add dev vethA ingress protocol ip prio 1 handle 1:{i % 16:x}:{i // 16 + 1:x} u32 "
    f"ht 1:{i % 16:x}: match ip dst 10.0.{i // 256}.{i % 256}/32 action mirred egress redirect dev vethB\n"
    for i in range(64)
) + """\
filter add dev vethA ingress protocol ip prio 2 u32 match ip src 192.168.0.0/16 match ip sport 53 0xffff classid 1:20
filter add dev vethA ingress protocol ip prio 2 u32 match ip protocol 17 0xff match ip dport 4789 0xffff action mirred ingress mirror dev vethB
filter add dev vethA ingress protocol all prio 3 u32 match u32 0 0 action mirred egress redirect dev vethB index 500 no_percpu
filter add dev vethB egress prio 1 bpf da pinned PROG
filter add dev vethB ingress prio 2 protocol ip handle 3 bpf pinned PROG classid 1:2 action mirred egress redirect dev vethA
# last: each releases a filter's action an RCU grace period later, so an action the kernel
# numbers after one of them would get an index that depends on timing (under tc too)
filter change dev vethA ingress protocol ip prio 1 handle 1:3:1 u32 ht 1:3: match ip dst 10.0.0.3/32 action mirred egress mirror dev vethB
filter replace dev vethA ingress protocol ip prio 1 handle 1:4:1 u32 ht 1:4: match ip dst 10.0.0.4/32 classid 1:30
filter del dev vethA ingress protocol ip prio 1 handle 1:5:1 u32
"""

QUERIES = (["actions", "list", "action", "mirred"], ["qdisc", "show"], ["class", "show", "dev", "vethB"],
           ["filter", "show", "dev", "vethA", "ingress"], ["filter", "show", "dev", "vethB", "egress"],
           ["filter", "show", "dev", "vethB", "ingress"])


@pytest.fixture(scope="module")
def program():
    with pinned_program() as path:
        yield path


@pytest.mark.parametrize("text,extra", [(ACTIONS, ()), (ACTIONS, ("--coalesce",)),
                                        (FILTERS, ()), (FILTERS, ("--batch-bytes", "1024"))],
                         ids=["actions", "actions-coalesce", "filters", "filters-small-batches"])
def test_same_state_as_tc(tmp_path, program, text, extra):
    batch = tmp_path / "rules.tc"
    batch.write_text(text.replace("PROG", program))
    with veth_netns() as ns_tc, veth_netns() as ns_ours:
        done = tc_batch(ns_tc, batch)
        assert done.returncode == 0, done.stderr
        ours = bpfbatch_tc(ns_ours, batch, *extra)
        assert ours.returncode == 0, ours.stderr
        expected = released_state(ns_tc, *QUERIES)  # QUERIES list every filter
        assert released_state(ns_ours, *QUERIES) == expected
    assert expected[" ".join(QUERIES[0])]  # the comparison saw actions, not two empty lists


def test_stdin_and_state(program):
    with veth_netns() as ns:
        done = bpfbatch_tc(ns, "-", stdin=ACTIONS)
        assert done.returncode == 0, done.stderr
        assert action_indexes(ns) == sorted({*range(1, 62), 70, 71, *range(80, 120)} - {7})
