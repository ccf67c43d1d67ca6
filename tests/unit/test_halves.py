"""A large JSONL file read in two halves at once (the second by a forked child): the same
records, line numbers and first error as one process reading it in order; the child never
outlives the read."""

from __future__ import annotations

import io
import json
import os
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpfbatch import interrupts
from bpfbatch.errors import InputError, Interrupted
from bpfbatch.formats import halves, read

from test_typedjson import FLOWS, GOOD_FLOWS, INFO, _dumped_flows, _flow_line, _outcome


def _children() -> set[int]:
    """This process's children (of any of its threads): the processes whose parent is this
    thread group. Read from each process's own ``stat`` rather than from every thread's
    ``task/*/children``: a thread that exits between the listing and the read would take its
    file with it, and its children move to another thread in between."""
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except (FileNotFoundError, ProcessLookupError):  # exited since the listing
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after
        # its last ')'.
        if int(stat[stat.rindex(b")") + 2:].split()[1]) == me:
            found.add(int(entry))
    return found


@pytest.fixture
def split(monkeypatch):
    """Every typed JSONL file read in halves; ``split.results`` collects what each child
    handed over (``None``: it failed)."""
    monkeypatch.setattr(halves, "worth_splitting", lambda stream: True)
    before = _children()  # other tests' helpers may still run
    results = []
    real = halves._Child.result
    monkeypatch.setattr(halves._Child, "result",
                        lambda self: results.append(real(self)) or results[-1])
    monkeypatch.setattr(read, "_JSONL_CHUNK", 1 << 10)
    yield results
    assert _children() <= before


def _general(path, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(read, "typed_lines", lambda *codecs: None)
        return _outcome(str(path), FLOWS)


def test_the_child_encodes_the_second_half(split, tmp_path, monkeypatch):
    path = tmp_path / "flows.jsonl"
    path.write_text("\n".join(_dumped_flows(3000)) + "\n")
    both = _outcome(str(path), FLOWS)
    assert both[0] == 3000 and both[3] == list(range(1, 3001))
    [(stop, lines, numbers, keys, _)] = split
    assert stop == path.stat().st_size and 1000 < lines == len(numbers) < 2000
    assert keys == both[1][-16 * lines:]
    assert both == _general(path, monkeypatch)


@pytest.mark.parametrize("bad_line", [10, 2900])
def test_a_bad_record_in_either_half_is_the_error_one_process_reports(split, tmp_path,
                                                                      monkeypatch, bad_line):
    lines = _dumped_flows(3000)
    record = json.loads(lines[bad_line - 1])
    record["key"]["saddr"] = "10.0.0.256"
    lines[bad_line - 1] = json.dumps(record)
    lines[bad_line + 20] = lines[bad_line + 20].replace('"dport":443', '"dport":65536')
    path = tmp_path / "flows.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=rf"flows\.jsonl:{bad_line}: key\.saddr: not an ipv4"):
        read.read_records(str(path), INFO, fmt="jsonl", codecs=FLOWS)
    assert _outcome(str(path), FLOWS) == _general(path, monkeypatch)


@st.composite
def _mostly_good_lines(draw):
    """Good records as dump writes them, with up to two lines of anything at any place (a
    bad record, a spaced or CR-ended one, a blank line)."""
    lines = draw(st.lists(GOOD_FLOWS.map(lambda r: json.dumps(r, separators=(",", ":"))),
                          min_size=1, max_size=60))
    for _ in range(draw(st.integers(0, 2))):
        lines.insert(draw(st.integers(0, len(lines))), draw(_flow_line()))
    return lines


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=_mostly_good_lines())
def test_fuzzed_flows_read_in_halves_as_in_one_pass(lines, split, tmp_path, monkeypatch):
    path = tmp_path / "flows.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert _outcome(str(path), FLOWS) == _general(path, monkeypatch)


def test_a_failing_child_leaves_its_half_to_the_parent(split, tmp_path, monkeypatch):
    monkeypatch.setattr(halves, "typed_piece", lambda *args: 1 / 0)  # the child's step
    path = tmp_path / "flows.jsonl"
    path.write_text("\n".join(_dumped_flows(2000)) + "\n")
    both = _outcome(str(path), FLOWS)
    assert split == [None] and both[0] == 2000
    assert both == _general(path, monkeypatch)


def test_a_signal_as_the_fork_returns_leaves_no_child(split, tmp_path, monkeypatch):
    """SIGINT's handler running the moment ``fork()`` returns in the parent, before its pid
    is stored (where the signal lands when it is sent as soon as the child shows up, as
    tests/kernel/test_load_halves.py does): the read stops with Interrupted and the child
    is killed and reaped, not left running."""
    path = tmp_path / "flows.jsonl"
    path.write_text("\n".join(_dumped_flows(3000)) + "\n")
    forked, fork = [], os.fork

    def fork_then_signal():
        pid = fork()
        if pid:
            forked.append(pid)
            signal.raise_signal(signal.SIGINT)  # its handler runs before this returns
        return pid

    monkeypatch.setattr(os, "fork", fork_then_signal)
    with pytest.raises(Interrupted), interrupts.raised_as_interrupted():
        read.read_records(str(path), INFO, fmt="jsonl", codecs=FLOWS)
    [child] = forked
    with pytest.raises(ChildProcessError):  # reaped: no longer this process's child
        os.waitpid(child, os.WNOHANG)


def test_small_files_stdin_and_one_cpu_are_read_in_one_pass(tmp_path, monkeypatch):
    path = tmp_path / "flows.jsonl"
    path.write_text("\n".join(_dumped_flows(10)) + "\n")
    with path.open("rb") as f:
        assert not halves.worth_splitting(f)  # below MIN_BYTES
        monkeypatch.setattr(halves, "MIN_BYTES", 0)
        assert halves.worth_splitting(f) == (len(os.sched_getaffinity(0)) > 1)
        assert not halves.worth_splitting(io.BytesIO(path.read_bytes()))  # stdin, a pipe
        with open("/dev/null", "rb") as device:
            assert not halves.worth_splitting(device)
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
        assert not halves.worth_splitting(f)
