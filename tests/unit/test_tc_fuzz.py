"""A grammar fuzzer of the batch parser and encoder: lines built from tc's own words, numbers
at and past every range edge, and junk. Whatever the line, the reader yields an encoded message
or a LineError naming the line (or, for a read-only line, its Listing) — only the project's
errors, never a traceback; with
``--coalesce`` every line still sends the same bytes or fails the same way."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bpfbatch.errors import BpfBatchError
from bpfbatch.tc.message import LineError, Listing, Message
from bpfbatch.tc.templates import TemplateReader

from test_tc_coalesce import coalesced, per_line, plain
from test_tc_templates import FixedDevices

_NUMBERS = st.sampled_from(["0", "1", "7", "255", "256", "4095", "4096", "65535", "65536",
                            "4294967295", "4294967296", "18446744073709551616", "-1", "0x10",
                            "0xffffffff", "1e3", "08", "3bit", "10gbit", "1mbit", "68376", ""])
_WORDS = st.sampled_from([
    "actions", "action", "add", "del", "change", "replace", "filter", "qdisc", "class", "dev",
    "vethA", "vethB", "nosuchdev", "ingress", "egress", "root", "parent", "handle", "prio",
    "protocol", "ip", "all", "802.1Q", "IP", "u32", "bpf", "matchall", "flower", "match", "u16",
    "src", "dst", "sport", "dport", "tos", "at", "ht", "link", "divisor", "hashkey", "mask",
    "classid", "flowid", "mirred", "redirect", "mirror", "gact", "drop", "pass", "pipe", "index",
    "no_percpu", "htb", "rate", "ceil", "quantum", "default", "r2q", "1:", "1:1", "800::",
    "1:2:3", "fff:ff:fff", "10.0.0.1/32", "10.0.0.0/8", "1.2.3.4/40", "pinned", "da",
    "src_mac", "e4:11:00:00:00:00", "skip_hw", "bogus", "'quoted word'", "#", "\\\\"])
_TOKEN = st.one_of(_WORDS, _NUMBERS, st.text(max_size=6))
_PREFIXES = st.sampled_from([
    "actions add action mirred egress redirect dev vethB index",
    "actions add action gact",
    "filter add dev vethA ingress protocol ip prio 1 u32",
    "filter add dev vethA ingress protocol ip prio 1 handle",
    "filter add dev vethA parent",
    "qdisc add dev vethA root handle 1: htb",
    "class add dev vethA parent 1: classid 1:1 htb rate",
    "actions del action mirred index",
    "",
])


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.tuples(_PREFIXES, st.lists(_TOKEN, max_size=12)), min_size=1, max_size=6))
def test_only_project_errors_escape(lines):
    text = ["".join([prefix, *(" " + token for token in tokens)]) + "\n" for prefix, tokens in lines]
    devices = FixedDevices()
    try:
        for number, parsed in TemplateReader(devices).read(text, "fuzz.tc"):
            if isinstance(parsed, LineError):
                assert isinstance(parsed.error, BpfBatchError)
                assert str(parsed.error).startswith(f"fuzz.tc:{number}: ")
            elif not isinstance(parsed, Listing):
                assert isinstance(parsed, Message) and len(parsed.body) >= 4
        # coalescing changes how lines travel, never what each line sends or why it fails
        assert per_line(coalesced(text, devices)) == plain(text, devices)
    finally:
        devices.close()


def test_the_issues_tracebacks_are_line_errors():
    """Inputs that used to escape the encoder as struct.error / ZeroDivisionError."""
    lines = ["filter add dev vethA parent 123456789a protocol ip prio 1 u32 match ip dst 1.2.3.4\n",
             "filter add dev vethA ingress protocol ip prio 1 u32 match u32 0 0 hashkey mask 4 at 68376\n",
             "class add dev vethA parent 1: classid 1:1 htb rate 3bit\n"]
    devices = FixedDevices()
    try:
        results = list(TemplateReader(devices).read(lines, "f.tc"))
    finally:
        devices.close()
    # tc keeps a bare classid's last 8 hex digits (get_tc_classid): parent 0x3456789a is sent
    assert [type(parsed) for _, parsed in results] == [Message, LineError, LineError]
    assert str(results[2][1].error) == 'f.tc:3: "rate" is required.'
