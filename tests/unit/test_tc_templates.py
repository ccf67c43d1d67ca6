"""Line-shape templates (the batch reader's fast path) against the full parser and encoder:
every line, repeated shape or not, odd value or not, must give the same bytes or the same
error through both paths."""

from __future__ import annotations

import pytest

from hypothesis import given, settings, strategies as st

from bpfbatch.errors import BpfBatchError, NotFoundError
from bpfbatch.tc import templates
from bpfbatch.tc.grammar import DEVICES
from bpfbatch.tc.parse import parse_batch
from bpfbatch.tc.resolve import Resolver
from bpfbatch.tc.message import LineError
from bpfbatch.tc.templates import TemplateReader, encode_rule


class FixedDevices(Resolver):
    """Devices and pinned programs from tables, not from the running system."""

    def _lookup(self, dev: str) -> int:
        if dev not in ("vethA", "vethB"):
            raise NotFoundError(f'cannot find device "{dev}"')
        return {"vethA": 3, "vethB": 2}[dev]

    def program_fd(self, path: str) -> int:
        if path != "/sys/fs/bpf/prog":
            raise NotFoundError(f"no pinned program at {path}")
        return 9


@pytest.fixture
def devices():
    resolver = FixedDevices()
    yield resolver
    resolver.close()


def _outcome(item, resolve):
    """What the sender would make of one reader item: (type, flags, bytes) or the error text."""
    if isinstance(item, LineError):
        return ("error", type(item.error).__name__, str(item.error))
    try:
        msg_type, flags, body = (item if isinstance(item, tuple) else item.message(resolve))[:3]
    except BpfBatchError as exc:
        return ("error", type(exc).__name__, str(exc))
    return (msg_type, flags, bytes(body))


def _both_paths(lines: list[str], resolve) -> tuple[list, list, int]:
    """(fast outcomes, full-parser outcomes, how many lines came from templates)."""
    reader = TemplateReader(resolve)
    fast = list(reader.read(lines, "t.tc"))
    token = DEVICES.set(resolve.find_device)  # the full parser with the devices the reader knows
    try:
        full = [(n, r if isinstance(r, LineError) else encode_rule(r, resolve, "t.tc", n))
                for n, r in parse_batch(lines, "t.tc")]
    finally:
        DEVICES.reset(token)
    assert [n for n, _ in fast] == [n for n, _ in full]
    filled = reader.filled
    return [_outcome(i, resolve) for _, i in fast], [_outcome(i, resolve) for _, i in full], filled


def test_repeated_mirred_actions_come_from_one_template(devices):
    lines = [f"actions add action mirred egress redirect dev vethB index {i}\n" for i in range(1, 101)]
    fast, full, filled = _both_paths(lines, devices)
    assert fast == full
    assert filled == 98  # the first line parses, the second builds the template


def test_u32_hash_layout_lines_share_a_template(devices):
    lines = [f"filter add dev vethA ingress protocol ip prio 1 u32 ht 1:{i & 255:x}: match ip dst "
             f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}/32 action mirred egress redirect dev vethB\n"
             for i in range(1, 600)]
    fast, full, filled = _both_paths(lines, devices)
    assert fast == full
    assert filled == len(lines) - 2


def test_alternating_shapes_each_keep_their_template(devices):
    lines = [f"actions add action mirred egress redirect dev vethB index {i}\n" if i % 2 else
             f"actions add action gact drop index {i}\n" for i in range(1, 61)]
    fast, full, filled = _both_paths(lines, devices)
    assert fast == full
    assert filled == len(lines) - 4


def test_tdc_batch_flower_lines(devices):
    lines = [f"filter add dev vethA prio 1 protocol ip ingress handle {n + 1}  flower skip_hw "
             f"src_mac e4:11:00:{n >> 16 & 255:02x}:{n >> 8 & 255:02x}:{n & 255:02x} "
             f"dst_mac e4:12:00:{n >> 16 & 255:02x}:{n >> 8 & 255:02x}:{n & 255:02x} action drop \n"
             for n in range(300)]
    fast, full, filled = _both_paths(lines, devices)
    assert fast == full
    assert filled == len(lines) - 2


@pytest.mark.parametrize("odd", [
    "index 0", "index 007", "index 4294967296", "index 0x10", "index -1", "index 1 index 2",
    "index ５",  # a non-ASCII digit
])
def test_odd_values_are_judged_by_the_parser(devices, odd):
    good = [f"actions add action mirred egress redirect dev vethB index {i}\n" for i in range(1, 5)]
    lines = good + [f"actions add action mirred egress redirect dev vethB {odd}\n"] + good
    fast, full, _ = _both_paths(lines, devices)
    assert fast == full


_MIRRED = "actions add action mirred egress redirect dev vethB "


@pytest.mark.parametrize("odd", [
    "index 5 # a comment\n", "index 5#comment\n", "index 5#\n", "# index 5\n", "\n",
    "index \\\n5\n", "index 5 \\\n# cut\n",
    # a continued line, then a whole line of the run's shape: joined, not read on its own
    "index 5 \\\n" + _MIRRED + "index 6\n",
])
def test_comments_and_continuations_inside_a_run(devices, odd):
    """The reader matches raw lines against the last shape before cutting comments and
    joining continued lines: every such line must still read as tc reads it."""
    good = [f"{_MIRRED}index {i}\n" for i in range(10, 14)]
    lines = good + "".join([_MIRRED + odd] + good).splitlines(keepends=True)
    fast, full, filled = _both_paths(lines, devices)
    assert fast == full
    assert filled >= len(good) - 2 + len(good)  # the run around the odd line came from a template


def test_a_batch_ending_inside_a_continuation_after_a_run(devices):
    lines = [f"{_MIRRED}index {i}\n" for i in range(1, 5)] + [f"{_MIRRED}index 5 \\\n"]
    fast, full, _ = _both_paths(lines, devices)
    assert fast == full and full[-1][0] == "error"


def test_values_that_change_structure_keep_the_shape_on_the_parser(devices):
    # two matches on one word: merged while equal, a conflict when not
    lines = [f"filter add dev vethA ingress protocol ip prio 1 u32 match ip dst 10.0.0.{a}/32 "
             f"match ip dst 10.0.0.{b}/32 classid 1:1\n" for a, b in ((1, 1), (2, 2), (3, 3), (4, 5))]
    fast, full, filled = _both_paths(lines, devices)
    assert fast == full
    assert full[-1][0] == "error" and filled == 0


def test_unknown_device_and_quotes_go_through_the_parser(devices):
    lines = [f"actions add action mirred egress redirect dev vethC index {i}\n" for i in range(1, 5)]
    lines += [f"actions add action mirred egress redirect dev 'vethB' index {i}\n" for i in range(1, 5)]
    fast, full, filled = _both_paths(lines, devices)
    assert fast == full
    assert filled == 0


def test_tables_stay_bounded(devices, monkeypatch):
    monkeypatch.setattr(templates, "MAX_SHAPES", 3)
    monkeypatch.setattr(templates, "MAX_SEEN", 5)
    reader = TemplateReader(devices)
    lines = [f"actions add action mirred egress redirect dev vethB index {i} action gact drop"
             f"{' no_percpu' if i % 2 else ''} index {j}\n" for j in range(1, 40) for i in range(1, 4)]
    lines += [f"filter add dev vethA ingress prio {p} matchall action drop\n" for p in range(1, 40)]
    assert len(list(reader.read(lines, "t.tc"))) == len(lines)
    assert len(reader._templates) <= 3 and len(reader._seen) <= 5
    fast, full, _ = _both_paths(lines, devices)
    assert fast == full


# --- every supported form, random values (valid and not), through both paths ----------------

def _mostly(valid, odd):
    """Values valid in most places three times in four, anything else otherwise."""
    return st.one_of(valid, valid, valid, odd)


_number = _mostly(st.integers(1, 0xFFFF).map(str), st.integers(0, 2 ** 32 + 2).map(str)
                  | st.sampled_from(["007", "0x1f", "-1", "1a", "00"]))
_hex3 = _mostly(st.integers(1, 0xFFF), st.integers(0, 0x1001)).map(lambda v: f"{v:x}")
_hex2 = _mostly(st.integers(0, 0xFF), st.integers(0, 0x101)).map(lambda v: f"{v:x}" if v else "")
_table = _mostly(st.builds(lambda h, b: f"{h}:{b}:", _hex3, _hex2), st.sampled_from(["0::", "1:2:3", "A:1:"]))
_handle = _mostly(st.builds(lambda h, b, n: f"{h}:{b}:{n}", _hex3, _hex2, _hex3), _number)
_octet = _mostly(st.integers(0, 255), st.integers(0, 256))
_address = st.builds(lambda a, b, c, d, p: f"{a}.{b}.{c}.{d}{p}", _octet, _octet, _octet, _octet,
                     st.sampled_from(["", "/32", "/24", "/8", "/0", "/33"]))
_mac = _mostly(st.lists(st.integers(0, 255), min_size=6, max_size=6).map(
    lambda bs: ":".join(f"{b:02x}" for b in bs)), st.sampled_from(["e4:11:00", "zz:11:00:00:00:00"]))

_FORMS = [
    st.builds("actions add action mirred egress redirect dev vethB index {}".format, _number),
    st.builds("actions add action gact drop index {} action mirred ingress mirror dev vethA index {} pipe".format,
              _number, _number),
    st.builds("actions del action mirred index {}".format, _number),
    st.builds("filter add dev vethA ingress protocol ip prio {} handle {} u32 ht {} match ip dst {} "
              "action mirred egress redirect dev vethB index {}".format,
              _number, _handle, _table, _address, _number),
    st.builds("filter add dev vethA ingress protocol ip prio 1 u32 ht 800:: match ip src {} "
              "hashkey mask 0x000000ff at 16 link {}".format, _address, _table),
    st.builds("filter add dev vethA parent ffff: protocol ip pref {} u32 match ip src {} match ip "
              "dport {} 0xffff classid 1:10".format, _number, _address, _number),
    st.builds("filter del dev vethA ingress protocol ip prio {} handle {} u32".format, _number, _handle),
    st.builds("filter add dev vethA prio {} protocol ip ingress handle {}  flower skip_hw src_mac {} "
              "dst_mac {} action drop index {}".format, _number, _handle, _mac, _mac, _number),
    st.builds("filter add dev vethA ingress prio {} handle {} bpf da pinned /sys/fs/bpf/prog classid 1:2"
              .format, _number, _handle),
    st.builds("filter add dev vethA ingress priority {} matchall skip_sw action mirred egress "
              "redirect dev vethB index {}".format, _number, _number),
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_FORMS), min_size=1, max_size=6), st.data())
def test_fast_path_equals_full_parser_for_random_lines(forms, data):
    # each drawn form four times with fresh values, so templates get built and then used
    batch = [f"{data.draw(form)}\n" for form in forms for _ in range(4)]
    resolver = FixedDevices()
    try:
        fast, full, _ = _both_paths(batch, resolver)
    finally:
        resolver.close()
    assert fast == full


def test_lines_tc_comments_on_never_come_from_a_template(devices):
    """skbmod and ife print notes on stderr while tc parses them: a template would fill the
    message without them, so every such line goes through the parser and carries its notes."""
    lines = [f"actions add action skbmod set dmac 02:00:00:00:00:{i:02x} index {i}\n"
             for i in range(1, 6)]
    items = list(TemplateReader(devices).read(lines, "notes"))
    assert [item.said for _, item in items] == [f"dst MAC address <02:00:00:00:00:{i:02x}>\n"
                                                for i in range(1, 6)]
