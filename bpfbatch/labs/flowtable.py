"""A real flow table to prune: ``progs/flowtable.bpf.c`` on a veth pair between two throwaway
network namespaces, with UDP traffic sent across it.

::

    with FlowTableLab() as lab:
        flows = lab.open_flows(1000)   # 1000 UDP sockets in the sender namespace
        flows.send()                   # one datagram per flow: 1000 entries appear
        flows.send(flows.sockets[:10]) # refresh 10 of them
        lab.table                      # the LRU hash (a Map), e.g. for bpfbatch.exec.prune

The program is loaded with :class:`~bpfbatch.loader.BpfObject`, pinned for a moment so that
iproute2's ``tc filter ... bpf da pinned`` (run under ``nsenter --net``) can attach it to the
receiving veth's clsact ingress, then unpinned (tc holds its own reference). Everything is
removed on exit, also on error.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Sequence

from .._sys.libbpf import check, lib
from ..api import Map
from ..errors import BpfBatchError
from ..loader import BpfObject
from ..tc import netns

SENDER_ADDR, RECEIVER_ADDR = "10.213.0.1", "10.213.0.2"
DISCARD_PORT = 9


def _ip(*argv: str) -> None:
    proc = subprocess.run(["ip", *argv], capture_output=True, text=True)
    if proc.returncode:
        raise BpfBatchError(f"`ip {' '.join(argv)}` failed: {proc.stderr.strip()}",
                            obj="flow table lab")


class Flows:
    """UDP sockets in the sender namespace, one flow (source port) each."""

    def __init__(self, sockets: list[socket.socket]):
        self.sockets = sockets

    def send(self, sockets: Sequence[socket.socket] | None = None, payload: bytes = b"x" * 64
             ) -> None:
        """One datagram per socket to the receiver's discard port."""
        for s in self.sockets if sockets is None else sockets:
            s.sendto(payload, (RECEIVER_ADDR, DISCARD_PORT))

    def ports(self, sockets: Sequence[socket.socket] | None = None) -> list[int]:
        return [s.getsockname()[1] for s in (self.sockets if sockets is None else sockets)]

    def close(self) -> None:
        for s in self.sockets:
            s.close()
        self.sockets = []


class FlowTableLab:
    """Two namespaces ``<prefix>a-<pid>`` / ``<prefix>b-<pid>``, a veth pair, the flow table
    program on the receiver's ingress. ``max_flows`` sizes the LRU hash."""

    def __init__(self, *, prefix: str = "bbft", max_flows: int | None = None):
        tag = f"{os.getpid()}"
        self.sender, self.receiver = f"{prefix}a-{tag}", f"{prefix}b-{tag}"
        self.max_flows = max_flows
        self._stack = contextlib.ExitStack()
        self._flows: list[Flows] = []
        self.obj: BpfObject | None = None

    def __enter__(self) -> "FlowTableLab":
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def table(self) -> Map:
        """The flow table: ``struct flowtable_key → struct flowtable_stats``, an LRU hash."""
        return self.obj.map("flows")

    def _setup(self) -> None:
        for ns in (self.sender, self.receiver):
            _ip("netns", "add", ns)
            self._stack.callback(subprocess.run, ["ip", "netns", "del", ns], capture_output=True)
        _ip("-n", self.sender, "link", "add", "ft0", "type", "veth", "peer", "name", "ft1",
            "netns", self.receiver)
        for ns, dev, addr in ((self.sender, "ft0", SENDER_ADDR),
                              (self.receiver, "ft1", RECEIVER_ADDR)):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
        self.obj = BpfObject.package("flowtable")
        self._stack.callback(self.obj.close)
        if self.max_flows:
            self.obj.configure_map("flows", max_entries=self.max_flows)
        self.obj.load()
        self._attach()
        self._resolve_neighbour()

    def _attach(self) -> None:
        pin = f"/sys/fs/bpf/{self.receiver}"
        check(lib.bpf_obj_pin(self.obj.program_fd("record_flow"), pin.encode()),
              "pin flow table program", pin)
        try:
            for argv in (["qdisc", "add", "dev", "ft1", "clsact"],
                         ["filter", "add", "dev", "ft1", "ingress", "bpf", "da", "pinned", pin]):
                # nsenter, not `tc -n`: that remounts /sys, hiding the pin on /sys/fs/bpf.
                proc = subprocess.run(["nsenter", f"--net={netns.NETNS_RUN_DIR}/{self.receiver}",
                                       "tc", *argv], capture_output=True, text=True)
                if proc.returncode:
                    raise BpfBatchError(f"`tc {' '.join(argv)}` failed: {proc.stderr.strip()}",
                                        obj="flow table lab")
        finally:
            os.unlink(pin)

    def _resolve_neighbour(self) -> None:
        """Resolve the receiver's MAC first: packets waiting for ARP are dropped past a few."""
        _ip("-n", self.sender, "neigh", "replace", RECEIVER_ADDR, "dev", "ft0", "lladdr",
            self._mac(self.receiver, "ft1"))

    @staticmethod
    def _mac(ns: str, dev: str) -> str:
        with open(os.devnull) as null:
            out = subprocess.run(["ip", "-n", ns, "-br", "link", "show", dev], stdin=null,
                                 capture_output=True, text=True, check=True).stdout
        return out.split()[2]

    def open_flows(self, count: int) -> Flows:
        """``count`` UDP sockets in the sender namespace (each its own source port)."""
        sockets = []
        with netns.entered(self.sender):
            for _ in range(count):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sockets.append(s)
                s.bind((SENDER_ADDR, 0))
        flows = Flows(sockets)
        self._flows.append(flows)
        return flows

    def wait_for(self, entries: int, timeout: float = 5.0) -> int:
        """Wait until the table holds at least ``entries`` flows; how many it holds."""
        from ..map.cursor import BatchCursor

        deadline = time.monotonic() + timeout
        while True:
            held = sum(b.count for b in BatchCursor(self.table))
            if held >= entries or time.monotonic() > deadline:
                return held
            time.sleep(0.01)

    def close(self) -> None:
        for flows in self._flows:
            flows.close()
        self._flows.clear()
        self._stack.close()
        self.obj = None
