"""The library's deleting surfaces keep the delivery guarantee however their caller lets go of
them: ``Map.drain()``'s iterator kept past the Map's ``with`` block, dropped mid-iteration
(also inside a reference cycle, freed by the garbage collector), still alive at interpreter
exit, left by ``break`` or an uncaught exception, and SIGTERM/SIGHUP at their default
disposition during the iteration (the bcc drop-ins under them: ``test_delivery_faults.py``).

Each trial runs in its own process on a real map of ``key → mix(key)`` and is judged
exactly: every key is either in what the caller was handed (written out pair by pair as it
got them) or back in the map with its value, never both, never neither; nothing on stderr
(the EBADF of a put-back after the Map closed its fd once printed "Exception ignored ... are
lost"). Rows of the fault table are printed with -s.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from fault_helpers import fill, judge, map_contents, parse_jsonl, reaped, typed_map

N = 100_000
BATCH = 4096


#: argv: map id, output path ("-": standard output), batch size, how the caller lets go,
#: pairs taken before.
SCRIPT = r"""
import gc, os, sys
from bpfbatch import Map

map_id, path, batch, how, k = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], \
    int(sys.argv[5])
out = 1 if path == "-" else os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)

def take(pairs, n=None):
    for i, (key, value) in enumerate(pairs):
        os.write(out, b'{"key":%d,"value":%d}\n' % (key, value))
        if n is not None and i + 1 == n:
            return

if how in ("kept", "kept-exit"):
    with Map.open(id=map_id) as m:
        it = m.drain(batch_size=batch)
        take(it, k)
    take(it, k)  # the Map is closed: the iterator holds an fd of its own
    if how == "kept":
        del it
    sys.exit(0)  # kept-exit: `it` is still alive as the interpreter exits
m = Map.open(id=map_id)
it = m.drain(batch_size=batch)
if how == "dropped":
    take(it, k)
    del it
elif how == "cycle":
    take(it, k)
    cycle = [it]
    cycle.append(cycle)
    del it, cycle
    gc.collect()
elif how == "break":
    del it
    for i, (key, value) in enumerate(m.drain(batch_size=batch)):
        os.write(out, b'{"key":%d,"value":%d}\n' % (key, value))
        if i + 1 == k:
            break
elif how == "raise":
    take(it, k)
    raise SystemExit("left by an uncaught exception")
elif how == "exit":
    take(it, k)
elif how == "signal":  # the caller sets no handler: SIGTERM and SIGHUP kill
    take(it, 1)
    os.write(out, b"go\n")  # the signal's clock starts: the drain is under way
    take(it)
"""


def report(kind: str, outcomes, held) -> None:
    """One row of the fault table (a library call has no exit status or message to judge:
    ``held`` says which trials kept every entry and did what was expected)."""
    print(f"FAULT {kind}: trials={len(outcomes)} held={sum(map(held, outcomes))} "
          f"entries_lost={sum(o.lost for o in outcomes)}")


def _signalled_mid_drain(m, batch: int, delay: float, read_first: int, sig: int
                         ) -> tuple[int, bytes, str]:
    """The "signal" script draining ``m`` into a pipe: ``sig`` ``delay`` after the first pair
    and ``read_first`` bytes more were read. Its exit status, the pairs it wrote, its stderr."""
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(m.info.id), "-", str(batch),
                             "signal", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            bufsize=0)  # nothing read ahead that communicate() would not see
    with reaped(proc):
        first = proc.stdout.readline()
        assert proc.stdout.readline() == b"go\n", proc.stderr.read()
        head = b""
        while len(head) < read_first and (more := proc.stdout.read(read_first - len(head))):
            head += more
        time.sleep(delay)
        proc.send_signal(sig)
        rest, stderr = proc.communicate(timeout=120)
    return proc.returncode, first + head + rest, stderr.decode(errors="replace")


def _trial(m, how: str, k: int, tmp_path, batch: int = BATCH):
    fill(m, N)
    path = tmp_path / f"{how}.jsonl"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(m.info.id), str(path), str(batch),
                           how, str(k)], capture_output=True, timeout=120)
    keys, values, garbage = parse_jsonl(path.read_bytes())
    assert garbage == 0
    o = judge(m, N, (keys, values), proc.returncode, proc.stderr.decode(errors="replace"))
    o.said_delivered = o.delivered  # a library call: nothing to say, only to keep
    return o


EXPECTED = {  # how → (pairs handed out for k, exit status, what stderr says)
    "kept": (lambda k: 2 * k, 0, ""),
    "kept-exit": (lambda k: 2 * k, 0, ""),
    "dropped": (lambda k: k, 0, ""),
    "cycle": (lambda k: k, 0, ""),
    "break": (lambda k: k, 0, ""),
    "raise": (lambda k: k, 1, "left by an uncaught exception"),
    "exit": (lambda k: k, 0, ""),
}


@pytest.mark.parametrize("how", list(EXPECTED))
def test_map_drain_let_go_of_puts_back_what_was_not_handed_out(tmp_path, how):
    """k pairs in: the first batch's, one short of a batch, a batch and one (the second batch
    in hand), and all but one of the map (the last batch)."""
    handed, status, said = EXPECTED[how]
    ks = (1, BATCH - 1, BATCH + 1, N // 2 - 1)
    with typed_map(N, name="bb_life") as m:
        outcomes = [_trial(m, how, k, tmp_path) for k in ks]
    expected = {id(o): (handed(k), N - handed(k), status, said) for k, o in zip(ks, outcomes)}

    def held(o):
        return o.nothing_lost and not o.twice and \
            (o.delivered, o.left, o.rc, o.stderr) == expected[id(o)]

    report(f"Map.drain() {how}", outcomes, held)
    assert all(map(held, outcomes)), [o for o in outcomes if not held(o)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_map_drain_signalled_at_its_default_disposition_puts_back_then_dies(tmp_path, sig):
    """The caller sets no handler: the signal would kill the process on the spot, the batch in
    hand with it (up to batch_size entries). Now the batch is put back first, then the
    process dies of the signal as it would have.

    The one pair the caller holds when it dies (handed out, not yet written: CPython may run
    the handler anywhere in the caller's loop) is the caller's, as anything it holds: the
    judge allows exactly that pair — the one after the last written, in the drain's order
    (a lookup pass's, taken just before) — to be neither written nor in the map."""
    outcomes, caller_held = [], 0
    # (delay, batch size, bytes read before the delay): the pairs go to a pipe this test reads,
    # so the caller blocks once it is a pipe's worth ahead — the drain cannot end before the
    # signal however late a loaded machine lets the test send it
    trials = [(0.0, BATCH, 0), (0.001, BATCH, 0), (0.005, BATCH, 1 << 16), (0.02, BATCH, 0),
              (0.05, BATCH, 500_000), (0.0, N, 0), (0.01, N, 100_000)]
    with typed_map(N, name="bb_life") as m:
        for delay, batch, read_first in trials:
            fill(m, N)
            order = map_contents(m)[0]
            rc, written, stderr = _signalled_mid_drain(m, batch, delay, read_first, sig)
            keys, values, garbage = parse_jsonl(written)
            assert garbage == 0 and (keys == order[:len(keys)]).all()
            missing = set(range(N)) - set(keys.tolist()) - set(map_contents(m)[0].tolist())
            o = judge(m, N, (keys, values), rc, stderr)
            if missing and missing == {int(order[len(keys)])}:  # the pair in the caller's hand
                o.lost, caller_held = 0, caller_held + 1
            o.said_delivered = o.delivered
            outcomes.append(o)

    def held(o):
        return o.nothing_lost and not o.twice and o.rc == -sig and o.left and not o.stderr

    report(f"Map.drain() {sig.name} at SIG_DFL ({caller_held} died holding a pair)", outcomes,
           held)
    assert all(map(held, outcomes)), [o for o in outcomes if not held(o)]
