"""Shared pieces of the tc kernel tests: throwaway network namespaces with a veth pair, the
installed ``tc`` and ``bpfbatch tc`` run in them, their netlink messages captured with strace,
and ``tc -j ... show`` state for comparison."""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import ctypes
import functools
import io
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path



def run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


@contextlib.contextmanager
def veth_netns() -> Iterator[str]:
    """A fresh netns holding vethA (ifindex made first) <-> vethB, both up; deleted after.
    The links are made by one ``ip -batch`` inside it (two processes, not four: thousands of
    tests start one or two of these)."""
    name = f"bpfb-tc-{uuid.uuid4().hex[:10]}"
    run(["ip", "netns", "add", name])
    try:
        subprocess.run(["ip", "-n", name, "-batch", "-"], input=_VETH_PAIR, capture_output=True,
                       text=True, check=True)
        yield name
    finally:
        run(["ip", "netns", "del", name], check=False)


_VETH_PAIR = "link add vethA type veth peer name vethB\nlink set vethA up\nlink set vethB up\n"


def tc_batch(netns: str, path: Path, *extra: str) -> subprocess.CompletedProcess:
    """The installed tc: ``tc [extra] -b path`` inside ``netns``."""
    return run(["ip", "netns", "exec", netns, "tc", *extra, "-b", str(path)], check=False)


def bpfbatch_tc(netns: str, path: Path | str, *extra: str, stdin: str | None = None
                ) -> subprocess.CompletedProcess:
    """``bpfbatch tc -b path --netns netns [extra]`` as a user runs it (the console entry point:
    ``main()`` in a process of its own, stdin, stdout and stderr pipes), forked from an
    interpreter that imported the CLI once (:class:`_Warm`): the ~1,400 side-by-side runs of
    the suite would otherwise import it ~1,400 times (0.125 s of CPU a run, 0.05 s forked).
    stdin is empty unless given; the environment is the test process's at the call; all runs
    of one test process share a hash seed."""
    return _warm().run(["tc", "-b", str(path), "--netns", netns, *extra], stdin)


#: The warm interpreter (argv[1]: its end of a SOCK_SEQPACKET socket pair). Per request (JSON:
#: argv and environment; and the fds to become 0, 1 and 2) it forks; the child leaves the loop and calls
#: ``main()`` at the top level of the script, so it ends as ``python -c "...; main()"`` ends
#: (exit status, atexit, a KeyboardInterrupt's or a signal's death); the parent answers with
#: the status as subprocess reports it (-N: killed by signal N). Nothing is read from or
#: written to its own 0, 1 and 2 (/dev/null), which the child's become.
_WARM = r"""
import json, os, socket, sys
from bpfbatch.cli import main
import bpfbatch.cli.fastpath, bpfbatch.tc.listing, bpfbatch.tc.parse, bpfbatch.tc.sender
server = socket.socket(fileno=int(sys.argv[1]))
while True:
    message, fds, _, _ = socket.recv_fds(server, 1 << 16, 3)
    if not message:
        sys.exit(0)
    child = os.fork()
    if child == 0:
        break
    for fd in fds:
        os.close(fd)
    server.sendall(b"%d" % os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
server.close()
for target, fd in enumerate(fds):
    os.dup2(fd, target)
    os.close(fd)
request = json.loads(message)
os.environ.clear()
os.environ.update(request["env"])
sys.argv = ["-c", *request["argv"]]
main()
"""


class _Warm:
    """The client of one warm interpreter (:data:`_WARM`), one run at a time."""

    def __init__(self):
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self._proc = subprocess.Popen([sys.executable, "-c", _WARM, str(theirs.fileno())],
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          pass_fds=[theirs.fileno()])
        self._lock = threading.Lock()
        atexit.register(self.close)

    def close(self) -> None:
        """End the interpreter (it leaves at the end of its socket) and reap it."""
        self._sock.close()
        self._proc.wait()

    def run(self, args: list[str], stdin: str | None) -> subprocess.CompletedProcess:
        """``args`` run as ``subprocess.run(..., capture_output=True, text=True, input=stdin)``
        would run them."""
        (in_r, in_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
        with self._lock, concurrent.futures.ThreadPoolExecutor(3) as pool:
            try:
                request = {"argv": args, "env": dict(os.environ)}
                socket.send_fds(self._sock, [json.dumps(request).encode()],
                                [in_r, out_w, err_w])
            finally:
                for fd in (in_r, out_w, err_w):
                    os.close(fd)
            pool.submit(_feed, in_w, (stdin or "").encode())
            out, err = pool.submit(_read_all, out_r), pool.submit(_read_all, err_r)
            status = self._sock.recv(64)
            if not status:
                raise RuntimeError(f"the warm bpfbatch interpreter ended ({self._proc.wait()})")
            return subprocess.CompletedProcess([sys.executable, "-c", "main()", *args],
                                               int(status), _text(out.result()),
                                               _text(err.result()))


def _feed(fd: int, data: bytes) -> None:
    with open(fd, "wb") as pipe, contextlib.suppress(BrokenPipeError):
        pipe.write(data)


def _read_all(fd: int) -> bytes:
    with open(fd, "rb") as pipe:
        return pipe.read()


def _text(data: bytes) -> str:
    """Decoded as ``subprocess.run(text=True)`` decodes (locale encoding, universal newlines)."""
    return io.TextIOWrapper(io.BytesIO(data)).read()


@functools.cache
def _warm() -> _Warm:
    return _Warm()


# --- strace capture ------------------------------------------------------------------------------

_BUFFER = re.compile(r"\* \d+ bytes in buffer")
_HEXDUMP = re.compile(r"\| [0-9a-f]{5}  (.{49})")


def captured_messages(argv: list[str]) -> list[bytes]:
    """Every netlink message ``argv`` wrote with sendmsg, in order (strace ``-e write=all``)."""
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        subprocess.run(["strace", "-f", "-qq", "-e", "trace=sendmsg", "-e", "write=all",
                        "-o", out.name, *argv], capture_output=True, check=False)
        buffers: list[bytearray] = []
        for line in out:
            if _BUFFER.search(line):
                buffers.append(bytearray())
            elif (dump := _HEXDUMP.search(line)) and buffers:
                buffers[-1] += bytes.fromhex(dump.group(1))
    messages = []
    for buf in buffers:
        offset = 0
        while offset + 16 <= len(buf):
            length = struct.unpack_from("=I", buf, offset)[0]
            messages.append(bytes(buf[offset:offset + length]))
            offset += (length + 3) & ~3
    return messages


NLM_F_ACK = 0x4
NLM_F_ECHO = 0x8


def masked(message: bytes) -> bytes:
    """Sequence number and port id zeroed, NLM_F_ACK and NLM_F_ECHO cleared: bpfbatch asks for
    an ACK only on the last message of each sendmsg (tc on every one), and for an echo of a
    filter add whose handle the kernel picks (to undo it exactly should an earlier line fail),
    unless it predicts the handle (a u32 key node in a table the batch created)."""
    flags = struct.unpack_from("=H", message, 6)[0] & ~(NLM_F_ACK | NLM_F_ECHO)
    return message[:6] + struct.pack("=H", flags) + b"\0" * 8 + message[16:]


# --- state -------------------------------------------------------------------------------------

#: Left out of state comparisons: counters, timestamps, reference counts, hardware flags, and
#: BPF program ids (each run loads its own program; its name and tag are compared).
_VOLATILE = {"stats", "tm", "ref", "bind", "installed", "last_used", "expires", "first_used",
             "not_in_hw", "in_hw", "in_hw_count", "hw_stats", "used_hw_stats", "direct_packets_stat",
             "id"}


def _scrub(value):
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _read_state(netns: str, queries) -> dict:
    """Each query's ``tc -j`` answer (parsed JSON, ``[]`` for no output, its lines where tc
    prints no JSON), read by one ``tc -j -batch`` where that is unambiguous, else one ``tc``
    per query (as that is what the batch stands for, any query that fails fails here)."""
    return _read_batched(netns, queries) or {" ".join(q): _answer(_tc_json(netns, q))
                                             for q in queries}


def _tc_json(netns: str, query) -> str:
    return run(["ip", "netns", "exec", netns, "tc", "-j", *query]).stdout.strip()


def _answer(out: str):
    try:
        return json.loads(out) if out else []
    except json.JSONDecodeError:
        return out.splitlines()


#: The listings that print one JSON document on a line of their own even when empty (``[]``);
#: ``class show`` prints nothing then, and iproute2 6.1 prints htb classes as plain text.
_ONE_DOCUMENT = ("actions", "qdisc", "filter")
_DECODER = json.JSONDecoder()


def _read_batched(netns: str, queries) -> dict | None:
    """:func:`_read_state` by one ``tc -n NETNS -j -batch -``, or ``None`` where its output
    cannot be split back into the queries' answers without doubt: every query but the last
    must be one of :data:`_ONE_DOCUMENT` and its output exactly one JSON document and a
    newline; the last query's answer is the rest. A failing query (status not 0) → ``None``."""
    if not queries or any(q[0] not in _ONE_DOCUMENT for q in queries[:-1]):
        return None
    proc = subprocess.run(["tc", "-n", netns, "-j", "-batch", "-"],
                          input="".join(" ".join(q) + "\n" for q in queries),
                          capture_output=True, text=True, check=False)
    if proc.returncode:
        return None
    out, at, state = proc.stdout, 0, {}
    for query in queries[:-1]:
        try:
            state[" ".join(query)], end = _DECODER.raw_decode(out, at)
        except json.JSONDecodeError:
            return None
        if out[end:end + 1] != "\n":
            return None
        at = end + 1
    state[" ".join(queries[-1])] = _answer(out[at:].strip())
    return state


def tc_state(netns: str, *queries: list[str]) -> dict:
    """``tc -j <query>`` for each query, counters and timestamps removed; tc's plain text
    where it prints no JSON (iproute2 6.1's htb classes)."""
    return _scrub(_read_state(netns, queries))


def _actions_in(value) -> Iterator[dict]:
    """Every action object in a ``tc -j`` answer (a listed action, or one inside a filter)."""
    if isinstance(value, dict):
        if "kind" in value and "index" in value:
            yield value
        else:
            for inner in value.values():
                yield from _actions_in(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _actions_in(inner)


def _bindings_matched(state: dict) -> bool:
    """Whether every listed action is bound exactly as often as the listed filters hold it."""
    held = Counter((a["kind"], a["index"]) for query, value in state.items()
                   if query.startswith("filter") for a in _actions_in(value))
    return all(a["bind"] == held[a["kind"], a["index"]] for query, value in state.items()
               if query.startswith("actions") for a in _actions_in(value))


#: How long the kernel may take to release actions before :func:`released_state` stops waiting
#: and returns what it reads (the comparison then shows the actions still held).
_RELEASE_WAIT = 30.0


def released_state(netns: str, *queries: list[str]) -> dict:
    """:func:`tc_state` once the kernel has released the actions of filters deleted, replaced
    or changed. It does so after an RCU grace period, so right after ``tc -b`` (ours or tc's)
    returns, such actions may still be listed, still bound, held by no filter. The state is
    read until every listed action's bind count equals the number of listed filters holding
    it: ``queries`` must list every filter of ``netns`` that holds actions."""
    deadline = time.monotonic() + _RELEASE_WAIT
    while True:
        state = _read_state(netns, queries)
        if _bindings_matched(state) or time.monotonic() > deadline:
            return _scrub(state)
        time.sleep(0.01)


def action_indexes(netns: str, kind: str = "mirred") -> list[int]:
    out = run(["ip", "netns", "exec", netns, "tc", "actions", "list", "action", kind]).stdout
    return sorted(int(m) for m in re.findall(r"\bindex (\d+) ref", out))


# --- a pinned SCHED_CLS program ----------------------------------------------------------------

_BPF_PROG_LOAD, _BPF_OBJ_PIN, _BPF_PROG_TYPE_SCHED_CLS, _SYS_BPF = 5, 6, 3, 321


@contextlib.contextmanager
def pinned_program() -> Iterator[str]:
    """A trivial tc program (``return 0``) pinned on a private bpffs mount in a temp directory
    (``ip netns exec`` remounts /sys, so /sys/fs/bpf would be invisible inside the netns)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    def bpf(cmd: int, attr: bytes) -> int:
        buf = ctypes.create_string_buffer(attr, 128)
        ret = libc.syscall(_SYS_BPF, cmd, buf, 128)
        if ret < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        return ret

    with tempfile.TemporaryDirectory() as mountpoint:
        run(["mount", "-t", "bpf", "bpf", mountpoint])
        try:
            insns = ctypes.create_string_buffer(bytes.fromhex("b700000000000000" "9500000000000000"))
            license_ = ctypes.create_string_buffer(b"GPL")
            fd = bpf(_BPF_PROG_LOAD, struct.pack("=IIQQ", _BPF_PROG_TYPE_SCHED_CLS, 2,
                                                 ctypes.addressof(insns),
                                                 ctypes.addressof(license_)))
            path = os.path.join(mountpoint, "prog")
            path_buf = ctypes.create_string_buffer(path.encode())
            try:
                bpf(_BPF_OBJ_PIN, struct.pack("=QI", ctypes.addressof(path_buf), fd))
            finally:
                os.close(fd)
            yield path
        finally:
            run(["umount", mountpoint], check=False)


# --- the drop-in comparison ----------------------------------------------------------------------

FAILED_LINE = re.compile(r"^Command failed .*:(\d+)$", re.M)
#: What a batch leaves, as ``tc -j`` shows it (see _VOLATILE for the fields left out).
STATE_QUERIES = (["actions", "list", "action", "mirred"], ["actions", "list", "action", "gact"],
                 ["qdisc", "show", "dev", "vethA"], ["filter", "show", "dev", "vethA", "ingress"],
                 ["class", "show", "dev", "vethA"])


def failed_lines(stderr: str) -> list[int]:
    return [int(n) for n in FAILED_LINE.findall(stderr)]


def side_by_side(batch: Path, tc_options: tuple[str, ...] = (), ours: tuple[str, ...] = (),
                 setup: list[list[str]] = ()) -> tuple[subprocess.CompletedProcess, dict,
                                                       subprocess.CompletedProcess, dict]:
    """``tc [tc_options] -b batch`` and ``bpfbatch tc -b batch [tc_options] [ours]``, each in a
    fresh namespace after the same ``setup`` tc commands: (tc's run, its state, ours, our state).
    The two sides run at the same time (each in its own namespace, so neither sees the other):
    a test waits for the slower side, not for both."""
    def side(ns: str, send) -> tuple[subprocess.CompletedProcess, dict]:
        for command in setup:  # as tdc's setup: some are allowed to fail (gact is absent)
            run(["ip", "netns", "exec", ns, "tc", *command], check=False)
        done = send(ns)
        return done, tc_state(ns, *STATE_QUERIES)

    with veth_netns() as ns_tc, veth_netns() as ns_ours, \
            concurrent.futures.ThreadPoolExecutor(1) as pool:
        mine = pool.submit(side, ns_ours, lambda ns: bpfbatch_tc(ns, batch, *tc_options, *ours))
        theirs = side(ns_tc, lambda ns: tc_batch(ns, batch, *tc_options))
        return (*theirs, *mine.result())
