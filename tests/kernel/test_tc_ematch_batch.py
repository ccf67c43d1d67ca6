"""What tc's ematch scanner and grammar keep from one line of a batch to the next — the rest of
a word it read ahead, a string left open or broken by a bad escape, the last tree (sent again
by a ``match`` holding no term), the one buffer quoted arguments share — reproduced: a
``-force`` batch of such lines gives tc's stdout, stderr, status and state."""

from __future__ import annotations

from tc_helpers import side_by_side

LINES = r"""qdisc add dev vethA ingress
filter add dev vethA ingress prio 20 basic match "nbyte(\"\\x41\\101\\n\" at 3)" classid 1:1
filter add dev vethA ingress prio 20 basic match cmp(u8 at 0 eq 1) match cmp(u16 at 2 eq 3) classid 1:1
filter add dev vethA ingress basic match 'cmp(u8 at 0 eq 1)' classid 1:1
filter add dev vethA ingress basic match '"abc' classid 1:1
filter add dev vethA ingress basic match 'd" xx)' classid 1:1
filter add dev vethA ingress basic match 'cmp(u8 at 0 eq 1) foo(bar)' classid 1:1
filter add dev vethA ingress basic match 'cmp(u8 at 0 eq 1)' classid 1:1
filter add dev vethA ingress basic match '' classid 1:1
filter add dev vethA ingress basic match ' '
filter add dev vethA ingress cgroup match 'cmp(u8 at 0 eq 1) "\8"' action drop
filter add dev vethA ingress basic match 'nbyte("abcdef" at 0) and nbyte("xy" at 99 layer 7)' classid 1:1
filter add dev vethA ingress basic match 'nbyte("q' classid 1:1
filter add dev vethA ingress basic match 'x"(' classid 1:1
actions add action mirred egress redirect dev vethB index 5
"""


def test_a_batch_of_ematch_lines_like_tc(tmp_path):
    batch = tmp_path / "ematch.tc"
    batch.write_text(LINES)
    theirs, their_state, ours, our_state = side_by_side(batch, ("-force",))
    assert (ours.returncode, ours.stdout, ours.stderr) == \
        (theirs.returncode, theirs.stdout, theirs.stderr)
    assert our_state == their_state
