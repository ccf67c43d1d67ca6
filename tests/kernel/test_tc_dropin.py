"""``bpfbatch tc -b`` against the installed ``tc -b`` on generated files with one failing line
at a random position: the same kernel state (``tc -j``), the same stderr, the same exit status,
with and without ``-force`` and ``--coalesce``, at several sendmsg sizes."""

from __future__ import annotations

import random

import pytest

from tc_helpers import failed_lines, side_by_side

_U32_HEAD = ("qdisc add dev vethA ingress\n"
             "filter add dev vethA ingress protocol ip prio 1 handle 1: u32 divisor 16\n"
             "filter add dev vethA ingress protocol ip prio 1 u32 ht 800:: match ip dst 10.0.0.0/8 "
             "hashkey mask 0x0000000f at 16 link 1:\n")

#: A failing line of each kind, for a file whose lines add mirred actions 1..N.
FAILURES = {
    "duplicate": lambda rng, n: f"actions add action mirred egress redirect dev vethB index {rng.randint(1, n)}\n",
    "unknown device": lambda rng, n: "actions add action mirred egress redirect dev nosuchdev index 9999\n",
    "trailing word": lambda rng, n: "actions add action mirred egress redirect dev vethB index 9998 bogus\n",
    "parse error": lambda rng, n: "actions add action gact frobnicate index 9997\n",
}


def _actions_file(rng: random.Random, kind: str, count: int = 80) -> tuple[str, int]:
    lines = [f"actions add action mirred egress redirect dev vethB index {i}\n" for i in range(1, count + 1)]
    at = rng.randint(1, count)
    lines.insert(at, FAILURES[kind](rng, at))
    return "".join(lines), at + 1


def _u32_file(rng: random.Random, count: int = 60) -> tuple[str, int]:
    """The bench's hash layout (kernel-picked handles, echoed for undo) with one duplicate
    explicit-handle filter at a random position."""
    lines = [f"filter add dev vethA ingress protocol ip prio 1 u32 ht 1:{i & 15:x}: match ip dst "
             f"10.0.0.{i}/32 action mirred egress redirect dev vethB\n" for i in range(count)]
    lines[0] = lines[0].replace("u32 ht 1:0:", "handle 1:0:5 u32 ht 1:0:")
    at = rng.randint(1, count)
    lines.insert(at, lines[0])
    return _U32_HEAD + "".join(lines), at + 4


CASES = [(seed, kind, mode, coalesce, batch_bytes)
         for seed, kind in enumerate(FAILURES)
         for mode in ((), ("-force",))
         for coalesce in ((), ("--coalesce",))
         for batch_bytes in ("1024", "8192")]


@pytest.mark.parametrize("seed,kind,mode,coalesce,batch_bytes", CASES)
def test_one_failing_line_at_a_random_position(tmp_path, seed, kind, mode, coalesce, batch_bytes):
    text, failing = _actions_file(random.Random(seed), kind)
    batch = tmp_path / "random.tc"
    batch.write_text(text)
    theirs, their_state, ours, our_state = side_by_side(batch, mode, (*coalesce, "--batch-bytes", batch_bytes))
    assert our_state == their_state
    assert failed_lines(ours.stderr) == failed_lines(theirs.stderr)
    assert ours.returncode == theirs.returncode != 0
    if kind == "duplicate":  # a kernel refusal: tc's words exactly
        assert ours.stderr == theirs.stderr
    else:  # our parser's first line may be worded differently; where it fails is the same
        assert failed_lines(theirs.stderr) in ([], [failing])


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("mode", [(), ("-force",)], ids=["stop", "force"])
def test_u32_hash_layout_with_a_failing_filter(tmp_path, seed, mode):
    text, failing = _u32_file(random.Random(seed))
    batch = tmp_path / "u32.tc"
    batch.write_text(text)
    theirs, their_state, ours, our_state = side_by_side(batch, mode, ("--batch-bytes", "4096"))
    assert failed_lines(theirs.stderr) == [failing]
    assert (ours.returncode, ours.stderr, our_state) == (theirs.returncode, theirs.stderr, their_state)
