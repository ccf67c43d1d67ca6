"""``--coalesce`` before encoding: consecutive ``actions add`` lines grouped as parsed actions
and encoded once. The joined message must be exactly ``Actions("add", all its actions)`` —
encoded directly from the lines' parsed rules — hold at most 32 actions, cover consecutive
lines, and split back into the very messages the lines send without coalescing."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from bpfbatch.errors import BpfBatchError
from bpfbatch.tc import specs as S
from bpfbatch.tc.coalesce import coalesce, coalescible
from bpfbatch.tc.message import Joined, LineError, Listing, Message, undo_of
from bpfbatch.tc.parse import CommandError, parse_command, parse_numbered
from bpfbatch.tc.rules import Actions
from bpfbatch.tc.templates import TemplateReader

from test_tc_templates import FixedDevices


@pytest.fixture
def devices():
    resolver = FixedDevices()
    yield resolver
    resolver.close()


def coalesced(lines: list[str], resolve) -> list:
    reader = TemplateReader(resolve, unencoded=coalescible).read(lines, "t.tc")
    return list(coalesce(reader, resolve, "t.tc"))


def _outcome(item) -> tuple:
    if isinstance(item, LineError):
        return "error", str(item.error), item.fatal
    if isinstance(item, Listing):
        return "listing", item.words
    return item.msg_type, item.flags, bytes(item.body)


def per_line(items: list) -> list[tuple[int, tuple]]:
    """Every line's outcome, a joined message split back into its lines' own messages."""
    out = []
    for line, item in items:
        if isinstance(item, Joined):
            parts = item.split()
            assert len(parts) == len(item.lines) and item.lines[-1] == line
            out += [(n, _outcome(part)) for n, part in zip(item.lines, parts)]
        else:
            out.append((line, _outcome(item)))
    return out


def plain(lines: list[str], resolve) -> list[tuple[int, tuple]]:
    return [(n, _outcome(item)) for n, item in TemplateReader(resolve).read(lines, "t.tc")]


def _action_line(rng: random.Random, index: int) -> tuple[str, int]:
    """An ``actions add`` line of 1-3 actions numbered from ``index``; (text, actions)."""
    words, count = ["actions add"], rng.choice((1, 1, 1, 2, 3))
    for i in range(index, index + count):
        form = rng.randrange(5)
        if form == 0:
            words.append(f"action mirred egress redirect dev vethB index {i}")
        elif form == 1:
            words.append(f"action mirred ingress mirror dev vethA pipe index {i} no_percpu")
        elif form == 2:
            words.append(f"action gact drop index {i} cookie {i:08x}")
        elif form == 3:
            words.append(f"action pass index {i}")
        else:
            words.append(f"action mirred egress mirror index {i} dev vethB")
    return " ".join(words) + "\n", count


def test_joined_message_is_the_direct_encoding_of_all_its_actions(devices):
    rng = random.Random(13)
    lines, index = [], 1
    while len(lines) < 400:
        text, count = _action_line(rng, index)
        lines.append(text)
        index += count
    items = coalesced(lines, devices)
    joined = [item for _, item in items if isinstance(item, Joined)]
    assert len(joined) > 20
    covered = []
    for line, item in items:
        numbers = item.lines if isinstance(item, Joined) else (line,)
        rules = [parse_command(lines[n - 1]) for n in numbers]
        actions = tuple(a for rule in rules for a in rule.actions)
        assert len(actions) <= S.TCA_ACT_MAX_PRIO
        message = item.message if isinstance(item, Joined) else item
        assert (message.msg_type, message.flags, bytes(message.body)) == \
            Actions("add", actions).message(devices)
        if numbers[-1] < len(lines):  # a group ends only where the next line would not fit
            following = parse_command(lines[numbers[-1]])
            assert len(actions) + len(following.actions) > S.TCA_ACT_MAX_PRIO
        covered += numbers
    assert covered == list(range(1, len(lines) + 1))
    assert per_line(items) == plain(lines, devices)


def test_other_lines_end_a_group_and_keep_their_place(devices):
    lines = [f"actions add action mirred egress redirect dev vethB index {i}\n" for i in range(1, 6)]
    lines += ["actions add action mirred egress redirect dev vethB\n",          # 6: no index
              "actions add action mirred egress redirect dev nosuchdev index 9\n",  # 7: no device
              "actions add action mirred egress redirect dev vethB index 10\n",
              "actions add action mirred egress redirect dev vethB index 11\n",
              "actions del action mirred index 3\n",                               # 10
              "actions add action mirred egress redirect dev vethB index 0\n",    # 11: kernel picks
              "filter add dev vethA ingress prio 1 matchall action drop\n",
              "actions add action mirred egress bogus\n",                          # 13: bad line
              "actions replace action mirred egress redirect dev vethB index 12\n",
              "actions add action mirred egress redirect dev vethB index 13\n"]
    items = coalesced(lines, devices)
    shapes = [(line, item.lines if isinstance(item, Joined) else type(item).__name__)
              for line, item in items]
    assert shapes == [(5, (1, 2, 3, 4, 5)), (6, "Message"), (7, "LineError"), (9, (8, 9)),
                      (10, "Message"), (11, "Message"), (12, "Message"), (13, "LineError"),
                      (14, "Message"), (15, "Message")]
    assert str(items[2][1].error).startswith("t.tc:7: ")
    assert per_line(items) == plain(lines, devices)


def test_rule_objects_are_coalesced_like_lines(devices):
    lines = [f"actions add action mirred egress redirect dev vethB index {i}\n" for i in range(1, 70)]
    from_rules = list(coalesce(((n, parse_command(t)) for n, t in enumerate(lines, 1)), devices, "t.tc"))
    from_lines = coalesced(lines, devices)
    assert [(n, _outcome(i.message if isinstance(i, Joined) else i)) for n, i in from_rules] == \
        [(n, _outcome(i.message if isinstance(i, Joined) else i)) for n, i in from_lines]
    assert [i.lines for _, i in from_lines if isinstance(i, Joined)] == \
        [tuple(range(1, 33)), tuple(range(33, 65)), tuple(range(65, 70))]


_ACTION_TEXT = st.sampled_from([
    "action mirred egress redirect dev vethB", "action mirred ingress mirror dev vethA",
    "action gact drop", "action pass", "action mirred", "action gact pipe"])
_INDEX = st.sampled_from(["", " index 0", " index 1", " index 4294967295", " index 7"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_ACTION_TEXT, _INDEX), min_size=1, max_size=4),
       st.sampled_from(["add", "replace", "change"]))
def test_coalescible_means_undoable_by_index(actions, verb):
    """The coalescer joins exactly the lines whose messages the sender can undo by index."""
    devices = FixedDevices()
    try:
        text = f"actions {verb} " + " ".join(a + i for a, i in actions)
        try:
            rule = parse_command(text)
            message = Message(*rule.message(devices))
        except (CommandError, BpfBatchError):  # a refused line says nothing about the rule
            return
        assert coalescible(rule) == (undo_of(message) is not None)
    finally:
        devices.close()


def test_repeated_action_shapes_are_filled_from_rule_templates(devices):
    """Repeated shapes skip the parser (a rule template per shape); odd index tokens — zero,
    leading zeros, hex, past 32 bits — go back to it. Either way every line's rule, and so its
    bytes and its group, are what the parser gives."""
    odd = ["0", "00", "007", "0x10", "4294967296", "4294967295", "1e3", "-1"]
    rng = random.Random(7)
    shapes = ["actions add action mirred egress redirect dev vethB index {}",
              "actions add action mirred egress mirror index {} dev vethB pipe",
              "actions add action gact drop index {} cookie aa action mirred egress redirect "
              "dev vethA index {} no_percpu",
              "actions add action pass index {} action pipe index {}"]
    lines, index = [], 1
    for _ in range(500):
        shape = rng.choice(shapes)
        values = []
        for _ in range(shape.count("{}")):
            values.append(rng.choice(odd) if rng.random() < 0.05 else str(index))
            index += 1
        lines.append(shape.format(*values) + "\n")
    reader = TemplateReader(devices, unencoded=coalescible)
    items = list(coalesce(reader.read(lines, "t.tc"), devices, "t.tc"))
    assert reader.filled > 400
    assert per_line(items) == plain(lines, devices)
    rules = [(n, parse_numbered(n, lines[n - 1], "t.tc")) for n in range(1, len(lines) + 1)]
    from_parser = list(coalesce(rules, devices, "t.tc"))
    assert [(n, _outcome(i.message if isinstance(i, Joined) else i)) for n, i in items] == \
        [(n, _outcome(i.message if isinstance(i, Joined) else i)) for n, i in from_parser]
