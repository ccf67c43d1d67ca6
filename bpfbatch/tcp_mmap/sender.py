"""The sending end: ``size`` bytes of random data, optionally with ``MSG_ZEROCOPY``.

The payload is one page-aligned chunk of random bytes sent over and over (page alignment
matters: the receiver can only map payload that starts on a page). With ``-z`` every send()
carries ``MSG_ZEROCOPY``: the kernel pins the chunk's pages instead of copying them and later
queues a completion on the socket's error queue, one 32-bit id per send() call, coalesced into
ranges. Those completions are reaped after every send — unreaped ones count against the
socket's option memory and make send() fail with ENOBUFS — and all of them are waited for
before the connection is shut down. On loopback the kernel copies the pages anyway when it
hands them to the receiving socket, and says so (``SO_EE_CODE_ZEROCOPY_COPIED``).

After the data the sender shuts down its half of the connection and reads until the peer
closes; with ``-x`` the peer's reply is the SHA-256 of what it received, compared here with
the digest of what was sent.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import mmap
import os
import select
import socket
import struct
import time

from ..errors import BpfBatchError, KernelError, from_errno
from . import _linux
from .config import Config
from .sockets import describe, resolve, set_option, tcp_socket

#: How long to wait for the last MSG_ZEROCOPY completions, and for the receiver's reply.
COMPLETION_TIMEOUT_S = 30.0
REPLY_TIMEOUT_S = 60.0
#: ENOBUFS retries without any completion arriving in between before giving up.
ENOBUFS_RETRIES = 20

# struct sock_extended_err (linux/errqueue.h): ee_errno, origin, type, code, pad, info, data
_EXTENDED_ERR = struct.Struct("=IBBBBII")
_ERRQUEUE_CMSGS = {(socket.IPPROTO_IP, _linux.IP_RECVERR),
                   (socket.IPPROTO_IPV6, _linux.IPV6_RECVERR)}
_ANCILLARY_SPACE = socket.CMSG_SPACE(_EXTENDED_ERR.size + 28)  # + the offender sockaddr_in6


@dataclasses.dataclass
class SendReport:
    """What the sender did: bytes, time, and the MSG_ZEROCOPY accounting."""

    peer: str
    sent: int
    seconds: float
    zerocopy_sends: int = 0
    completions: int = 0
    copied: int = 0
    sha256: str | None = None

    def format(self) -> str:
        text = (f"sent {self.sent / (1 << 20):g} MB to {self.peer} in {self.seconds:g} s, "
                f"{self.sent * 8 / self.seconds / 1e9 if self.seconds else 0:g} Gbit")
        if self.zerocopy_sends:
            text += (f"\n  MSG_ZEROCOPY: {self.zerocopy_sends} sends, {self.completions} "
                     f"completed, {self.copied} of them copied by the kernel")
        if self.sha256:
            text += f"\n  sha256 {self.sha256} (the receiver's matches)"
        return text


class ZeroCopyCompletions:
    """The MSG_ZEROCOPY notifications of one socket: how many sends are still in flight.

    Each successful send() with MSG_ZEROCOPY takes the next id; the kernel reports ranges
    ``[ee_info, ee_data]`` of ids whose pages it no longer holds. ``copied`` counts the
    completions flagged ``SO_EE_CODE_ZEROCOPY_COPIED`` (the kernel fell back to copying).
    """

    def __init__(self, sock: socket.socket, peer: str):
        self._sock = sock
        self._peer = peer
        self.issued = 0
        self.completed = 0
        self.copied = 0

    @property
    def pending(self) -> int:
        return self.issued - self.completed

    def reap(self, timeout: float = 0.0) -> int:
        """Drain the error queue, first waiting up to ``timeout`` s for something to arrive.
        Returns how many sends completed."""
        if timeout > 0:
            poller = select.poll()
            poller.register(self._sock.fileno(), 0)  # POLLERR is always reported
            poller.poll(int(timeout * 1000))
        before = self.completed
        while True:
            try:
                _, ancillary, _, _ = self._sock.recvmsg(
                    0, _ANCILLARY_SPACE, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
            except BlockingIOError:
                return self.completed - before
            except OSError as exc:
                raise from_errno("recvmsg MSG_ERRQUEUE", exc.errno, obj=self._peer) from None
            for level, kind, data in ancillary:
                if (level, kind) in _ERRQUEUE_CMSGS:
                    self._account(data)

    def _account(self, data: bytes) -> None:
        ee_errno, origin, _, code, _, first, last = _EXTENDED_ERR.unpack_from(data)
        if origin != _linux.SO_EE_ORIGIN_ZEROCOPY:
            raise from_errno("send", ee_errno or errno.EIO, obj=self._peer)
        count = ((last - first) & 0xFFFFFFFF) + 1
        self.completed += count
        if code & _linux.SO_EE_CODE_ZEROCOPY_COPIED:
            self.copied += count

    def wait_all(self, timeout: float = COMPLETION_TIMEOUT_S) -> None:
        """Block until every issued send has completed, or raise after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while self.pending > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KernelError("MSG_ZEROCOPY completions", errno.ETIMEDOUT, obj=self._peer,
                                  detail=f"{self.pending} of {self.issued} sends never "
                                         f"completed within {timeout:g} s")
            self.reap(min(remaining, 0.5))


def send(config: Config) -> SendReport:
    """Connect to ``config.host`` and send ``config.size`` bytes as configured.

    Raises :class:`~bpfbatch.errors.BpfBatchError` (naming the peer) if the connection fails,
    a completion never arrives, or, with ``config.hash``, the receiver's digest differs.
    """
    address = resolve(config.host, config.port, config.family)
    peer = describe(address)
    with tcp_socket(config) as sock:
        try:
            sock.connect(address)
        except OSError as exc:
            raise from_errno("connect", exc.errno, obj=peer) from None
        if config.pacing_rate:
            set_option(sock, socket.SOL_SOCKET, _linux.SO_MAX_PACING_RATE, config.pacing_rate,
                       "SO_MAX_PACING_RATE", fmt="Q")
        completions = None
        if config.zerocopy:
            set_option(sock, socket.SOL_SOCKET, _linux.SO_ZEROCOPY, 1, "SO_ZEROCOPY")
            completions = ZeroCopyCompletions(sock, peer)
        digest = hashlib.sha256() if config.hash else None
        start = time.perf_counter()
        _send_stream(sock, config, completions, digest, peer)
        if completions is not None:
            completions.wait_all()
        seconds = time.perf_counter() - start
        reply = _finish(sock, peer)
    report = SendReport(peer=peer, sent=config.size, seconds=seconds)
    if completions is not None:
        report.zerocopy_sends = completions.issued
        report.completions = completions.completed
        report.copied = completions.copied
    if digest is not None:
        report.sha256 = _check_digest(digest.digest(), reply, peer)
    return report


def _send_stream(sock, config: Config, completions: ZeroCopyCompletions | None, digest,
                 peer: str) -> None:
    """Send ``config.size`` bytes cycling through one random, page-aligned chunk."""
    chunk = config.chunk_size
    payload = mmap.mmap(-1, chunk)
    payload.write(os.urandom(chunk))
    flags = _linux.MSG_ZEROCOPY if completions is not None else 0
    view = memoryview(payload)
    sent = 0
    stalls = 0
    while sent < config.size:
        offset = sent % chunk
        piece = view[offset:offset + min(chunk - offset, config.size - sent)]
        try:
            count = sock.send(piece, flags)
        except OSError as exc:
            if exc.errno == errno.ENOBUFS and completions is not None and stalls < ENOBUFS_RETRIES:
                # Too many notifications outstanding: wait for some before sending more.
                stalls = 0 if completions.reap(timeout=0.5) else stalls + 1
                continue
            raise from_errno("send", exc.errno, obj=peer) from None
        if completions is not None:
            completions.issued += 1
            completions.reap()
        if digest is not None:
            digest.update(piece[:count])
        sent += count


def _finish(sock: socket.socket, peer: str) -> bytes:
    """Shut down the sending half and read the receiver's reply until it closes."""
    reply = bytearray()
    try:
        sock.shutdown(socket.SHUT_WR)  # ENOTCONN if the receiver has reset the connection
        sock.settimeout(REPLY_TIMEOUT_S)
        while chunk := sock.recv(4096):
            reply += chunk
    except TimeoutError:
        raise KernelError("wait for the receiver to close", errno.ETIMEDOUT, obj=peer,
                          detail=f"no close within {REPLY_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise from_errno("finish: shut down and read the receiver's reply", exc.errno,
                         obj=peer) from None
    return bytes(reply)


def _check_digest(ours: bytes, reply: bytes, peer: str) -> str:
    if len(reply) != len(ours):
        raise BpfBatchError(f"the receiver sent {len(reply)} bytes back, not a SHA-256 digest "
                            f"(is it a tcp_mmap server started with -x?)", obj=peer)
    if reply != ours:
        raise BpfBatchError(f"data corrupted: sent SHA-256 {ours.hex()}, the receiver hashed "
                            f"{reply.hex()}", obj=peer)
    return ours.hex()
