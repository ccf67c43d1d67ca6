"""bpftool's MAP forms on every map command, -q, and an interrupted command's last line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from test_cli_maps import assert_one_line_error, bpfbatch

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.map import writes
from fault_helpers import communicate

NAME = f"bb_adr_{os.getpid():x}"


@pytest.fixture
def pinned():
    with BtfBuilder() as b:
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        m = Map.create(MapType.HASH, 4, 8, 1024, name=NAME, btf_fd=b.load(),
                       btf_key_type_id=u32, btf_value_type_id=u64)
    writes.update(m, np.arange(100, dtype=np.uint32), np.arange(100, dtype=np.uint64), 100)
    path = f"/sys/fs/bpf/{NAME}"
    m.pin(path)
    yield m, path
    os.unlink(path)
    m.close()


def forms(m: Map, path: str) -> list[list[str]]:
    return [["id", str(m.info.id)], ["pinned", path], ["name", NAME],
            ["--map-id", str(m.info.id)], ["--pinned", path], ["--name", NAME]]


def test_every_form_names_the_same_map(pinned, tmp_path):
    m, path = pinned
    bpftool = json.loads(subprocess.run(["bpftool", "-j", "map", "dump", "pinned", path],
                                        capture_output=True, text=True, check=True).stdout)
    for form in forms(m, path):
        assert bpfbatch("count", *form, check=True).stdout == "100\n"
        dumped = bpfbatch("dump", *form, "-o", "bpftool-json", check=True).stdout
        assert json.loads(dumped) == bpftool
        assert bpfbatch("exec", *form, "--where", "value < 10", "--mode", "user",
                        check=True).stdout == "10\n"
    records = tmp_path / "r.jsonl"
    records.write_text('{"key": 500, "value": 7}\n')
    bpfbatch("load", "id", str(m.info.id), str(records), check=True)
    assert m.lookup((500).to_bytes(4, "little")) == (7).to_bytes(8, "little")


def test_two_forms_at_once_are_refused(pinned):
    m, path = pinned
    proc = bpfbatch("count", "id", str(m.info.id), "--pinned", path)
    assert_one_line_error(proc, "exactly one of --map-id, --pinned, --name")


def test_quiet_drops_the_summary_line(pinned, tmp_path):
    m, path = pinned
    records = tmp_path / "r.jsonl"
    records.write_text('{"key": 1, "value": 2}\n')
    loud = bpfbatch("load", "pinned", path, str(records), check=True)
    assert "1 entries loaded" in loud.stderr
    quiet = bpfbatch("load", "pinned", path, str(records), "-q", check=True)
    assert quiet.stderr == ""


def test_interrupt_exits_130_with_one_line(pinned):
    _, path = pinned
    proc = subprocess.Popen([sys.executable, "-m", "bpfbatch", "load", "pinned", path, "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdin.write('{"key": 1, "value": 2}\n')
    proc.stdin.flush()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _reading_stdin(proc.pid):  # all imports done
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = communicate(proc, 60)
    assert proc.returncode == 130
    # one line, saying how far the load got (nothing applied: it was still reading)
    assert err.count("\n") == 1 and err.startswith("bpfbatch: "), err
    assert "interrupted (SIGINT)" in err and "0 entries loaded" in err, err


def _reading_stdin(pid: int) -> bool:
    """Whether ``pid`` is blocked in ``read(0, ...)`` (x86-64 syscall 0; /proc/PID/syscall)."""
    with open(f"/proc/{pid}/syscall") as f:
        return f.read().startswith("0 0x0 ")
