"""The kind modules' lookup (:func:`bpfbatch.tc.kinds.parsers`): looked up one word at a
time, a module imported when its word is first asked for, it answers as the table of every
kind does, and a batch imports only the kinds it names."""

import importlib
import subprocess
import sys
from collections import Counter

import pytest

from bpfbatch.tc import kinds
from bpfbatch.tc.kinds import ROLES, Parsers


def test_no_word_names_two_kinds():
    named = Counter(word for name in sorted(kinds._MODULES)
                    for word in getattr(importlib.import_module(f"{kinds.__name__}.{name}"),
                                        "NAMES", ()))
    assert [word for word, n in named.items() if n > 1] == []


@pytest.mark.parametrize("role", ROLES)
def test_each_word_finds_what_the_whole_table_holds(role):
    table = Parsers(role).table()
    words = [*table, *kinds._MODULES, "clsact", "rsvp6", "pass", "drop", "nosuch", "1", "", "-"]
    for word in words:
        lazy = Parsers(role)  # a fresh lookup: the word is the first one asked
        assert lazy.get(word) is table.get(word), word
        assert (word in lazy) == (word in table), word
    with pytest.raises(KeyError):
        Parsers(role)["nosuch"]


def test_a_batch_imports_only_the_kinds_it_names():
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from bpfbatch.tc import parse_command; "
         "parse_command('actions add action mirred egress redirect dev vethB index 5'); "
         "parse_command('qdisc add dev vethA ingress'); "
         "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules "
         "if m.startswith('bpfbatch.tc.kinds.')))"],
        capture_output=True, text=True, check=True, timeout=60)
    loaded = set(eval(done.stdout))
    assert {"mirred", "ingress"} <= loaded
    assert not loaded & {"vlan", "u32", "skbedit", "tunnel_key", "flower", "police"}, loaded
