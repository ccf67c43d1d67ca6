"""simple's sdata bytes from the model of tc's line buffer, against what tc 6.1 sent for the
same batch (captured with strace; the kernel tests compare live captures too)."""

from __future__ import annotations

from bpfbatch.tc.grammar import BATCH_STATE, read_commands
from bpfbatch.tc.linebuffer import LineBuffer
from bpfbatch.tc.parse import parse_command


def _sdata(lines: list[str]) -> list[bytes]:
    """The DATA attribute of each command's simple action, read as the batch reader reads it."""
    buffer = LineBuffer()
    token = BATCH_STATE.set({LineBuffer: buffer})
    try:
        return [parse_command(text).actions[0].sdata for _, text in read_commands(lines, buffer)]
    finally:
        BATCH_STATE.reset(token)


def test_the_rest_of_the_line_then_what_longer_lines_left():
    assert _sdata(["actions add action simple sdata hi index 3\n",
                   "actions add action simple sdata hello index 3 # a comment here that is long\n",
                   "actions add action simple sdata x\n",
                   "actions add action 'simple' sdata \"a b\" index 4\n"]) == [
        b"hi\0index\x003".ljust(32, b"\0"),
        b"hello\0index\x003\0\0 a comment here t",
        b"x\0\0lo\0index\x003\0\0 a comment here t",
        b"a b\0 index\x004\0\0 comment here that"]


def test_nothing_is_known_past_a_continued_line():
    """tc reallocates its buffer to the joined line's size: past it lies the allocator's data
    (tc sent a chunk header and a heap pointer), which bpfbatch sends as zeros, also for the
    shorter line after it; the bytes up to there are tc's."""
    assert _sdata(["actions add action simple sdata hello index 3 # a comment here that is long\n",
                   "actions add action simple sdata \\\n", " cont index 6\n",
                   "actions add action simple sdata y\n"])[1:] == [
        b"cont\0index\x006".ljust(32, b"\0"), b"y\0\0nt\0index\x006".ljust(32, b"\0")]


def test_outside_a_batch_reader_the_string_is_padded_with_zeros():
    assert parse_command("actions add action simple sdata hi index 3").actions[0].sdata == \
        b"hi" + bytes(30)
