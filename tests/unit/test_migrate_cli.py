"""``migrate``'s and ``diff``'s command lines without a kernel: ``--catch-up`` with and
without its number, and maps as arguments in bpftool's words (one reader for both)."""

from __future__ import annotations

import pytest

from bpfbatch.cli.argv import optional_values
from bpfbatch.cli.migrate import _ends
from bpfbatch.cli.options import map_address, map_words
from bpfbatch.errors import InputError


@pytest.mark.parametrize("args, expected", [
    (["id", "1", "id", "2", "--catch-up"], ["id", "1", "id", "2", "--catch-up=10"]),
    (["--catch-up", "3", "id", "1", "id", "2"], ["--catch-up", "3", "id", "1", "id", "2"]),
    (["--catch-up=4", "a"], ["--catch-up=4", "a"]),
    (["--catch-up", "pinned", "/p", "id", "2"], ["--catch-up=10", "pinned", "/p", "id", "2"]),
    (["--", "--catch-up"], ["--", "--catch-up"]),
])
def test_catch_up_without_its_number_is_ten_passes(args, expected):
    assert optional_values("migrate", args) == expected
    assert optional_values("dump", args) == args


def test_from_and_to_in_bpftool_s_words():
    assert _ends(["old.jsonl", "pinned", "/sys/fs/bpf/x"]) == (("file", "old.jsonl"),
                                                               ("pinned", "/sys/fs/bpf/x"))
    assert _ends(["id", "3", "name", "flows"]) == (("id", "3"), ("name", "flows"))
    for words in (["id", "3"], ["id", "3", "a.jsonl"], ["id", "x", "id", "2"],
                  ["id", "1", "id", "2", "id", "3"], ["pinned"]):
        with pytest.raises(InputError) as caught:
            _ends(words)
        assert caught.value.obj == "FROM TO"


def test_diff_and_migrate_read_the_same_words():
    assert map_words(["-", "id", "7", "pinned", "/p", "name", "id"], "A B") == [
        ("file", "-"), ("id", "7"), ("pinned", "/p"), ("name", "id")]
    assert [map_address(w) for w in (("id", "7"), ("pinned", "/p"), ("name", "n"))] == [
        {"id": 7}, {"pinned": "/p"}, {"name": "n"}]
    for words, said in ((["a", "pinned"], "pinned needs its value"),
                        (["id", "0x3"], "a map id is a number, got '0x3'")):
        with pytest.raises(InputError) as caught:
            map_words(words, "A B")
        assert caught.value.obj == "A B" and said in caught.value.message
