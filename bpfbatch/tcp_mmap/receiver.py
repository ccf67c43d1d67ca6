"""The receiving end of one connection: zero-copy through mmap, or plain recv(), and its report.

Zero-copy (``-z``) follows the kernel's reference program: reserve ``chunk + align`` bytes of
address space on the socket, align the start up to ``align`` (so that each receiving thread's
pages sit under their own page-table page, and so their own page-table lock), then loop:
``TCP_ZEROCOPY_RECEIVE`` maps whole pages of payload at that address; what it cannot map (the
``recv_skip_hint``: headers in the linear part of an skb, compound pages, a tail shorter than
a page) is read with recv(); the mapped range is released with ``MADV_DONTNEED`` right away.
Whether anything gets mapped depends on the sender and the path: on loopback a plain send()
gives nothing to map; a ``MSG_ZEROCOPY`` sender gives most of the payload in whole pages with
the default MSS (the rest comes through the skip hint), and all of it with an MSS of one page
(4096 + 12 bytes of TCP timestamp option).

``SO_RCVLOWAT`` = chunk makes poll() wake once a whole chunk (or the FIN) is queued, so each
wake-up moves a chunk. With ``-x`` the bytes are fed to SHA-256 as they arrive and, after the
peer's FIN, the 32-byte digest is sent back on the same connection for the sender to compare.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import hashlib
import mmap
import resource
import select
import socket
import time

from ..errors import from_errno
from . import _linux
from .config import Config
from .sockets import rcv_mss, set_option

#: poll() timeout: a sender that stalls below SO_RCVLOWAT still gets its bytes read.
POLL_TIMEOUT_MS = 10_000


@dataclasses.dataclass
class Report:
    """What one connection delivered, in the terms of the selftest's report line.

    CPU time and context switches are those of the receiving thread (``RUSAGE_THREAD``) while
    it served this connection.
    """

    peer: str
    received: int
    mapped: int
    seconds: float
    user: float
    sys: float
    voluntary_switches: int
    rcv_mss: int
    sha256: str | None = None

    @property
    def megabytes(self) -> float:
        return self.received / (1 << 20)

    @property
    def mapped_percent(self) -> float:
        return 100.0 * self.mapped / self.received if self.received else 0.0

    @property
    def gbit_per_s(self) -> float:
        return self.received * 8 / self.seconds / 1e9 if self.seconds else 0.0

    @property
    def usec_per_mb(self) -> float:
        return (self.user + self.sys) * 1e6 / self.megabytes if self.received else 0.0

    def format(self) -> str:
        """The selftest's two-line report (C ``%lg`` is Python's ``g``), plus the digest."""
        text = (f"received {self.megabytes:g} MB ({self.mapped_percent:g} % mmap'ed) in "
                f"{self.seconds:g} s, {self.gbit_per_s:g} Gbit\n"
                f"  cpu usage user:{self.user:g} sys:{self.sys:g}, {self.usec_per_mb:g} usec "
                f"per MB, {self.voluntary_switches} c-switches, rcv_mss {self.rcv_mss}")
        if self.sha256:
            text += f"\n  sha256 {self.sha256}"
        return text


class _Tally:
    """Bytes seen so far, how many of them arrived mapped, and the running digest."""

    def __init__(self, hashing: bool):
        self.received = 0
        self.mapped = 0
        self.digest = hashlib.sha256() if hashing else None

    def add(self, data: memoryview, *, mapped: bool) -> None:
        self.received += len(data)
        if mapped:
            self.mapped += len(data)
        if self.digest is not None:
            self.digest.update(data)


def receive(sock: socket.socket, config: Config, peer: str) -> Report:
    """Read ``sock`` until the peer's FIN, as ``config`` says; return the report.

    Raises a :class:`~bpfbatch.errors.KernelError` naming ``peer`` if the socket fails.
    The caller owns (and closes) ``sock``.
    """
    start = time.perf_counter()
    usage_before = resource.getrusage(resource.RUSAGE_THREAD)
    set_option(sock, socket.SOL_SOCKET, socket.SO_RCVLOWAT, config.chunk_size, "SO_RCVLOWAT")
    sock.setblocking(False)
    tally = _Tally(config.hash)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    if config.zerocopy:
        _receive_mapped(sock, poller, config.chunk_size, config.mapping_align, tally, peer)
    else:
        _receive_copied(sock, poller, config.chunk_size, tally, peer)
    seconds = time.perf_counter() - start
    if tally.digest is not None:
        sock.setblocking(True)
        try:
            sock.sendall(tally.digest.digest())
        except OSError as exc:
            raise from_errno("send the SHA-256 back", exc.errno, obj=peer) from None
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return Report(peer=peer, received=tally.received, mapped=tally.mapped, seconds=seconds,
                  user=usage.ru_utime - usage_before.ru_utime,
                  sys=usage.ru_stime - usage_before.ru_stime,
                  voluntary_switches=usage.ru_nvcsw - usage_before.ru_nvcsw,
                  rcv_mss=rcv_mss(sock),
                  sha256=tally.digest.hexdigest() if tally.digest is not None else None)


def _recv_into(sock: socket.socket, view: memoryview, peer: str) -> int | None:
    """recv() into ``view``: bytes read, 0 at the peer's FIN, None if nothing is queued."""
    try:
        return sock.recv_into(view)
    except BlockingIOError:
        return None
    except OSError as exc:
        raise from_errno("recv", exc.errno, obj=peer) from None


def _receive_copied(sock, poller, chunk: int, tally: _Tally, peer: str) -> None:
    """Plain receive: fill a chunk-sized buffer with recv() after each wake-up."""
    buffer = mmap.mmap(-1, chunk)
    with memoryview(buffer) as view:
        while True:
            poller.poll(POLL_TIMEOUT_MS)
            filled = 0
            while filled < chunk:
                count = _recv_into(sock, view[filled:], peer)
                if count is None:
                    break
                if count == 0:
                    return
                tally.add(view[filled:filled + count], mapped=False)
                filled += count


def _receive_mapped(sock, poller, chunk: int, align: int, tally: _Tally, peer: str) -> None:
    """Zero-copy receive: map pages with TCP_ZEROCOPY_RECEIVE, recv() the skip hints."""
    fd = sock.fileno()
    reserved = chunk + align
    base = _linux.mmap_socket(fd, reserved)
    try:
        address = (base + align - 1) & ~(align - 1)
        bounce = mmap.mmap(-1, chunk)
        with memoryview(bounce) as view:
            zc = _linux.TcpZerocopyReceive()
            while True:
                poller.poll(POLL_TIMEOUT_MS)
                ctypes.memset(ctypes.addressof(zc), 0, ctypes.sizeof(zc))
                zc.address = address
                zc.length = chunk
                failure = _linux.zerocopy_receive(fd, zc)
                if failure == errno.EIO:
                    return  # nothing queued and the peer's FIN has arrived
                if failure:
                    raise from_errno("getsockopt TCP_ZEROCOPY_RECEIVE", failure, obj=peer)
                if zc.err:
                    raise from_errno("receive", zc.err, obj=peer)
                if zc.length:
                    tally.add(_linux.memory_view(address, zc.length), mapped=True)
                    _linux.release_pages(address, zc.length)
                if zc.recv_skip_hint:
                    count = _recv_into(sock, view[:min(zc.recv_skip_hint, chunk)], peer)
                    if count == 0:
                        return
                    if count:
                        tally.add(view[:count], mapped=False)
    finally:
        _linux.munmap(base, reserved)
