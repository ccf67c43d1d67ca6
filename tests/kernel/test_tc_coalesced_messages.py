"""``--coalesce`` against the installed tc. tc can put several actions in one message itself
(``tc actions add action ... action ...``, up to 32): the messages bpfbatch sends for a file of
short ``actions add`` lines must be byte for byte the ones tc sends for the same actions written
as one line per group, and leave the same ``tc -j actions ls`` state. Then files of multi-action
lines with failures inside joined messages: the same lines fail, the same state, as ``tc -b``."""

from __future__ import annotations

import random
import sys

import pytest

from bpfbatch import tc
from tc_helpers import (action_indexes, captured_messages, failed_lines, masked, side_by_side,
                        tc_state, veth_netns)

#: gact is not built into this kernel: mirred in its forms (redirect/mirror, both directions,
#: an explicit verdict, no_percpu, index before or after the device).
_PLAIN = ("action mirred egress redirect dev vethB index {i}",
          "action mirred ingress mirror dev vethA index {i} no_percpu",
          "action mirred egress mirror index {i} dev vethB pipe")
_COOKIE = "action mirred egress redirect dev vethB index {i} cookie {i:08x}"
_FORMS = (*_PLAIN, _COOKIE)
#: Every form with a cookie of its own. tc keeps a command's last cookie for the actions after
#: it, so a cookie-less action behind one with a cookie cannot be written in one tc line: the
#: byte comparison uses lines with no cookies or with one on every action.
_ALL_COOKIES = ("action mirred egress redirect dev vethB index {i} cookie {i:08x}",
                "action mirred ingress mirror dev vethA index {i} cookie {i:04x} no_percpu",
                "action mirred egress mirror index {i} dev vethB pipe cookie {i:06x}")
_STATE = (["actions", "list", "action", "mirred"],)


def _lines(rng: random.Random, count: int, forms: tuple[str, ...] = _FORMS) -> list[list[str]]:
    """``count`` lines of 1-3 actions each, indexes 1, 2, ... in order."""
    lines, index = [], 1
    for _ in range(count):
        actions = []
        for _ in range(rng.choice((1, 1, 2, 3))):
            actions.append(rng.choice(forms).format(i=index))
            index += 1
        lines.append(actions)
    return lines


def _groups(lines: list[list[str]]) -> list[list[str]]:
    """tc's limit, stated independently: consecutive lines share a message while its actions
    stay within 32."""
    groups: list[list[str]] = []
    for actions in lines:
        if groups and len(groups[-1]) + len(actions) <= 32:
            groups[-1] += actions
        else:
            groups.append(list(actions))
    return groups


def _write(path, lines: list[list[str]]) -> None:
    path.write_text("".join("actions add " + " ".join(actions) + "\n" for actions in lines))


@pytest.mark.parametrize("forms", [_PLAIN, _ALL_COOKIES], ids=["plain", "cookies"])
def test_coalesced_messages_are_tcs_own_multi_action_messages(tmp_path, forms):
    lines = _lines(random.Random(len(forms)), 150, forms)
    groups = _groups(lines)
    ours, theirs = tmp_path / "lines.tc", tmp_path / "groups.tc"
    _write(ours, lines)
    _write(theirs, groups)
    with veth_netns() as ns_tc, veth_netns() as ns_ours:
        their_messages = captured_messages(["ip", "netns", "exec", ns_tc, "tc", "-b", str(theirs)])
        our_messages = captured_messages([sys.executable, "-c",
                                          "from bpfbatch.cli import main; main()", "tc", "-b",
                                          str(ours), "--netns", ns_ours, "--coalesce"])
        their_state, our_state = tc_state(ns_tc, *_STATE), tc_state(ns_ours, *_STATE)
    assert len(their_messages) == len(groups) < len(lines)
    assert [masked(m).hex() for m in our_messages] == [masked(m).hex() for m in their_messages]
    assert our_state == their_state
    listed = [a for chunk in our_state["actions list action mirred"] for a in chunk.get("actions", ())]
    assert sorted(a["index"] for a in listed) == list(range(1, sum(map(len, lines)) + 1))


def _failing_file(rng: random.Random) -> list[list[str]]:
    """Multi-action lines (cookies on some actions: each line's own, never carried into the
    next line's actions by joining) with failures inside what become joined messages: an index used
    again (in a later line, or twice within one line), a missing device, an index-less add
    (the kernel picks one; it ends a group), an action tc cannot parse."""
    lines = _lines(rng, 120)
    taken = sum(map(len, lines))
    for _ in range(5):
        at = rng.randrange(len(lines))
        kind = rng.randrange(5)
        if kind == 0:
            bad = [rng.choice(_FORMS).format(i=rng.randint(1, taken))]
        elif kind == 1:
            taken += 1
            bad = [_FORMS[0].format(i=taken), _FORMS[1].format(i=taken)]
        elif kind == 2:
            taken += 1
            bad = [_FORMS[0].format(i=taken).replace("vethB", "nosuchdev")]
        elif kind == 3:
            bad = ["action mirred egress redirect dev vethB"]
        else:
            bad = ["action mirred egress bogus"]
        lines.insert(at, bad)
    return lines


@pytest.mark.parametrize("mode", [(), ("-force",)], ids=["stop", "force"])
@pytest.mark.parametrize("seed", [3, 4, 5])
def test_failures_inside_joined_multi_action_messages_match_tc(tmp_path, seed, mode):
    batch = tmp_path / "failing.tc"
    _write(batch, _failing_file(random.Random(seed)))
    theirs, their_state, ours, our_state = side_by_side(batch, mode, ("--coalesce", "--batch-bytes",
                                                                      "4096"))
    assert failed_lines(theirs.stderr)
    assert (ours.returncode, ours.stderr, our_state) == (theirs.returncode, theirs.stderr, their_state)


@pytest.mark.parametrize("force", [False, True], ids=["stop", "force"])
def test_rule_objects_sent_through_a_coalescing_session(force):
    """The Python API coalesces too: rule 41 reuses index 7 inside a joined message; the report
    and the kernel say the same lines were applied."""
    rules = [tc.Actions("add", (tc.Mirred("egress", "redirect", "vethB", index=i),))
             for i in range(1, 81)]
    rules.insert(40, tc.Actions("add", (tc.Mirred("egress", "redirect", "vethA", index=7),)))
    with veth_netns() as ns:
        with tc.Session(netns=ns, coalesce=True, force=force) as session:
            report = session.send(rules)
        applied = action_indexes(ns)
    assert (report.failed, report.first_failure.line, report.commands) == (1, 41, 81 if force else 41)
    assert report.applied == len(applied) == (80 if force else 40)
    assert applied == list(range(1, 81 if force else 41))
