"""The ematch tree of basic and cgroup without a kernel: whatever the words, only the project's
errors escape (the scanner reads quotes, escapes and parentheses across words and lines); what
tc's scanner keeps from one line to the next stays within one batch."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bpfbatch.errors import BpfBatchError
from bpfbatch.tc.message import LineError, Message
from bpfbatch.tc.parse import CommandError, parse_command
from bpfbatch.tc.templates import TemplateReader

from test_tc_templates import FixedDevices

_TOKENS = st.sampled_from([
    "cmp(", "nbyte(", "u32(", "meta(", "canid(", "ipset(", "ipt(", "bogus(", "(", ")", "and",
    "OR", "not", "u8", "u16", "u32", "at", "layer", "link", "9", "mask", "trans", "eq", "gt",
    "lt", "0xff", "-14", "nexthdr+", "nexthdr+4", "sff", "eff", "0x1:0xf", "list", "dev",
    "nf_mark", "shift", "src,dst", '"', '"ab', 'c"', '\\"', "\\777", "\\8", "\\x4", "''",
    "classid", "1:1", "action", "drop", "match", "m", "help", "police", "b\udcffx(", "\udce9",
])
_PREFIXES = st.sampled_from(["filter add dev vethA ingress basic match",
                             "filter add dev vethA ingress cgroup match"])


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(_PREFIXES, st.lists(_TOKENS, max_size=14)), min_size=1, max_size=4))
def test_only_project_errors_escape(lines):
    text = ["".join([prefix, *(" " + token for token in tokens)]) + "\n" for prefix, tokens in lines]
    assert all(isinstance(parsed, Message) or (
        isinstance(parsed, LineError) and isinstance(parsed.error, BpfBatchError)
        and str(parsed.error).startswith(f"fuzz.tc:{number}: "))
        for number, parsed in _read(text, "fuzz.tc"))


def _read(text: list[str], name: str) -> list:
    """(line, parsed) for a batch, devices from a table."""
    devices = FixedDevices()
    try:
        return list(TemplateReader(devices).read(text, name))
    finally:
        devices.close()


_OPEN_STRING = "filter add dev vethA ingress basic match 'cmp(u8 at 0 eq 1) \"abc' classid 1:1"
_VALID = "filter add dev vethA ingress basic match 'cmp(u8 at 0 eq 1)' classid 1:1"


def test_a_string_left_open_runs_into_the_next_match_of_the_batch():
    """tc's scanner stays in string mode: the next line's tree is read as the string's rest
    (and, finding no term, tc re-sends the last tree)."""
    parsed = [p for _, p in _read([_OPEN_STRING + "\n", _VALID + "\n"], "b.tc")]
    assert isinstance(parsed[0], LineError)
    assert "What is" in str(parsed[1].error)  # the words after match, read as the string
    assert parse_command(_VALID).classifier is not None  # a line alone starts afresh


def test_a_tree_ended_by_the_line_leaves_its_last_word_to_the_classifier():
    try:
        parse_command("filter add dev vethA ingress basic match 'cmp(u8 at 0 eq 1)'")
    except CommandError as exc:
        assert str(exc).startswith('What is "cmp(u8 at 0 eq 1)"?')
    else:
        raise AssertionError("accepted")


def test_a_first_word_too_long_for_tcs_scanner_is_refused_not_looped_on():
    """tc's scanner refuses a word of 8191 bytes or more unread, tc steps back onto ``match``
    and reads it again for ever; here the line fails (with the line tc prints each time)."""
    line = f"filter add dev vethA ingress basic match nbyte({'a' * 8200} at 0) classid 1:1"
    try:
        parse_command(line)
    except CommandError as exc:
        assert str(exc).startswith("match argument too long.\n")
    else:
        raise AssertionError("accepted")
