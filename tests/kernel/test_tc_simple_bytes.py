"""simple's sdata bytes on lines of one shape: the 32 bytes depend on the lines before (tc
reads them from its reused line buffer), so such a line never comes from a template, even
when the first lines of the shape carry nothing but zeros after the string."""

from __future__ import annotations

import sys

from tc_helpers import captured_messages, masked, veth_netns

_LINE = "filter add dev vethA ingress prio {} protocol ip u32 match u32 0 0 action simple sdata hey\n"


def test_a_shape_after_a_longer_line_sends_what_that_line_left(tmp_path):
    batch = tmp_path / "simple.tc"
    longer = "#" + "a longer line: its bytes stay in tc's buffer " * 3 + "\n"
    batch.write_text("qdisc add dev vethA ingress\n" + _LINE.format(5) + _LINE.format(6)
                     + longer + _LINE.format(7) + _LINE.format(8))
    after = len(_LINE.format(8)) + 1  # the line, then getline's NUL
    left = (b"hey\0\0" + longer.encode()[after:])[:32]  # its newline, then the longer line's
    with veth_netns() as ns:
        theirs = captured_messages(["ip", "netns", "exec", ns, "tc", "-force", "-b", str(batch)])
        ours = captured_messages([sys.executable, "-c", "from bpfbatch.cli import main; main()",
                                  "tc", "--force", "-b", str(batch), "-n", ns])
    assert [masked(m).hex() for m in ours] == [masked(m).hex() for m in theirs]
    assert left in theirs[-1] and left in theirs[-2]
