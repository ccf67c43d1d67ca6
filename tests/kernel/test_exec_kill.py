"""SIGKILL during ``exec --action delete -o``, in every mode: whatever was selected is delivered
(a complete line in the output), still in the map, or among at most one ``--batch-size`` of
records in hand when the kill landed. Nothing can run after a SIGKILL, so that bound is the
whole promise; it holds only if each program run deletes at most one batch before its
records are written (kernel modes) and each batch is written before the next is taken.
"""

import signal

import numpy as np

import pytest
from fault_helpers import (bpfbatch_argv, fill, judge, parse_jsonl,
                           run_with_signal_after_output, typed_map)

from bpfbatch.map import probes

N = 100_000
#: Keys below KEEP are not selected and must stay untouched.
KEEP = 1000
BATCH = 1000
#: Seconds after the first record reached the output: from inside the first batches to
#: past the end (the program's load, before any delete, is not where the risk is).
DELAYS = [0, 0.002, 0.006, 0.015, 0.03, 0.06, 0.12]
MODES = ["user"] + [pytest.param(mode, marks=pytest.mark.skipif(
    not probes.syscall_program(), reason="no syscall programs"))
    for mode in ("kernel", "kernel-fast")]


@pytest.mark.parametrize("mode", MODES)
def test_sigkill_loses_at_most_one_batch(tmp_path, mode):
    killed, rows = 0, []
    with typed_map(N, name="bb_exec_kill") as m:
        for i, delay in enumerate(DELAYS):
            fill(m, N)
            path = tmp_path / f"out{i}.jsonl"
            argv = bpfbatch_argv("exec", "--map-id", m.info.id, "--where", f"key >= {KEEP}",
                                 "--action", "delete", "--mode", mode, "-o", "jsonl",
                                 "--batch-size", BATCH)
            rc, stderr = run_with_signal_after_output(argv, path, signal.SIGKILL, delay)
            keys, values, garbage = parse_jsonl(path.read_bytes())
            o = judge(m, N, (keys, values), rc, stderr, keep_below=KEEP)
            killed += rc == -signal.SIGKILL
            rows.append(f"delay={delay} rc={rc} delivered={o.delivered} left={o.left} "
                        f"lost={o.lost} wrong={o.wrong} twice={o.twice}")
            assert garbage == 0 and o.wrong == 0 and o.twice == 0, rows[-1]
            assert o.lost <= (BATCH if rc == -signal.SIGKILL else 0), rows[-1]
    print(f"FAULT exec --action delete -o jsonl --batch-size {BATCH} ({mode}), SIGKILL sweep:",
          *rows, sep="\n  ")
    assert killed >= len(DELAYS) // 2  # the sweep really landed inside the command


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_the_json_document_it_delivered(tmp_path, sig):
    """``-o json``: a signal stops the delete after the batch in hand and the output is one
    whole JSON array (its ``]`` written) of exactly the records no longer in the map."""
    import json

    n = 30_000
    with typed_map(n, name="bb_exec_sig") as m:
        fill(m, n)
        path = tmp_path / "out.json"
        argv = bpfbatch_argv("exec", "--map-id", m.info.id, "--where", f"key >= {KEEP}",
                             "--action", "delete", "--mode", "user", "-o", "json",
                             "--batch-size", BATCH)
        rc, stderr = run_with_signal_after_output(argv, path, sig, 0)
        assert rc == 128 + sig, stderr  # it landed inside the command
        records = json.loads(path.read_bytes())  # a whole document
        keys = np.array([r["key"] for r in records], dtype=np.uint64)
        values = np.array([r["value"] for r in records], dtype=np.uint64)
        o = judge(m, n, (keys, values), rc, stderr, keep_below=KEEP)
        assert (o.lost, o.wrong, o.twice) == (0, 0, 0) and o.left > 0, o
        assert o.said_delivered == o.delivered, stderr
