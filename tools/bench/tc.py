"""tc batches: the installed ``tc -b`` against ``bpfbatch tc -b`` (plain and ``--coalesce``) on
the same files, in a throwaway network namespace, interleaved rounds, state flushed untimed
before every run.

Cases (the issue's): N ``actions add action mirred egress redirect dev vethB index I`` lines
(100k; 1M with ``--full``), and N u32 filters with a mirred action each in a 256-bucket hash
layout. Ratios are peer / ``bpfbatch tc -b`` (above 1 = bpfbatch is faster). Two more rows:
``bpfbatch API`` sends the same file in-process through ``Session.send_batch`` (the CLI's cost
minus interpreter start-up and imports); ``kernel floor`` sends the file's messages, encoded
beforehand (untimed), 256 KiB per ``sendmsg`` with no echo and no undo: the kernel's own work
on tc's bytes, which no sender of them can go below — ``tc -b`` ÷ floor bounds every ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bpfbatch.tc import Session, raise_for
from bpfbatch.tc import specs as S
from bpfbatch.tc.message import Message
from bpfbatch.tc.netlink import RtnlSocket
from bpfbatch.tc.netns import entered as in_netns
from bpfbatch.tc.resolve import Resolver
from bpfbatch.tc.sender import DEFAULT_BATCH_BYTES
from bpfbatch.tc.templates import TemplateReader
from tools.bench.harness import Command, InProcess, interleave, report, summarize

ROOT = Path(__file__).resolve().parents[2]
BASELINE = "bpfbatch tc -b"
_FLAGS = 6  # nlmsg_flags within nlmsghdr


def _ip(*argv: str, check: bool = True) -> None:
    subprocess.run(["ip", *argv], check=check, capture_output=True)


def _tc(netns: str, *argv: str, check: bool = True) -> None:
    subprocess.run(["tc", "-netns", netns, *argv], check=check, capture_output=True)


class Lab:
    """A netns with vethA <-> vethB, up; removed on exit."""

    def __init__(self) -> None:
        self.netns = f"bpfb-bench-{uuid.uuid4().hex[:8]}"

    def __enter__(self) -> "Lab":
        _ip("netns", "add", self.netns)
        _ip("-n", self.netns, "link", "add", "vethA", "type", "veth", "peer", "name", "vethB")
        _ip("-n", self.netns, "link", "set", "vethA", "up")
        _ip("-n", self.netns, "link", "set", "vethB", "up")
        return self

    def __exit__(self, *exc) -> None:
        _ip("netns", "del", self.netns, check=False)

    def flush_actions(self) -> None:
        _tc(self.netns, "actions", "flush", "action", "mirred", check=False)
        time.sleep(1.0)  # the kernel frees them from a workqueue, which would take a CPU from the next run

    def reset_ingress(self) -> None:
        _tc(self.netns, "qdisc", "del", "dev", "vethA", "ingress", check=False)
        time.sleep(1.0)  # filter and bound-action teardown finishes asynchronously


def write_actions(path: Path, count: int) -> None:
    with path.open("w") as out:
        for index in range(1, count + 1):
            out.write(f"actions add action mirred egress redirect dev vethB index {index}\n")


def write_u32_hash(path: Path, count: int) -> None:
    """Filters spread over 256 buckets by the last byte of the destination address."""
    with path.open("w") as out:
        out.write("qdisc add dev vethA ingress\n"
                  "filter add dev vethA ingress protocol ip prio 1 handle 1: u32 divisor 256\n"
                  "filter add dev vethA ingress protocol ip prio 1 u32 ht 800:: "
                  "match ip dst 10.0.0.0/8 hashkey mask 0x000000ff at 16 link 1:\n")
        for i in range(count):
            a, b, c = (i >> 16) & 255, (i >> 8) & 255, i & 255
            out.write(f"filter add dev vethA ingress protocol ip prio 1 u32 ht 1:{c:x}: "
                      f"match ip dst 10.{a}.{b}.{c}/32 action mirred egress redirect dev vethB\n")


def _bpfbatch() -> list[str]:
    script = Path(sys.executable).parent / "bpfbatch"
    return [str(script)] if script.exists() else [sys.executable, "-m", "bpfbatch.cli"]


def _in_process(netns: str, path: Path):
    def send() -> None:
        with Session(netns=netns) as session, path.open() as stream:
            raise_for(session.send_batch(stream, str(path)))
    return send


def _packed(netns: str, path: Path) -> list[bytearray]:
    """The file's messages as the sender packs them, in ``sendmsg``-sized buffers, each
    buffer's last message asking for the one ACK (nothing else added: no echo)."""
    batches: list[bytearray] = []
    buf, last, seq = bytearray(), 0, 0
    with in_netns(netns), contextlib.closing(Resolver()) as resolve, path.open() as stream:
        for line, message in TemplateReader(resolve).read(stream, str(path)):
            if not isinstance(message, Message):
                raise SystemExit(f"{path}:{line}: the floor sends encoded lines only")
            size = 16 + len(message.body)
            if len(buf) + size > DEFAULT_BATCH_BYTES:
                buf[last + _FLAGS] |= S.NLM_F_ACK
                batches.append(buf)
                buf = bytearray()
            seq += 1
            last = len(buf)
            buf += S.NLMSGHDR.pack(size, message.msg_type, message.flags | S.NLM_F_REQUEST, seq, 0)
            buf += message.body
    buf[last + _FLAGS] |= S.NLM_F_ACK
    return [*batches, buf]


def _floor(netns: str, path: Path):
    batches: list[bytearray] = []

    def prepare() -> None:  # untimed, after the round's reset
        batches[:] = _packed(netns, path)

    def send() -> None:
        with in_netns(netns):
            sock = RtnlSocket(sndbuf=DEFAULT_BATCH_BYTES + 64, rcvbuf=16 << 20)
        try:
            for buf in batches:
                sock.send(buf)
                while (reply := sock.next_reply()) is not None:
                    if reply.error:
                        raise SystemExit(f"floor: a message failed: {os.strerror(reply.error)}")
        finally:
            sock.close()
    return prepare, send


def bench(title: str, lab: Lab, path: Path, setup, *, rounds: int, warmup: int, out: Path,
          params: dict) -> None:
    ours = _bpfbatch()
    cases = {
        "tc -b": Command(["tc", "-netns", lab.netns, "-b", str(path)], setup=setup),
        BASELINE: Command([*ours, "tc", "-b", str(path), "--netns", lab.netns], setup=setup),
        "bpfbatch tc -b --coalesce": Command(
            [*ours, "tc", "-b", str(path), "--netns", lab.netns, "--coalesce"], setup=setup),
        "bpfbatch API": InProcess(_in_process(lab.netns, path), setup=setup),
    }
    prepare, send = _floor(lab.netns, path)
    cases["kernel floor"] = InProcess(send, setup=lambda: (setup(), prepare()))
    rows = summarize(interleave(cases, rounds=rounds, warmup=warmup), BASELINE)
    report(title, rows, BASELINE, out_dir=out, params=params)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench tc", description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--count", type=int, default=100_000, help="rules per file")
    parser.add_argument("--full", action="store_true", help="also 1M mirred actions (minutes, GBs for tc)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--only", choices=("actions", "u32"), help="run one layout")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results")
    args = parser.parse_args(argv)
    if os.geteuid() != 0 or not shutil.which("tc"):
        print("tc bench: needs root and iproute2's tc", file=sys.stderr)
        return 2
    common = dict(rounds=args.rounds, warmup=args.warmup, out=args.out)
    with tempfile.TemporaryDirectory() as tmp, Lab() as lab:
        sizes = [args.count] + ([1_000_000] if args.full else [])
        if args.only in (None, "actions"):
            for count in sizes:
                path = Path(tmp) / f"actions-{count}.tc"
                write_actions(path, count)
                bench(f"tc batch: {count:,} mirred actions", lab, path, lab.flush_actions,
                      params=dict(layout="actions", count=count), **common)
                path.unlink()
        if args.only in (None, "u32"):
            path = Path(tmp) / "u32.tc"
            write_u32_hash(path, args.count)
            bench(f"tc batch: {args.count:,} u32 filters, 256-bucket hash, mirred", lab, path,
                  lab.reset_ingress, params=dict(layout="u32-hash-256", count=args.count), **common)
    return 0
