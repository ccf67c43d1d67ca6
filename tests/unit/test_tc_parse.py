"""The tc batch parser: reading like iproute2's getcmdline()/makeargs(), the grammar, and
errors that name FILE:LINE and the token."""

from __future__ import annotations

import io
import tracemalloc

import pytest

from bpfbatch.errors import InputError
from bpfbatch.tc.message import LineError, Listing
from bpfbatch.tc import specs as S
from bpfbatch.tc.parse import (CommandError, parse_batch, parse_classid, parse_command, parse_u32_handle,
                               read_commands, split_words)
from bpfbatch.tc.htb import HtbClass, parse_rate
from bpfbatch.tc.rules import (EGRESS, INGRESS, ActionRef, Actions, Class, Filter, Gact, Htb,
                               Mirred, Qdisc, U32, U32Key, ip_match)


def test_comments_continuations_and_line_numbers_like_tc():
    text = ("# header\n"
            "qdisc add dev a ingress\n"
            "\n"
            "actions add action mirred egress \\\n"
            "   redirect dev b index 1   # trailing comment\n"
            "actions add action drop # no continuation here \\\n"
            "actions add action pass\n"
            "   \t  \n")
    assert list(read_commands(io.StringIO(text))) == [
        (2, "qdisc add dev a ingress\n"),
        # a continued command carries the number of its last physical line, as in tc's report
        (5, "actions add action mirred egress    redirect dev b index 1   "),
        (6, "actions add action drop "),
        (7, "actions add action pass\n"),
    ]


def test_continuation_joins_without_a_space():
    assert list(read_commands(["actions add act\\\n", "ion pass\n"])) == [(2, "actions add action pass\n")]


def test_missing_continuation_line():
    assert list(read_commands(["actions add action pass\n", "actions add \\\n"])) == \
        [(1, "actions add action pass\n"), (2, None)]
    (_, first), (_, second) = parse_batch(["actions add action pass\n", "actions add \\\n"], "f.tc")
    assert str(second.error) == "f.tc:2: Missing continuation line"  # tc's words


def test_quoted_words():
    assert split_words("a 'b c' \"d\"  e") == ["a", "b c", "d", "e"]


def test_handles_and_classids():
    assert parse_u32_handle("800::") == 0x80000000
    assert parse_u32_handle("1:ff:fff") == 0x001FFFFF
    assert parse_u32_handle("0x10") == 0x10
    assert parse_u32_handle("1:2:1000") is None  # node id > 0xfff: tc's "Illegal filter ID"
    assert parse_u32_handle("10") is None
    assert parse_classid("1:10") == 0x10010
    assert parse_classid("ffff:") == 0xFFFF0000
    assert parse_classid("root") == S.TC_H_ROOT
    assert parse_classid("1:x") is None


def test_qdiscs():
    assert parse_command("qdisc add dev a ingress") == Qdisc("add", "a", "ingress")
    assert parse_command("q replace dev a clsact") == Qdisc("replace", "a", "clsact")
    assert parse_command("qdisc delete dev a root handle 1: htb") == Qdisc("del", "a", Htb(), S.TC_H_ROOT, 0x10000)
    assert parse_command("qdisc add dev a parent 1:1 handle 10: htb default 20 r2q 4") == \
        Qdisc("add", "a", Htb(default=0x20, r2q=4), 0x10001, 0x100000)


def test_htb_classes_and_rates():
    assert parse_rate("100mbit") == 12_500_000
    assert parse_rate("2Mibit") == 262_144
    assert parse_rate("1000000") == 125_000  # a bare number is bit/s
    assert parse_rate("1MBps") == 1_000_000
    assert parse_command("class add dev a parent 1:1 classid 1:10 htb rate 1mbit ceil 10mbit prio 2") == \
        Class("add", "a", 0x10010, HtbClass(125_000, 1_250_000, prio=2), 0x10001)
    assert parse_command("class del dev a classid 1:30") == Class("del", "a", 0x10030)


def test_u32_filter_with_hash_layout_and_actions():
    rule = parse_command("filter add dev a ingress protocol ip pref 1 handle 1:cc:2 u32 ht 1:cc: "
                         "match ip dst 10.0.0.204/32 action mirred egress redirect dev b index 3 "
                         "no_percpu action drop")
    assert rule == Filter("add", "a", INGRESS, U32(
        keys=(U32Key(0x0A0000CC, 0xFFFFFFFF, 16),), ht=0x001CC000,
        actions=(Mirred("egress", "redirect", "b", 3, no_percpu=True), Gact("drop"))),
        prio=1, protocol=S.ETH_P_IP, handle=0x001CC002)


def test_u32_keys_on_one_word_merge_like_tc():
    rule = parse_command("f add dev a egress u32 match ip sport 80 0xffff match ip dport 443 0xffff "
                         "match ip protocol 6 0xff match ip tos 0x10 0xff")
    assert rule.parent == EGRESS
    assert rule.classifier.keys == (U32Key(0x005001BB, 0xFFFFFFFF, 20), U32Key(0x00060000, 0x00FF0000, 8),
                                    U32Key(0x00100000, 0x00FF0000, 0))
    assert ip_match("src", "10.1.2.3/8") == U32Key(0x0A000000, 0xFF000000, 12)


def test_actions_commands():
    assert parse_command("actions del action mirred index 9 action gact index 2") == \
        Actions("del", (ActionRef("mirred", 9), ActionRef("gact", 2)))
    # tc's mirror takes its verdict right after the device; after the index it is a new action
    assert parse_command("action change action mirred ingress mirror dev b pipe index 4") == \
        Actions("change", (Mirred("ingress", "mirror", "b", 4, verdict="pipe"),))
    assert parse_command("action change action mirred ingress mirror dev b index 4 pipe").actions == \
        (Mirred("ingress", "mirror", "b", 4), Gact("pipe"))
    assert parse_command("actions add action mirred ingress mirror dev b jump 10 index 9").actions == \
        (Mirred("ingress", "mirror", "b", 9, verdict="jump 10"),)
    assert parse_command("actions add action mirred egress mirror index 1 dev b cookie a1b2").actions == \
        (Mirred("egress", "mirror", "b", 1, cookie=b"\xa1\xb2"),)
    # tc never clears a command's cookie: later actions without one carry the last one given
    assert [a.cookie for a in parse_command("actions add action pass action drop cookie aa action "
                                            "pipe action ok cookie bbcc action drop").actions] == \
        [None, b"\xaa", b"\xaa", b"\xbb\xcc", b"\xbb\xcc"]
    # as in tc, a verdict right after a redirect starts a new (gact) action
    assert parse_command("actions add action mirred egress redirect dev b pass").actions == \
        (Mirred("egress", "redirect", "b"), Gact("pass"))


def test_gact_forms_tc_reads():
    """m_gact.c's grammar: random, an index alone (an existing action), verdict prefixes, and
    any word with no action module of its own falling to gact."""
    assert parse_command("actions add action pass random determ drop 2 index 90").actions == \
        (Gact("pass", 90, prob=(S.GACT_RANDOM["determ"], "drop", 2)),)
    assert parse_command("actions add action gact index 1").actions == (Gact("pass", 1),)
    assert parse_command("actions add action gact goto chain 5 index 4").actions == \
        (Gact("goto chain 5", 4),)
    assert parse_command("actions add action dr i 3 action rec").actions == \
        (Gact("drop", 3), Gact("reclassify"))
    assert parse_command("actions add action trap").actions == (Gact("trap"),)
    # an action list ends at flowid/classid: u32 reads them
    rule = parse_command("filter add dev a ingress u32 match u32 0 0 action drop flowid 1:5")
    assert rule.classifier.actions == (Gact("drop"),) and rule.classifier.classid == 0x10005


@pytest.mark.parametrize("line,text,fatal", [
    ("actions add action pump index 386", "Bad action type pump\nUsage: ... gact <ACTION>", True),
    ("actions add action gact", 'Command line is not complete. Try option "help"', True),
    ("actions add action pass help", "Usage: ... gact <ACTION> [RAND] [INDEX]", True),
    ("actions add action drop index 4294967296", 'Illegal "index"\nbad action parsing\n'
     "parse_action: bad value (3:drop)!\nIllegal \"action\"", False),
    ("actions add action pass random foo drop 2", 'Illegal "random type"\nbad action parsing\n'
     "parse_action: bad value (5:pass)!", False),
    ("actions add action pass random determ drop 20000", "Illegal probability val  0x4e20\n", False),
    ("actions add action pass random determ", "Command line is not complete.", True),
    ("actions add action goto 5", '"chain index" expected\nUsage: ... gact', True),
    ("actions add action jump x", 'Invalid "jump count" (x)\nUsage: ... gact', True),
])
def test_gact_refusals_in_tcs_words(line, text, fatal):
    with pytest.raises(CommandError) as refused:
        parse_command(line)
    assert str(refused.value).startswith(text) and refused.value.fatal == fatal


@pytest.mark.parametrize("line", ["filter show dev a ingress", "f ls dev a", "filter get dev a",
                                  "actions list action mirred", "a get action gact index 1",
                                  "actions flush action mirred", "qdisc", "class show dev a",
                                  "q s dev a", "filter help"])
def test_read_only_lines_are_listings(line):
    assert parse_command(line) == Listing(tuple(line.split()))


def test_write_verbs_take_a_prefix_first():
    # tc checks add/change/replace/delete before its listing verbs: "d" deletes
    assert parse_command("filter d dev a ingress").verb == "del"


def test_tdc_batch_lines():
    rule = parse_command("filter add dev v prio 1 protocol ip ingress handle 1  flower skip_hw "
                         "src_mac e4:11:00:00:01:02 dst_mac e4:12:00:00:01:02 action drop index 1")
    assert rule.handle == 1 and rule.classifier.kind == "flower"
    attrs = dict(rule.classifier.attrs)  # flower's TCA_FLOWER_* attributes, by number
    assert attrs[6] == bytes.fromhex("e41100000102") and attrs[7] == b"\xff" * 6  # ETH_SRC, mask
    assert attrs[22] == b"\x01\0\0\0"  # FLAGS: skip_hw
    assert attrs[3] == [Gact("drop", 1)]


@pytest.mark.parametrize("line,message", [
    ("chain add dev a", "unsupported command 'chain'"),
    ("monitor", "unsupported command 'monitor'"),
    ("filter add dev a ingress u32 match ip dst 1.2.3.4 police rate 1mbit",
     "'burst' requires 'rate'. Illegal \"police\""),
    ("filter add dev a ingress u32 match ip6 dst ::1", 'Illegal "match"'),
    ("filter add dev a ingress foo", "unsupported filter option or classifier 'foo'"),
    ("filter add dev a ingress matchall action xt -j", "too few arguments for xt, need at least "
     "'-j <target>' bad action parsing parse_action: bad value (2:xt)!"),
    ("filter add dev a ingress matchall action pedit ex munge ip dst set 1.1.1.400",
     "bad pedit parsing Bad pedit construct (ip) Usage: ... pedit munge"),
    ("filter add dev a ingress bpf bytecode '2,6 0 0 0'",
     "Parsed program length is less than encoded length parameter! Unable to parse bpf command line"),
    ("filter add dev a ingress prio x u32", 'Error: argument "x" is wrong: invalid priority value'),
    ("filter add dev a ingress u32 divisor 3", 'Illegal "divisor"'),
    ("filter add dev a ingress handle 1:2:1000 u32", "Illegal filter ID"),
    ("filter add dev a ingress u32 match ip sport 80", 'Illegal "match"'),
    ("filter add dev a ingress u32 match ip dst 1.2.3.4/33", 'Illegal "match"'),
    ("filter add dev a ingress flower src_mac e4:zz", '"zz" is invalid lladdr. Illegal "src_mac"'),
    ("actions add action mirred sideways redirect dev b", "mirred option not supported sideways "
     "bad action parsing parse_action: bad value (5:mirred)! Illegal \"action\""),
    ("actions add action mirred egress redirect index 3", 'Command line is not complete.'),
    ("actions add action gact frobnicate", "Bad action type frobnicate Usage: ... gact"),
    ("actions del action mirred 9", "expected 'index', got '9'"),
    ("qdisc add ingress", "missing 'dev DEV'"),
    ("class add dev a parent 1: classid 1:1 htb ceil 1mbit", "htb class needs 'rate RATE'"),
    ("class add dev a parent 1: classid 1:1 htb rate 1furlong", "bad rate '1furlong'"),
    ("class add dev a parent 1: classid 1:1 htb rate 1mbit burst 15furlongs", 'Illegal "burst"'),
    ("class add dev a parent 1: htb rate 1mbit", "missing 'classid ID'"),
    ("qdisc add dev a root sfq", "unsupported qdisc option or kind 'sfq'"),
    ("actions add 'unterminated", "unterminated quoted string"),
])
def test_errors_name_file_line_and_token(line, message):
    results = list(parse_batch(io.StringIO(f"# first\n\n{line}\n"), "rules.tc"))
    assert len(results) == 1
    number, error = results[0]
    assert number == 3
    assert isinstance(error, LineError) and isinstance(error.error, InputError)
    assert str(error.error).startswith(f"rules.tc:3: {message}")


def test_streaming_keeps_memory_bounded():
    """50k commands parsed from a generator: memory does not grow with the input."""
    lines = (f"actions add action mirred egress redirect dev b index {i}\n" for i in range(50_000))
    tracemalloc.start()
    try:
        count = 0
        for _ in parse_batch(lines, "big.tc"):
            count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 50_000
    assert peak < 1 << 20
