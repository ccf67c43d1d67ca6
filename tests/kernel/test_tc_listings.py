"""Read-only lines in a batch (``filter show``, ``actions list|get``, ``qdisc show``, ``class
show``, ``help``) and ``actions flush``: printed where they stand, showing exactly the lines
before them applied, with tc's own words — stdout, stderr, exit status and the kernel state
equal to ``tc -b``'s, with and without ``-force`` and ``-j``."""

from __future__ import annotations

import pytest

from tc_helpers import side_by_side

#: Writes around each probe line: the listing must show the first three applied, the last
#: one must follow (or not, without -force, when the listing failed).
BEFORE = """\
qdisc add dev vethA ingress
actions add action mirred egress redirect dev vethB index 5
filter add dev vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.1/32 action mirred egress redirect dev vethB index 5
"""
AFTER = "actions add action mirred egress redirect dev vethB index 6\n"

LINES = [
    "filter show dev vethA ingress",  # tdc e0a9's form
    "filter ls dev vethA ingress",
    "actions list action mirred",  # tdc ba38
    "actions ls action gact",  # tdc ac2a (no gact here: an empty listing)
    "actions get action mirred index 5",
    "actions get action mirred index 77",  # refused by the kernel: a failed line
    "actions flush action mirred",  # a write: what follows must see it
    "qdisc show dev vethA",
    "class show dev vethA",
    "filter show dev nosuch",  # tc's own words for a missing device
    "actions list",  # tc's usage, and tc exits: status 255
    "qdisc",
    "filter help",
]


@pytest.mark.parametrize("mode", [(), ("-force",), ("-j",), ("-force", "-j")],
                         ids=["stop", "force", "json", "force-json"])
@pytest.mark.parametrize("line", LINES)
def test_listing_in_place_like_tc(tmp_path, line, mode):
    batch = tmp_path / "listing.tc"
    batch.write_text(BEFORE + line + "\n" + AFTER)
    theirs, their_state, ours, our_state = side_by_side(batch, mode)
    assert (ours.returncode, ours.stdout, ours.stderr) == \
        (theirs.returncode, theirs.stdout, theirs.stderr)
    assert our_state == their_state
