"""The Python API: rules built as objects, sent through a Session in a netns, read back by an
independent netlink client (pyroute2) and by tc."""

from __future__ import annotations

import pytest

from bpfbatch import tc
from bpfbatch.errors import PartialError
from tc_helpers import action_indexes, veth_netns

pyroute2 = pytest.importorskip("pyroute2")

BUCKETS = 16
FILTERS = 300


def _layout() -> list:
    """Ingress qdisc, a 16-bucket u32 table keyed on the destination's last byte, and one
    filter per address with a classid and a mirred redirect."""
    rules = [tc.Qdisc("add", "vethA", "ingress"),
             tc.Filter("add", "vethA", tc.INGRESS, tc.U32(divisor=BUCKETS), prio=1,
                       protocol=tc.ETH_P_IP, handle=1 << 20),
             tc.Filter("add", "vethA", tc.INGRESS,
                       tc.U32(keys=(tc.ip_match("dst", "10.0.0.0/8"),), ht=0x800 << 20,
                              link=1 << 20, hashkey=(BUCKETS - 1, 16)),
                       prio=1, protocol=tc.ETH_P_IP)]
    for i in range(FILTERS):
        bucket = i % BUCKETS
        rules.append(tc.Filter(
            "add", "vethA", tc.INGRESS,
            tc.U32(keys=(tc.ip_match("dst", f"10.1.{i >> 8}.{i & 255}"),), ht=1 << 20 | bucket << 12,
                   classid=tc.tc_h_make(1 << 16, i + 1),
                   actions=(tc.Mirred("egress", "redirect", "vethB"),)),
            prio=1, protocol=tc.ETH_P_IP))
    return rules


def test_api_rules_read_back_with_pyroute2():
    with veth_netns() as ns:
        with tc.Session(netns=ns, batch_bytes=4096) as session:
            report = session.send(_layout())
        assert report.ok and report.applied == FILTERS + 3
        with pyroute2.IPRoute(netns=ns) as ipr:
            vetha = ipr.link_lookup(ifname="vethA")[0]
            vethb = ipr.link_lookup(ifname="vethB")[0]
            filters = [f for f in ipr.get_filters(index=vetha, parent=0xFFFF0000)
                       if f.get_attr("TCA_KIND") == "u32" and f.get_attr("TCA_OPTIONS")
                       and f.get_attr("TCA_OPTIONS").get_attr("TCA_U32_CLASSID")]
    classids = sorted(f.get_attr("TCA_OPTIONS").get_attr("TCA_U32_CLASSID") for f in filters)
    assert classids == [0x10000 + i + 1 for i in range(FILTERS)]
    buckets = {(f["handle"] >> 12) & 0xFF for f in filters}
    assert buckets == set(range(BUCKETS))
    mirred = [f.get_attr("TCA_OPTIONS").get_attr("TCA_U32_ACT").get_attr("TCA_ACT_PRIO_1")
              .get_attr("TCA_ACT_OPTIONS").get_attr("TCA_MIRRED_PARMS") for f in filters]
    assert {(p["eaction"], p["ifindex"]) for p in mirred} == {(1, vethb)}  # egress redirect


def test_api_failure_report_and_exception():
    seen = []
    with veth_netns() as ns:
        rules = [tc.Actions("add", (tc.Mirred("egress", "redirect", "vethB", index=i),))
                 for i in (1, 2, 2, 3)]
        with tc.Session(netns=ns, force=True, on_failure=seen.append) as session:
            report = session.send(rules, source="generated")
        assert action_indexes(ns) == [1, 2, 3]
    assert [(f.where, f.errno) for f in seen] == [("generated:3", 17)]
    assert (report.applied, report.failed, report.stopped) == (3, 1, False)
    with pytest.raises(PartialError, match=r"generated: tc batch: 1 of 4 commands failed") as caught:
        tc.raise_for(report)
    assert caught.value.applied == 3
