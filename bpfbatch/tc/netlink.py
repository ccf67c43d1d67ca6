"""The rtnetlink socket the sender talks through.

Set up for batching (see the package docs for the measurements behind each choice):

* ``SO_SNDBUFFORCE``/``SO_RCVBUFFORCE``: one ``sendmsg`` may carry at most ``sk_sndbuf - 32``
  bytes, and every reply to it must fit the receive buffer *before* we can read any (the
  kernel processes the whole send synchronously; a reply that does not fit is dropped and
  reported later as ENOBUFS). ``SO_SNDBUF``/``SO_RCVBUF`` are capped by ``wmem_max``/``rmem_max``;
  the FORCE variants (CAP_NET_ADMIN) are not. Without the capability the plain options are used
  and the sender sizes its batches from what the kernel actually granted.
* ``NETLINK_CAP_ACK``: an error reply carries only the request's header, not the whole request.
* ``NETLINK_EXT_ACK``: error replies carry the kernel's explanation text.

Replies are read one ``recv`` each (every reply is its own skb) into one reused buffer, without
blocking: when ``sendmsg`` returns, all its replies are already queued.
"""

from __future__ import annotations

import errno
import socket
import struct

from ..errors import from_errno
from . import specs as S

SOL_NETLINK = 270
NETLINK_CAP_ACK = 10
NETLINK_EXT_ACK = 11
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33

#: Receive-buffer charge of one reply skb (truesize). An ACK measured 832 bytes on 6.18; error
#: replies with extack text are bigger, so budget twice that.
REPLY_TRUESIZE = 2048
#: sendmsg refuses ``len > sk_sndbuf - 32`` (net/netlink/af_netlink.c).
SNDBUF_RESERVE = 32

_ERR = struct.Struct("=i")
#: Replies carrying an object as the kernel dumps it: the echo of a filter add sent with
#: NLM_F_ECHO and the answer to a filter get (both RTM_NEWTFILTER), and the answer to an
#: action get (RTM_GETACTION: the kernel answers with the request's type).
OBJECT_REPLIES = (S.Msg.NEWTFILTER, S.Msg.GETACTION)
_TLV = struct.Struct("=HH")


class Reply:
    """One reply: an NLMSG_ERROR (``seq``, ``error`` 0 or a positive errno, the extack
    ``message`` — an error's text, or a warning on success), or an object the kernel sent back
    (``dump``: the body after the netlink header, ``tcmsg``/``tcamsg`` and attributes, of an
    echo or of a get's answer; ``error`` 0)."""

    __slots__ = ("seq", "error", "message", "dump")

    def __init__(self, seq: int, error: int, message: str | None, dump: bytes | None = None):
        self.seq = seq
        self.error = error
        self.message = message
        self.dump = dump


class RtnlSocket:
    """A NETLINK_ROUTE socket with forced buffers, CAP_ACK and EXT_ACK."""

    def __init__(self, *, sndbuf: int = 8 << 20, rcvbuf: int = 32 << 20) -> None:
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                   socket.NETLINK_ROUTE)
        try:
            self._force(SO_SNDBUFFORCE, socket.SO_SNDBUF, sndbuf)
            self._force(SO_RCVBUFFORCE, socket.SO_RCVBUF, rcvbuf)
            self._sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
            self._sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
            self._sock.bind((0, 0))
        except BaseException:
            self._sock.close()
            raise
        #: What the kernel granted (it doubles the request for bookkeeping overhead).
        self.sndbuf = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        self.rcvbuf = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        self._buf = bytearray(65536)
        self._view = memoryview(self._buf)

    def _force(self, forced: int, plain: int, size: int) -> None:
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, forced, size)
        except PermissionError:
            self._sock.setsockopt(socket.SOL_SOCKET, plain, size)

    @property
    def max_send_bytes(self) -> int:
        """The largest sendmsg the kernel accepts on this socket."""
        return self.sndbuf - SNDBUF_RESERVE

    @property
    def max_replies(self) -> int:
        """How many replies are sure to fit the receive buffer at once."""
        return max(1, self.rcvbuf // REPLY_TRUESIZE)

    def send(self, data: bytes | bytearray | memoryview) -> None:
        """One sendmsg to the kernel; the kernel has processed every message when this returns."""
        try:
            sent = self._sock.sendmsg((data,))
        except OSError as exc:
            raise from_errno("send netlink batch", exc.errno) from None
        if sent != len(data):
            raise from_errno("send netlink batch", errno.EMSGSIZE,
                             detail=f"kernel took {sent} of {len(data)} bytes")

    def next_reply(self) -> Reply | None:
        """The next queued reply, or None when none is queued."""
        try:
            size = self._sock.recv_into(self._buf, 0, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None
        except OSError as exc:
            raise from_errno("receive netlink reply", exc.errno) from None
        return parse_reply(self._view[:size])

    def close(self) -> None:
        self._sock.close()


def parse_reply(data: memoryview | bytes) -> Reply:
    """Decode an NLMSG_ERROR reply (error code and the extack message, if any) or an object."""
    length, msg_type, flags, seq, _pid = S.NLMSGHDR.unpack_from(data, 0)
    if msg_type in OBJECT_REPLIES:
        return Reply(seq, 0, None, bytes(data[16:length]))
    if msg_type != S.NLMSG_ERROR:
        raise from_errno("receive netlink reply", errno.EPROTO,
                         detail=f"unexpected reply type {msg_type} for seq {seq}")
    error = -_ERR.unpack_from(data, 16)[0]
    message = None
    if flags & S.NLM_F_ACK_TLVS:
        # After struct nlmsgerr: the echoed request header (CAPPED) or the whole request.
        offset = 20 + (16 if flags & S.NLM_F_CAPPED else S.NLMSGHDR.unpack_from(data, 20)[0])
        end = min(length, len(data))
        while offset + 4 <= end:
            size, kind = _TLV.unpack_from(data, offset)
            if size < 4:
                break
            if kind & 0x3FFF == S.NLMSGERR_ATTR_MSG:
                message = bytes(data[offset + 4:offset + size]).rstrip(b"\0").decode(errors="replace")
            offset += (size + 3) & ~3
    return Reply(seq, error, message)
