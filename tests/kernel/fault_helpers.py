"""Fault-injection harness for the delivery guarantee: real maps, real processes, real file
descriptors (a full tmpfs, /dev/full, a pipe whose reader leaves, signals).

Every map here is ``u32 key → u64 value`` with BTF, filled with ``value = mix(key)`` so that a
record read back from the output or from the map can be checked exactly. A trial ends with an
:class:`Outcome`: which keys were completely written (complete lines only: a torn last record
is not delivered), which are still in the map, and what the command said and returned.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.map import cursor, writes

_MIX = np.uint64(0x9E3779B97F4A7C15)
_RECORD = re.compile(rb'^\{"key":(\d+),"value":(\d+)\}\n', re.M)


def mix(keys: np.ndarray) -> np.ndarray:
    """The value every key is filled with (a bijection, so a wrong value cannot pass)."""
    return keys.astype(np.uint64) * _MIX


def typed_map(max_entries: int, name: str = "bb_dlv") -> Map:
    with BtfBuilder() as b:
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        return Map.create(MapType.HASH, 4, 8, max_entries, name=name, btf_fd=b.load(),
                          btf_key_type_id=u32, btf_value_type_id=u64)


def fill(m: Map, n: int) -> None:
    """Keys ``0..n-1`` with their mixed values (what a drained map needs to start again)."""
    keys = np.arange(n, dtype=np.uint32)
    writes.update(m, keys, mix(keys), n)


def refill(m: Map, n: int, last: Outcome | None) -> None:
    """:func:`fill`, unless ``last`` (the judgement of the previous trial on ``m``, or None)
    saw ``m`` holding exactly that already: all ``n`` keys left, every value right (an
    interrupted drain that put everything back). Rewriting a million entries costs a second
    of CPU, a sweep's trials mostly end that way."""
    if last is None or (last.n, last.left, last.wrong) != (n, n, 0):
        fill(m, n)


def parse_jsonl(data: bytes) -> tuple[np.ndarray, np.ndarray, int]:
    """Keys and values of the complete ``{"key":K,"value":V}`` lines, and how many complete
    lines were not such a record (garbage, which must be zero)."""
    found = _RECORD.findall(data)
    keys = np.array([int(k) for k, _ in found], dtype=np.uint64)
    values = np.array([int(v) for _, v in found], dtype=np.uint64)
    return keys, values, data.count(b"\n") - len(found)


def map_contents(m: Map) -> tuple[np.ndarray, np.ndarray]:
    keys, values = cursor.read_all(m)
    return (keys.view("<u4").reshape(-1).astype(np.uint64),
            values.view("<u8").reshape(-1))


@dataclasses.dataclass
class Outcome:
    """One trial. ``lost``: selected keys neither completely written nor in the map;
    ``wrong``: a written or remaining value that is not the key's; ``twice``: keys written and
    still in the map (a put-back of a record that was written) or written twice."""

    n: int
    delivered: int
    left: int
    lost: int
    wrong: int
    twice: int
    rc: int
    stderr: str
    said_delivered: int | None
    said_left: int | None

    @property
    def nothing_lost(self) -> bool:
        return self.lost == 0 and self.wrong == 0

    @property
    def status_ok(self) -> bool:
        """Non-zero exit whenever something was not delivered."""
        return self.rc != 0 or self.left == 0

    @property
    def message_ok(self) -> bool:
        """A failure says how many entries were delivered (and, when it says how many are
        left in the map, says it right)."""
        if self.rc == 0:
            return True
        if self.said_delivered != self.delivered:
            return False
        return self.said_left is None or self.said_left == self.left

    @property
    def good(self) -> bool:
        return self.nothing_lost and self.status_ok and self.message_ok and not self.twice


def said(stderr: str, pattern: str) -> int | None:
    found = re.search(pattern, stderr)
    return int(found.group(1)) if found else None


#: What a command says it delivered: an interruption's or failure's "N entries delivered", a
#: drain's summary, or an ``exec --action delete -o``'s "N of M elements deleted" (a signal
#: that lands after the summary, as the interpreter exits, still ends it with 128 + signal).
DELIVERED = (r"(\d+) (?:entr(?:y|ies) (?:were )?(?:delivered|drained)"
             r"|of \d+ elements deleted)")


def judge(m: Map, n: int, written: tuple[np.ndarray, np.ndarray] | None, rc: int, stderr: str,
          *, keep_below: int = 0, delivered: int | None = None) -> Outcome:
    """Check a trial on a map that held keys ``0..n-1``: keys below ``keep_below`` were not
    selected and must still be in the map untouched. ``written``: the parsed output, or None
    when it cannot be seen (a pipe): then ``delivered`` is what the command said and only the
    accounting is checked."""
    left_keys, left_values = map_contents(m)
    wrong = int((left_values != mix(left_keys)).sum())
    seen = np.zeros(n, dtype=np.int64)
    np.add.at(seen, left_keys.astype(np.int64), 1)
    if written is not None:
        keys, values = written
        wrong += int((values != mix(keys)).sum()) + int((keys >= n).sum())
        keys = keys[keys < n].astype(np.int64)
        np.add.at(seen, keys, 1)
        wrong += int(np.isin(keys, np.arange(keep_below)).sum())
        delivered = len(keys)
    missing = int((seen == 0).sum())
    if written is None:  # only the count can be checked: what was said plus what is left
        missing = max(0, n - len(left_keys) - (delivered or 0))
    return Outcome(n=n, delivered=delivered if delivered is not None else 0,
                   left=len(left_keys) - keep_below, lost=missing, wrong=wrong,
                   twice=int((seen > 1).sum()), rc=rc, stderr=stderr.strip(),
                   said_delivered=said(stderr, DELIVERED),
                   said_left=said(stderr, r"(\d+) left in the map"))


def bpfbatch_argv(*args) -> list[str]:
    return [sys.executable, "-m", "bpfbatch", *map(str, args)]


def communicate(proc: subprocess.Popen, timeout: float, input=None) -> tuple:
    """``proc.communicate(input, timeout)``; a child still running after ``timeout`` fails the
    test with what it was doing instead of a bare TimeoutExpired: each thread's state and
    signal masks from /proc (blocked, ignored, caught, pending: a signal lost or held back
    shows there), then its Python stacks (SIGABRT: faulthandler, on in every child of the
    kernel tests (``PYTHONFAULTHANDLER``, conftest), prints them on its stderr, read here
    when it is a pipe), and what it wrote on stderr so far."""
    try:
        return proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        state = signal_state(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGABRT)
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if isinstance(err, bytes):
            err = err.decode(errors="replace")
        where = err if err is not None else "(its stderr is not a pipe: the stacks went there)"
        raise AssertionError(f"pid {proc.pid} ({' '.join(map(str, proc.args))}) still ran "
                             f"{timeout} s later\n{state}\nits stderr, then its stacks on "
                             f"SIGABRT:\n{where}") from None


#: What /proc/PID/task/TID/status says of a thread's signals.
_SIGNAL_FIELDS = ("SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")


def signal_state(pid: int) -> str:
    """One line per thread of ``pid``: its name, state, kernel wait channel and signal sets
    (pending to the thread and to the process, blocked, ignored, caught), by name."""
    lines = []
    tasks = f"/proc/{pid}/task"
    with contextlib.suppress(OSError):
        for tid in sorted(os.listdir(tasks), key=int):
            try:
                status = dict(line.split(":\t", 1) for line in
                              Path(f"{tasks}/{tid}/status").read_text().splitlines()
                              if ":\t" in line)
                wchan = Path(f"{tasks}/{tid}/wchan").read_text() or "-"
            except OSError:
                continue
            sets = " ".join(f"{field}={_signal_names(status[field])}" for field in _SIGNAL_FIELDS)
            lines.append(f"  thread {tid} {status['Name'].strip()} {status['State'].strip()} "
                         f"wchan={wchan} {sets}")
    return "\n".join(lines) or f"  pid {pid}: gone"


def _signal_names(mask: str) -> str:
    bits = int(mask, 16)
    names = [signal.Signals(n).name if n in signal.Signals._value2member_map_ else str(n)
             for n in range(1, 65) if bits >> (n - 1) & 1]
    return ",".join(names) or "-"


def holds_map(pid: int, map_id: int) -> bool:
    """Whether process ``pid`` holds an fd of map ``map_id`` (it has opened the map). Nothing
    is cached: fd numbers are reused as the interpreter opens and closes files."""
    fds = f"/proc/{pid}/fd"
    with contextlib.suppress(OSError):
        for fd in os.listdir(fds):
            with contextlib.suppress(OSError):
                if os.readlink(f"{fds}/{fd}") != "anon_inode:bpf-map":
                    continue
                info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
                if re.search(rf"^map_id:\s+{map_id}$", info, re.M):
                    return True
    return False


def signal_after_open(proc: subprocess.Popen, map_id: int, sig: int, delay: float) -> bool:
    """Send ``sig`` ``delay`` seconds after ``proc`` opened the map: the sweep's clock starts
    where the command starts working, not at the interpreter's start-up. False when the
    process ended first."""
    return signal_after(proc, lambda: holds_map(proc.pid, map_id), sig, delay)


def signal_after(proc: subprocess.Popen, started, sig: int, delay: float) -> bool:
    """Send ``sig`` ``delay`` seconds after ``started()`` first holds; False when the process
    ended first."""
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        if started():
            time.sleep(delay)
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
                return True
            return False
        time.sleep(0.0005)
    return False


def signalled(proc: subprocess.Popen, m: Map | None, sig: int, delay: float, started=None
              ) -> tuple[int, str]:
    """Signal ``proc`` ``delay`` after it opened ``m`` (or after ``started()`` holds); its exit
    status and stderr (killed if it outlives the test)."""
    with reaped(proc):
        if started is None:
            signal_after_open(proc, m.info.id, sig, delay)
        else:
            signal_after(proc, started, sig, delay)
        _, stderr = communicate(proc, 120)
    return proc.returncode, stderr.decode(errors="replace")


@contextlib.contextmanager
def reaped(proc: subprocess.Popen):
    """``proc`` for the block, killed and waited for if it outlives it: a failed assertion or
    a timeout inside never leaves a process running into the next test."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def until_size(path, size: int, timeout: float = 30, poll: float = 0.005) -> None:
    """Wait until ``path`` holds ``size`` bytes (the command under attack is writing), looking
    every ``poll`` s, or until ``timeout`` s passed: the test then judges whatever was written."""
    deadline = time.monotonic() + timeout
    while os.path.getsize(path) < size and time.monotonic() < deadline:
        time.sleep(poll)


@contextlib.contextmanager
def every_ms(step):
    """``step()`` called from a thread of its own, then a millisecond's sleep, over and over
    until the block ends (a producer running beside the command a test attacks)."""
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            step()
            time.sleep(0.001)

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def run_with_signal(argv: list[str], out_path: Path, m: Map, sig: int, delay: float
                    ) -> tuple[int, str]:
    """Run ``argv`` with stdout into ``out_path``, signalled ``delay`` after it opened ``m``."""
    with open(out_path, "wb") as out:
        return signalled(subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE), m, sig,
                          delay)


def run_with_signal_after_output(argv: list[str], out_path: Path, sig: int, delay: float
                                 ) -> tuple[int, str]:
    """Run ``argv`` with stdout into ``out_path``, signalled ``delay`` after its first byte of
    output (the clock of a sweep through the work itself, start-up and set-up left out)."""
    with open(out_path, "wb") as out:
        return signalled(subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE), None, sig,
                         delay, started=lambda: os.path.getsize(out_path) > 0)


def run_script_with_signal(script: str, args: list, m: Map, delay: float,
                           sig: int = signal.SIGINT) -> tuple[int, str]:
    """Run Python ``script`` (which prints ``go`` once set up) with ``args``, signalled
    ``delay`` after it opened ``m``."""
    proc = subprocess.Popen([sys.executable, "-c", script, *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.stdout.readline() != b"go\n":
        proc.kill()
    return signalled(proc, m, sig, delay)


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "64k"):
    """A tmpfs of ``size`` mounted at ``where/mnt`` (unique per test), unmounted after."""
    mnt = where / f"mnt{os.getpid()}"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", f"bb_dlv{os.getpid()}",
                    str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def report(kind: str, outcomes: list[Outcome]) -> str:
    """One row of the fault table: kind, trials, nothing lost, exit status right, message
    right, written twice."""
    row = (f"FAULT {kind}: trials={len(outcomes)} "
           f"nothing_lost={sum(o.nothing_lost for o in outcomes)} "
           f"status_ok={sum(o.status_ok for o in outcomes)} "
           f"message_ok={sum(o.message_ok for o in outcomes)} "
           f"twice={sum(o.twice > 0 for o in outcomes)} "
           f"entries_lost={sum(o.lost for o in outcomes)}")
    print(row)
    return row


def bad(outcomes: list[Outcome]) -> list[str]:
    return [f"rc={o.rc} delivered={o.delivered} left={o.left} lost={o.lost} wrong={o.wrong} "
            f"twice={o.twice}: {o.stderr[-300:]}" for o in outcomes if not o.good]


SIGNALS = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}
