"""tcptop: TCP throughput per process and flow, summarised every interval, like bcc's tcptop.

Counting (``progs/tcptop.bpf.c``): the return values of ``sock_sendmsg``/``sock_recvmsg`` from
the ``sock:sock_send_length``/``sock:sock_recv_length`` tracepoints — TCP sockets only, only
``ret > 0`` (errors are negative), no ``MSG_PEEK`` (peeked data is read again later) and no
``MSG_ERRQUEUE`` (notifications and looped-back headers, not stream bytes), added atomically. bcc's kprobe version counted the *requested* send size and libbpf-tools counts
``tcp_cleanup_rbuf``'s cumulative ``copied``; both over-count.

Every interval is read out with :class:`~bpfbatch.top.intervals.SwappedMaps`: nothing sent or
received between two read-outs is lost or counted twice.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator

import numpy as np

from ..errors import InputError
from ..loader import HOOK_KINDS
from . import screen
from .intervals import IntervalTool

SORT_KEYS = ("all", "sent", "received")
FAMILIES = {4: socket.AF_INET, 6: socket.AF_INET6}


@dataclasses.dataclass(frozen=True)
class Sample:
    """One interval: ``flows`` is a numpy structured array with the key's fields (from
    ``struct tcptop_key``) plus ``sent`` and ``received``; ``dropped_events`` counts the
    send/recv calls not recorded in the interval (flow map full, or the kernel skipped the
    program), ``dropped_bytes`` their bytes when known (map full)."""

    flows: np.ndarray
    dropped_events: int
    dropped_bytes: int


class TcpTop(IntervalTool):
    """The loaded and attached tcptop programs. ``pid`` and ``family`` (4 or 6) filter in the
    kernel; :meth:`sample` returns what was counted since the previous call. ``capacity``
    bounds the flows one interval can hold (default ``TCPTOP_MAX_FLOWS``)."""

    def __init__(self, *, pid: int | None = None, family: int | None = None,
                 hook_kinds: tuple[str, ...] = HOOK_KINDS, capacity: int | None = None):
        if family is not None and family not in FAMILIES:
            raise InputError(f"family must be 4 or 6, got {family}", obj="family")
        super().__init__("tcptop", ("flows_a", "flows_b"),
                         {"target_family": FAMILIES[family] if family else 0},
                         records=("tcptop_key", "tcptop_value"), pid=pid,
                         hook_kinds=hook_kinds, capacity=capacity)
        self._key_dtype = self.dtypes["tcptop_key"]
        self._value_dtype = self.dtypes["tcptop_value"]
        self.flow_dtype = flow_dtype(self._key_dtype, self._value_dtype)

    def sample(self) -> Sample:
        keys, values = self.maps.drain()
        k = keys.view(self._key_dtype)[:, 0]
        v = values.view(self._value_dtype)[:, 0]
        flows = np.empty(len(k), dtype=self.flow_dtype)
        for name in self._key_dtype.names:
            flows[name] = k[name]
        for name in self._value_dtype.names:
            flows[name] = v[name]
        return Sample(flows, self.dropped("dropped_events") + self.missed(),
                      self.dropped("dropped_bytes"))


def flow_dtype(key: np.dtype, value: np.dtype) -> np.dtype:
    """One row of :attr:`Sample.flows`: the key's fields, then the value's."""
    return np.dtype([(n, key.fields[n][0]) for n in key.names]
                    + [(n, value.fields[n][0]) for n in value.names])


def order(flows: np.ndarray, sort: str) -> np.ndarray:
    """``flows`` sorted descending by ``sort`` (``all`` = sent + received, bcc's order)."""
    if screen.check_choice(sort, SORT_KEYS, "-s/--sort") == "all":
        total = flows["sent"].astype(np.uint64) + flows["received"]
    else:
        total = flows[sort]
    return flows[np.argsort(total, kind="stable")[::-1]]


def _address(raw: np.ndarray, family: int) -> str:
    data = bytes(raw)
    return socket.inet_ntop(family, data[:4] if family == socket.AF_INET else data)


def table(flows: np.ndarray, family: int, *, sort: str = "all", rows: int | None = 20) -> list[str]:
    """bcc's lines for one address family: a header and one line per flow, largest first,
    at most ``rows`` flows (``None``: all). Empty when the family has no flow."""
    mine = order(flows[flows["family"] == family], sort)
    if rows is not None:
        mine = mine[:rows]
    if not len(mine):
        return []
    width = 21 if family == socket.AF_INET else 32
    suffix = "" if family == socket.AF_INET else "6"
    lines = ["%-6s %-12s %-*s %-*s %6s %6s" % ("PID", "COMM", width, "LADDR" + suffix, width,
                                               "RADDR" + suffix, "RX_KB", "TX_KB")]
    for f in mine:
        lines.append("%-6d %-12.12s %-*s %-*s %6d %6d" % (
            f["pid"], f["comm"].decode(errors="replace"),
            width, f"{_address(f['saddr'], family)}:{f['lport']}",
            width, f"{_address(f['daddr'], family)}:{f['dport']}",
            f["received"] // 1024, f["sent"] // 1024))
    return lines


def report(sample: Sample, *, sort: str = "all", rows: int | None = 20) -> Iterator[str]:
    """The lines of one interval's tables: IPv4, then IPv6 after a blank line (bcc's layout)."""
    v4 = table(sample.flows, socket.AF_INET, sort=sort, rows=rows)
    v6 = table(sample.flows, socket.AF_INET6, sort=sort, rows=rows)
    yield from v4
    if v6:
        yield ""
        yield from v6
