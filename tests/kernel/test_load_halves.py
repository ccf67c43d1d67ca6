"""``bpfbatch load`` of a large JSONL file, whose second half a forked child encodes
(:mod:`bpfbatch.formats.halves`): loads what bpftool then reads back, and a signal while both
halves are parsed stops the load with one line, nothing applied, and no child left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from bpfbatch.labs.demo import create_flow_table, fill_flow_table
from bpfbatch.map import cursor, whole
from bpfbatch.formats import halves
from fault_helpers import communicate

ENTRIES = 200_000  # ~45 MB of JSONL: above halves.MIN_BYTES

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: no split")


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    """A filled flow table's entries (raw) and its dump as JSONL, the table left empty."""
    path = tmp_path_factory.mktemp("halves") / "flows.jsonl"
    m = create_flow_table(ENTRIES, name=f"bb_halves{os.getpid()}")
    try:
        fill_flow_table(m, ENTRIES)
        with path.open("wb") as out:
            subprocess.run([sys.executable, "-m", "bpfbatch", "dump", "--map-id",
                            str(m.info.id), "-o", "jsonl"], stdout=out, check=True)
        before = _entries(m)
        whole.clear(m)
        assert path.stat().st_size >= halves.MIN_BYTES
        yield m, path, before
    finally:
        m.close()


def _entries(m):
    keys, values = cursor.read_all(m)
    return sorted(zip(keys.tobytes().hex(" ", 16).split(), values.tobytes().hex(
        " ", 32).split()))


def test_a_large_dump_loads_back_unchanged(dumped):
    m, path, before = dumped
    whole.clear(m)
    done = subprocess.run([sys.executable, "-m", "bpfbatch", "load", "--map-id",
                           str(m.info.id), str(path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{ENTRIES} entries loaded" in done.stderr
    assert _entries(m) == before
    out = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m.info.id)],
                         capture_output=True, text=True, check=True).stdout
    assert len(json.loads(out)) == ENTRIES  # an outside reader sees them all


def _child_of(pid: int) -> int | None:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        children = f.read().split()
    return int(children[0]) if children else None


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_both_halves_parse_applies_nothing_and_leaves_no_child(
        dumped, sig, status):
    m, path, _ = dumped
    whole.clear(m)
    proc = subprocess.Popen([sys.executable, "-m", "bpfbatch", "load", "--map-id",
                             str(m.info.id), str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    child, deadline = None, time.monotonic() + 120
    while child is None and proc.poll() is None and time.monotonic() < deadline:
        child = _child_of(proc.pid)
        time.sleep(0.002)
    assert child is not None, "the load ended before its child was seen"
    proc.send_signal(sig)  # to the parent alone, as kill(1) does
    _, err = communicate(proc, 120)
    assert proc.returncode == status, err
    assert err.count("\n") == 1 and f"interrupted ({sig.name})" in err, err
    assert "0 entries loaded" in err, err
    assert not os.path.exists(f"/proc/{child}")  # killed and reaped
    assert _entries(m) == []
