"""Progress never lands inside the records: a table written to the terminal that also holds
stderr gets no live display at all (checked through a real pseudo-terminal)."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

import numpy as np
import pytest

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.map import writes

N = 50_000


@pytest.fixture
def pinned():
    with BtfBuilder() as b:
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        m = Map.create(MapType.HASH, 4, 8, N, name=f"bb_prog_{os.getpid():x}",
                       btf_fd=b.load(), btf_key_type_id=u32, btf_value_type_id=u64)
    writes.update(m, np.arange(N, dtype=np.uint32), np.arange(N, dtype=np.uint64) * 3, N)
    path = f"/sys/fs/bpf/bb_prog_{os.getpid()}"
    m.pin(path)
    yield path
    os.unlink(path)
    m.close()


def run_on_pty(*args: str) -> tuple[int, bytes]:
    """Run with stdout and stderr on the same pseudo-terminal; everything it showed."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "bpfbatch", *args], stdin=subprocess.DEVNULL,
                            stdout=follower, stderr=follower,
                            env={**os.environ, "COLUMNS": "80", "TERM": "xterm"})
    os.close(follower)
    shown = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    return proc.wait(), bytes(shown)


@pytest.mark.parametrize("command", [["dump", "-o", "table"], ["drain", "-o", "table"],
                                     ["exec", "--where", "value >= 0", "--action", "dump",
                                      "-o", "table", "--mode", "user"]])
def test_table_on_the_terminal_has_only_rows(pinned, command):
    status, shown = run_on_pty(command[0], "pinned", pinned, *command[1:])
    assert status == 0, shown[-500:]
    lines = shown.decode().replace("\r\n", "\n").splitlines()
    assert b"\x1b[" not in shown  # no cursor movement, colour or erase sequences
    is_row = [bool(re.fullmatch(r"\s*\d+\s+\d+", line)) for line in lines[2:]]
    rows = [line for line, row in zip(lines[2:], is_row) if row]
    assert lines[0].split() == ["key", "value"]
    assert len(rows) == N
    assert {int(line.split()[1]) for line in rows} == set(range(0, 3 * N, 3))
    others = [line for line, row in zip(lines[2:], is_row) if not row]
    assert all(line.startswith("map ") for line in others), others[:3]  # the summary line
