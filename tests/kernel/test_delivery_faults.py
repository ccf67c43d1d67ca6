"""The delivery guarantee under real faults: nothing is deleted that is not delivered or put
back, the exit status is non-zero whenever something was not delivered, and the message says
how many entries were delivered (and left in the map).

Black-box: the CLI in its own process (``drain``, ``exec --action delete -o``, ``load``,
``delete``, ``clear``) and the library (``bcc.items_and_clear``) on real maps, writing to a
64 KiB tmpfs mounted here, to /dev/full, into a pipe whose reader leaves after a few lines, and
signalled with SIGINT, SIGTERM and SIGHUP at a sweep of delays measured from the moment the
process opened the map (so they land before the first batch, inside a batch syscall, between
the syscall and the write, and during the write). Each row of the fault table is printed
(``pytest -s``): trials, nothing lost, exit status right, message right.
"""

from __future__ import annotations

import signal
import subprocess
import time

import numpy as np
import pytest

from bpfbatch.map import probes, whole
from fault_helpers import (SIGNALS, bad, bpfbatch_argv, fill, judge, map_contents, mix,
                           parse_jsonl, refill, report, run_script_with_signal, run_with_signal, said,
                           signal_after_open,
                           small_tmpfs, typed_map)

BIG = 1_000_000
SWEEP = 100_000


@pytest.fixture(scope="module")
def big():
    """One 1M-entry map for the whole module, refilled before each use."""
    with typed_map(BIG, name="bb_dlv_big") as m:
        yield m


@pytest.fixture
def sweep_map():
    with typed_map(SWEEP, name="bb_dlv_sweep") as m:
        yield m


def drain_argv(m, *extra):
    return bpfbatch_argv("drain", "--map-id", m.info.id, "-o", "jsonl", *extra)


def exec_argv(m, mode, *extra):
    return bpfbatch_argv("exec", "--map-id", m.info.id, "--where", f"key >= {KEEP}",
                         "--action", "delete", "--mode", mode, "-o", "jsonl", *extra)


#: exec trials select keys >= KEEP: the ones below must stay, untouched.
KEEP = 1000


def _file_trial(m, n, argv, path, *, keep_below=0):
    with open(path, "wb") as out:
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, timeout=300)
    stderr = proc.stderr.decode(errors="replace")
    keys, values, garbage = parse_jsonl(path.read_bytes())
    assert garbage == 0
    return judge(m, n, (keys, values), proc.returncode, stderr, keep_below=keep_below)


def _devfull_trial(m, n, argv, *, keep_below=0):
    with open("/dev/full", "wb") as out:
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, timeout=300)
    empty = (np.empty(0, np.uint64), np.empty(0, np.uint64))
    return judge(m, n, empty, proc.returncode, proc.stderr.decode(errors="replace"),
                 keep_below=keep_below)


def _pipe_trial(m, n, argv, lines, *, keep_below=0):
    """``argv | head -n lines``: what head printed is checked exactly; the rest of what the
    pipe accepted counts as delivered (the README's pipe rule), so the command's own count is
    checked against what is left in the map."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = subprocess.run(["head", "-n", str(lines)], stdin=proc.stdout, capture_output=True)
    proc.stdout.close()
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    rc = proc.wait(300)
    keys, values, garbage = parse_jsonl(head.stdout)
    assert garbage == 0 and len(keys) == lines
    left_keys, _ = map_contents(m)
    wrong = int((values != mix(keys)).sum()) + int(np.isin(keys, left_keys).sum())
    claimed = said(stderr, r"(\d+) entr(?:y|ies) (?:were )?(?:delivered|drained|deleted)")
    outcome = judge(m, n, None, rc, stderr, keep_below=keep_below, delivered=claimed)
    outcome.wrong += wrong
    return outcome


# -- drain ---------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [None, BIG], ids=["default-batch", "one-batch"])
def test_drain_1m_into_a_full_tmpfs(big, tmp_path, batch):
    fill(big, BIG)
    extra = ["--batch-size", batch] if batch else []
    with small_tmpfs(tmp_path) as mnt:
        o = _file_trial(big, BIG, drain_argv(big, *extra), mnt / "out.jsonl")
    report(f"drain 1M -> 64KiB tmpfs ({'batch 1M' if batch else 'default batch'})", [o])
    assert o.rc != 0 and not bad([o]), bad([o])


@pytest.mark.parametrize("batch", [None, BIG], ids=["default-batch", "one-batch"])
def test_drain_1m_into_dev_full(big, batch):
    fill(big, BIG)
    extra = ["--batch-size", batch] if batch else []
    o = _devfull_trial(big, BIG, drain_argv(big, *extra))
    report(f"drain 1M -> /dev/full ({'batch 1M' if batch else 'default batch'})", [o])
    assert o.rc != 0 and o.left == BIG and not bad([o]), bad([o])


@pytest.mark.parametrize("batch", [None, BIG], ids=["default-batch", "one-batch"])
def test_drain_1m_into_a_pipe_closed_after_a_few_lines(big, batch):
    fill(big, BIG)
    extra = ["--batch-size", batch] if batch else []
    o = _pipe_trial(big, BIG, drain_argv(big, *extra), 5)
    report(f"drain 1M | head -n 5 ({'batch 1M' if batch else 'default batch'})", [o])
    assert o.rc != 0 and not bad([o]), bad([o])


@pytest.mark.parametrize("limit", [None, 5000])
def test_dump_into_a_full_tmpfs_fails(sweep_map, tmp_path, limit):
    """A dump deletes nothing, but a short output must not pass for a whole one (it exited 0
    with --limit, the bytes lost in a buffer)."""
    fill(sweep_map, SWEEP)
    extra = ["--limit", limit] if limit else []
    with small_tmpfs(tmp_path) as mnt:
        path = mnt / "out.jsonl"
        with open(path, "wb") as out:
            proc = subprocess.run(bpfbatch_argv("dump", "--map-id", sweep_map.info.id, "-o",
                                                "jsonl", *extra),
                                  stdout=out, stderr=subprocess.PIPE, timeout=120)
        lines = path.read_bytes().count(b"\n")
    print(f"FAULT dump{' --limit 5000' if limit else ''} -> 64KiB tmpfs: rc={proc.returncode} "
          f"lines={lines}")
    assert proc.returncode == 1 and lines < (limit or SWEEP)
    assert b"output failed: No space left on device (ENOSPC)" in proc.stderr


#: Seconds after the map was opened; the 100k drain takes a few hundred milliseconds here.
DELAYS = {signal.SIGINT: [0, 0.005, 0.015, 0.03, 0.05, 0.08, 0.12, 0.17, 0.25, 0.4],
          signal.SIGTERM: [0.002, 0.01, 0.025, 0.045, 0.07, 0.1, 0.15, 0.3],
          signal.SIGHUP: [0.004, 0.02, 0.04, 0.065, 0.11, 0.2]}


@pytest.mark.parametrize("sig", list(DELAYS), ids=lambda s: signal.Signals(s).name)
def test_drain_signalled_at_a_sweep_of_moments(sweep_map, tmp_path, sig):
    outcomes = []
    for i, delay in enumerate(DELAYS[sig]):
        fill(sweep_map, SWEEP)
        path = tmp_path / f"out{i}.jsonl"
        rc, stderr = run_with_signal(drain_argv(sweep_map), path, sweep_map, sig, delay)
        keys, values, garbage = parse_jsonl(path.read_bytes())
        assert garbage == 0
        o = judge(sweep_map, SWEEP, (keys, values), rc, stderr)
        outcomes.append(o)
    report(f"drain 100k, {signal.Signals(sig).name} sweep", outcomes)
    assert not bad(outcomes), bad(outcomes)
    # 128 + signal number when it stopped the drain; killed by it (its default disposition,
    # back after the command) only once everything was delivered.
    assert all(o.rc in (0, SIGNALS[sig]) or (o.rc == -sig and o.left == 0)
               for o in outcomes), [o.rc for o in outcomes]


def test_drain_1m_in_one_batch_interrupted_inside_the_syscall(big, tmp_path):
    """With --batch-size 1M the whole map is in one LOOKUP_AND_DELETE call: a SIGINT that
    arrives during it must not cost the batch."""
    outcomes = []
    for i, delay in enumerate([0.05, 0.15, 0.3, 0.6]):
        refill(big, BIG, outcomes[-1] if outcomes else None)
        path = tmp_path / f"out{i}.jsonl"
        rc, stderr = run_with_signal(drain_argv(big, "--batch-size", BIG), path, big,
                                     signal.SIGINT, delay)
        keys, values, garbage = parse_jsonl(path.read_bytes())
        assert garbage == 0
        outcomes.append(judge(big, BIG, (keys, values), rc, stderr))
    report("drain 1M in one batch, SIGINT sweep", outcomes)
    assert not bad(outcomes), bad(outcomes)


# -- exec --action delete -o ---------------------------------------------------------------

#: kernel-fast deletes in the program: its records are the put-back source.
MODES = ["user"] + [pytest.param(mode, marks=pytest.mark.skipif(
    not probes.syscall_program(), reason="no syscall programs"))
    for mode in ("kernel", "kernel-fast")]


@pytest.mark.parametrize("mode", MODES)
def test_exec_delete_output_faults(sweep_map, tmp_path, mode):
    """/dev/full, a full tmpfs and a pipe closed after one line: the selected entries not
    written stay in the map; the unselected ones are untouched."""
    outcomes = []
    fill(sweep_map, SWEEP)
    outcomes.append(_devfull_trial(sweep_map, SWEEP, exec_argv(sweep_map, mode),
                                   keep_below=KEEP))
    fill(sweep_map, SWEEP)
    with small_tmpfs(tmp_path) as mnt:
        outcomes.append(_file_trial(sweep_map, SWEEP, exec_argv(sweep_map, mode),
                                    mnt / "out.jsonl", keep_below=KEEP))
    fill(sweep_map, SWEEP)
    outcomes.append(_pipe_trial(sweep_map, SWEEP, exec_argv(sweep_map, mode), 1,
                                keep_below=KEEP))
    report(f"exec --action delete -o jsonl ({mode}): /dev/full, tmpfs, | head -1", outcomes)
    assert all(o.rc != 0 for o in outcomes) and not bad(outcomes), bad(outcomes)


@pytest.mark.parametrize("mode", MODES)
def test_exec_delete_output_signalled(sweep_map, tmp_path, mode):
    outcomes = []
    for i, (sig, delay) in enumerate([(signal.SIGINT, 0.01), (signal.SIGINT, 0.05),
                                      (signal.SIGTERM, 0.03), (signal.SIGTERM, 0.1),
                                      (signal.SIGHUP, 0.07)]):
        fill(sweep_map, SWEEP)
        path = tmp_path / f"out{i}.jsonl"
        rc, stderr = run_with_signal(exec_argv(sweep_map, mode), path, sweep_map, sig, delay)
        keys, values, garbage = parse_jsonl(path.read_bytes())
        assert garbage == 0
        outcomes.append(judge(sweep_map, SWEEP, (keys, values), rc, stderr, keep_below=KEEP))
    report(f"exec --action delete -o jsonl ({mode}), signal sweep", outcomes)
    assert not bad(outcomes), bad(outcomes)


# -- the library: bcc.items_and_clear, bcc.items_lookup_and_delete_batch ----------------------

BCC_DRAIN = r"""
import ctypes, signal, sys
import numpy as np
from bpfbatch import bcc as batched
from bpfbatch import Map

drain = getattr(batched, sys.argv[3])
number = lambda item: getattr(item, "value", item)  # a c_uint64 (items()'s type) or an int

class Table:  # what bpfbatch.bcc reads of a bcc table: its fd and its ctypes types
    Key, Leaf = ctypes.c_uint32, ctypes.c_uint64

m = Map.open_id(int(sys.argv[1]))
table = Table()
table.map_fd = m.fd
status = 0
try:  # "go" inside: a SIGINT landing as soon as it is out is the caller's to handle too
    print("go", flush=True)
    got = drain(table)
    # Handed over: ours to keep from here. Ignored, not blocked: a blocked process-directed
    # signal is delivered to another thread that leaves it unblocked (numpy's BLAS threads),
    # whose default disposition kills the whole process while np.save below runs.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
except KeyboardInterrupt:
    status = 130
while "got" in dir():  # handed over; a signal landing now must not cost it
    try:
        np.save(sys.argv[2], np.array([(number(k), number(v)) for k, v in got], np.uint64))
        break
    except KeyboardInterrupt:
        status = 130
sys.exit(status)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=lambda s: s.name)
@pytest.mark.parametrize("drain", ["items_and_clear", "items_lookup_and_delete_batch"])
def test_bcc_drain_interrupted_keeps_what_it_did_not_hand_over(big, tmp_path, drain, sig):
    """SIGINT raises KeyboardInterrupt in the script; SIGTERM and SIGHUP, which it leaves at
    their default disposition, kill it — once with every batch drained so far (up to the
    whole map), now after they are put back."""
    outcomes = []
    for i, delay in enumerate([0.02, 0.1, 0.25, 0.5]):
        refill(big, BIG, outcomes[-1] if outcomes else None)
        out = tmp_path / f"got{i}.npy"
        rc, stderr = run_script_with_signal(BCC_DRAIN, [big.info.id, out, drain], big, delay,
                                            sig)
        got = np.load(out) if out.exists() else np.empty((0, 2), np.uint64)
        o = judge(big, BIG, (got[:, 0], got[:, 1]), rc, stderr)
        o.said_delivered = o.delivered  # a library call: nothing to say, only to keep
        outcomes.append(o)
    report(f"bcc.{drain} 1M, {sig.name} sweep", outcomes)
    assert not bad(outcomes), bad(outcomes)
    assert any(o.rc in (130, -sig) for o in outcomes)  # it did land mid-drain


MAP_DRAIN = r"""
import sys
import numpy  # the drain's first batch needs it: imported before any signal can come (a
              # SIGINT inside a C extension's import comes out as numpy's ImportError)
from bpfbatch import Map

got, pair, status = [], None, 0
m = Map.open(id=int(sys.argv[1]))
try:  # "go" inside: a SIGINT landing as soon as it is out is the caller's to handle too
    print("go", flush=True)
    for pair in m.drain(batch_size=int(sys.argv[3])):
        got.append(pair)
except KeyboardInterrupt:
    status = 130
while True:  # a signal landing after the loop must not cost what the caller holds
    try:
        # Handed over: a pair bound to the loop variable is the caller's even if the signal
        # landed before the append.
        if pair is not None and (not got or got[-1] is not pair):
            got.append(pair)
        with open(sys.argv[2], "w") as out:
            out.writelines(f'{{"key":{k},"value":{v}}}\n' for k, v in got)
        break
    except KeyboardInterrupt:
        status = 130
sys.exit(status)
"""


def test_map_drain_interrupted_puts_back_what_was_not_handed_over(sweep_map, tmp_path):
    """The library's drain (``Map.drain()``): SIGINT at a sweep of moments, in the caller's
    loop or in the drain itself; what the caller was handed is in its file, the rest is back
    in the map."""
    outcomes = []
    for i, (delay, batch) in enumerate([(0.0, 8192), (0.02, 8192), (0.06, 8192), (0.15, 8192),
                                        (0.03, SWEEP), (0.1, SWEEP)]):
        fill(sweep_map, SWEEP)
        path = tmp_path / f"pairs{i}.jsonl"
        rc, stderr = run_script_with_signal(MAP_DRAIN, [sweep_map.info.id, path, batch],
                                            sweep_map, delay)
        assert path.exists(), (rc, stderr)
        keys, values, garbage = parse_jsonl(path.read_bytes())
        assert garbage == 0
        o = judge(sweep_map, SWEEP, (keys, values), rc, stderr)
        o.said_delivered = o.delivered  # a library call: nothing to say, only to keep
        outcomes.append(o)
    report("Map.drain() 100k, SIGINT sweep", outcomes)
    assert not bad(outcomes), bad(outcomes)


# -- load, delete, clear: say exactly what was applied -------------------------------------

APPLIED = r"(\d+) entries (?:loaded|deleted|removed)"


def _applied_trials(kind, m, n, argv_for, before, expect_left, delays):
    """Each trial signalled; the message must name exactly what the map shows was applied."""
    rows = []
    for sig, delay in delays:
        before()
        with open("/dev/null", "wb") as null:
            proc = subprocess.Popen(argv_for(), stdout=null, stderr=subprocess.PIPE)
            signal_after_open(proc, m.info.id, sig, delay)
            _, stderr = proc.communicate(timeout=120)
        stderr = stderr.decode(errors="replace")
        left = len(map_contents(m)[0])
        applied = expect_left(left)
        claimed = said(stderr, APPLIED)
        ok = claimed == applied and (proc.returncode != 0 or applied == n)
        rows.append((ok, proc.returncode, applied, claimed, stderr.strip()[-200:]))
    print(f"FAULT {kind}: trials={len(rows)} exact_report={sum(r[0] for r in rows)} "
          f"applied={[r[2] for r in rows]}")
    assert all(r[0] for r in rows), [r for r in rows if not r[0]]


INTERRUPTS = [(signal.SIGINT, 0.0), (signal.SIGINT, 0.05), (signal.SIGTERM, 0.02),
              (signal.SIGTERM, 0.12), (signal.SIGHUP, 0.08)]


def _records_file(tmp_path, n: int):
    """JSONL of keys ``0..n-1`` with their mixed values, to load into a :func:`typed_map`."""
    keys = np.arange(n, dtype=np.uint64)
    path = tmp_path / "in.jsonl"
    path.write_text("".join(f'{{"key":{k},"value":{v}}}\n' for k, v in zip(keys.tolist(),
                                                                             mix(keys).tolist())))
    return path


def test_load_interrupted_says_what_it_applied(tmp_path):
    n = 300_000
    path = _records_file(tmp_path, n)
    with typed_map(n, name="bb_dlv_load") as m:
        _applied_trials("load 300k interrupted", m, n,
                        lambda: bpfbatch_argv("load", "--map-id", m.info.id, path,
                                              "--batch-size", 4096),
                        lambda: whole.clear(m), lambda left: left,
                        [(s, d * 4) for s, d in INTERRUPTS])


def test_load_by_writers_side_by_side_interrupted_says_what_it_applied(tmp_path):
    """``--jobs 2``: the signal lands in the main writer, between its chunks or while it waits
    for the other, which must be stopped and counted before the command says what it
    applied. The delays are fractions of an unsignalled run, so they land in the writes."""
    n = 600_000
    path = _records_file(tmp_path, n)
    with typed_map(n, name="bb_dlv_jobs") as m:
        argv = lambda: bpfbatch_argv("load", "--map-id", m.info.id, path,  # noqa: E731
                                     "--batch-size", 2048, "--jobs", 2)
        proc = subprocess.Popen(argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        signal_after_open(proc, m.info.id, 0, 0)  # signal 0: only waits for the open
        opened = time.monotonic()
        assert proc.wait(timeout=120) == 0
        took = time.monotonic() - opened
        sigs = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
        _applied_trials("load 600k, 2 writers, interrupted in the writes", m, n, argv,
                        lambda: whole.clear(m), lambda left: left,
                        [(sigs[i % 3], took * f) for i, f in
                         enumerate((0.55, 0.65, 0.72, 0.8, 0.86, 0.92))])


def test_clear_and_delete_interrupted_say_what_they_removed(tmp_path):
    n = 300_000
    keys = np.arange(n, dtype=np.uint64)
    path = tmp_path / "keys.jsonl"
    path.write_text("".join(f'{{"key":{k}}}\n' for k in keys.tolist()))
    with typed_map(n, name="bb_dlv_clear") as m:
        _applied_trials("clear 300k interrupted", m, n,
                        lambda: bpfbatch_argv("clear", "--map-id", m.info.id,
                                              "--batch-size", 1024),
                        lambda: fill(m, n), lambda left: n - left, INTERRUPTS)
        _applied_trials("delete 300k interrupted", m, n,
                        lambda: bpfbatch_argv("delete", "--map-id", m.info.id, path,
                                              "--batch-size", 1024),
                        lambda: fill(m, n), lambda left: n - left,
                        [(s, d * 4) for s, d in INTERRUPTS])
