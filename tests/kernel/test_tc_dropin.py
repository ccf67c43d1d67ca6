"""``bpfbatch tc -b`` against the installed ``tc -b`` on generated files with one failing line
at a random position: the same kernel state (``tc -j``), the same stderr, the same exit status,
with and without ``-force`` and ``--coalesce``, at several sendmsg sizes."""

from __future__ import annotations

import random

import pytest

from bpfbatch.tc import BatchInterrupted, Session
from tc_helpers import failed_lines, run, side_by_side, veth_netns

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
    """The bench's hash layout with one duplicate explicit-handle filter at a random position
    (the named handle in the table makes the sender ask for echoes of the adds after it)."""
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


def _with_refused_adds(rng: random.Random, head: str, lines: list[str], refused_add) -> tuple[str, int]:
    """``head`` and ``lines`` with 1-3 refused adds (``refused_add(n)``: the n-th one's line) a
    few lines apart at a random position: the file, and the first refused add's line number."""
    at = rng.randint(1, len(lines) - 10)
    for n in range(rng.randint(1, 3)):
        line = at + n * rng.randint(1, 4)
        lines.insert(line, refused_add(n))
    return head + "".join(lines), at + head.count("\n") + 1


def _own_table_file(rng: random.Random, count: int = 90) -> tuple[str, int]:
    """The bench's hash layout, every key node's handle left to the kernel and so predicted
    by the sender (no echo), over three buckets so that adds after a failure share its bucket,
    with 1-3 refused adds a few lines apart at a random position: an action kind this kernel
    lacks (refused after the kernel numbered the key node, which gives the number back) or a
    bucket past the divisor (refused before numbering). Returns the file and the first refused
    line."""
    lines = [f"filter add dev vethA ingress protocol ip prio 1 u32 ht 1:{i % 3:x}: match ip dst "
             f"10.0.0.{i}/32 action mirred egress redirect dev vethB\n" for i in range(count)]

    def refused_add(n: int) -> str:
        bucket = rng.choice(("0", "1", "2")) if n or rng.random() < 0.7 else "1f"
        kind = "action gact drop" if bucket != "1f" else "action mirred egress redirect dev vethB"
        return (f"filter add dev vethA ingress protocol ip prio 1 u32 ht 1:{bucket}: "
                f"match ip dst 10.9.9.{n}/32 {kind}\n")
    return _with_refused_adds(rng, _U32_HEAD, lines, refused_add)


_MIXED_HEAD = ("qdisc add dev vethA ingress\n"
               "filter add dev vethA ingress protocol ip prio 1 handle 1: u32 divisor 16\n"
               "filter add dev vethA ingress protocol ip prio 1 handle 2: u32 divisor 16\n"
               "filter add dev vethA ingress protocol ip prio 1 u32 ht 800:: match ip dst 10.0.0.0/8 "
               "hashkey mask 0x0000000f at 16 link 1:\n"
               "filter add dev vethA ingress protocol ip prio 2 handle 3: u32 divisor 4\n")


def _mixed_tables_file(rng: random.Random, count: int = 90) -> tuple[str, int]:
    """Three tables of ours in two instances (prio 1 and 2), adds spread over them; now and
    then an add naming its handle (the sender stops predicting in that table) or a delete of
    such a key node (it stops predicting anywhere; the named ones hold no action, whose
    release after the delete would make the numbers of later actions depend on timing, under
    tc too); then 1-3 refused adds a few lines apart at a random position. Returns the file
    and the first refused line."""
    lines, named = [], []
    for i in range(count):
        roll = rng.random()
        if roll < 0.05:
            named.append(f"handle 2:{i % 3:x}:{i + 1:x}")
            lines.append(f"filter add dev vethA ingress protocol ip prio 1 {named[-1]} "
                         f"u32 ht 2:{i % 3:x}: match ip src 10.1.0.{i}/32\n")
        elif roll < 0.08 and named:
            lines.append(f"filter del dev vethA ingress protocol ip prio 1 {named.pop()} u32\n")
        else:
            table, prio = rng.choice(((1, 1), (2, 1), (3, 2)))
            lines.append(f"filter add dev vethA ingress protocol ip prio {prio} u32 "
                         f"ht {table}:{rng.randrange(3)}: match ip dst 10.{table}.0.{i}/32 "
                         "action mirred egress redirect dev vethB\n")

    def refused_add(n: int) -> str:
        table, prio = rng.choice(((1, 1), (2, 1), (3, 2)))
        return (f"filter add dev vethA ingress protocol ip prio {prio} u32 "
                f"ht {table}:{rng.randrange(3)}: match ip dst 10.9.9.{n}/32 action gact drop\n")
    return _with_refused_adds(rng, _MIXED_HEAD, lines, refused_add)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("ours", [("--batch-bytes", "4096"), ("--batch-bytes", "1024"), ("--coalesce",)],
                         ids=["4k", "1k", "coalesce"])
@pytest.mark.parametrize("layout", [_own_table_file, _mixed_tables_file], ids=["one-table", "mixed"])
def test_refused_adds_into_the_batchs_own_hash_tables(tmp_path, layout, seed, ours):
    """The handles the undo deletes are predicted, not echoed: the adds the kernel applied
    after the first refused one are taken back to tc's state, failed adds before them in the
    same bucket counted — in one table, and where the sender stops predicting (a named handle,
    a delete) among three."""
    text, refused = layout(random.Random(seed))
    batch = tmp_path / "u32.tc"
    batch.write_text(text)
    theirs, their_state, ours_run, our_state = side_by_side(batch, (), ours)
    assert failed_lines(theirs.stderr) == [refused]
    assert (ours_run.returncode, ours_run.stderr, our_state) == (theirs.returncode, theirs.stderr, their_state)


def test_a_key_node_numbered_otherwise_is_left_and_named():
    """The undo reads a predicted key node back before deleting it. Another writer adding to
    the batch's own table mid-batch (here while a listing line prints) moves the kernel's
    numbering on by one: the add applied after the refused line is then not undone and the
    error names its line, and no filter of anyone else's is deleted in its place."""
    add = "filter add dev vethA ingress protocol ip prio 1 u32 ht 1:0: match ip dst"
    text = _U32_HEAD + (f"{add} 10.0.0.1/32\n"
                        "filter show dev vethA ingress\n"
                        f"{add} 10.0.0.2/32\n"
                        f"{add} 10.0.0.3/32 action gact drop\n"
                        f"{add} 10.0.0.4/32\n")
    with veth_netns() as ns:
        def intrude(words) -> int:
            run(["tc", "-n", ns, *add.split(), "10.8.8.8/32"])
            return 0

        with Session(netns=ns, on_listing=intrude) as session, \
                pytest.raises(BatchInterrupted, match="line 8 was applied after the failure and "
                                                      "is not undone") as raised:
            session.send_batch(text.splitlines(keepends=True), "own.tc")
        shown = run(["tc", "-n", ns, "filter", "show", "dev", "vethA", "ingress"]).stdout
    report = raised.value.report
    assert (report.first_failure.line, report.left) == (7, [8])
    assert "applied after it and not undone: line 8" in str(raised.value)
    kept = [address for address in ("0a000001", "0a080808", "0a000002", "0a000003", "0a000004")
            if f"match {address}/ffffffff" in shown]
    assert kept == ["0a000001", "0a080808", "0a000002", "0a000004"]


def test_a_full_bucket_goes_back_to_echoes(tmp_path):
    """A bucket's node numbers run out at 0xFFF, after which the kernel numbers from elsewhere:
    the sender stops predicting before that and asks for echoes. A refused add a few lines
    before the 2048th add into one bucket: the undo takes back predicted and echoed adds alike."""
    add = "filter add dev vethA ingress protocol ip prio 1 u32 ht 1:0: match ip dst"
    lines = [f"{add} 10.0.{i >> 8}.{i & 255}/32\n" for i in range(2060)]
    lines.insert(2040, f"{add} 10.9.9.9/32 action gact drop\n")
    batch = tmp_path / "full.tc"
    batch.write_text(_U32_HEAD + "".join(lines))
    theirs, their_state, ours, our_state = side_by_side(batch)
    assert failed_lines(theirs.stderr) == [2044]
    assert (ours.returncode, ours.stderr, our_state) == (theirs.returncode, theirs.stderr, their_state)
