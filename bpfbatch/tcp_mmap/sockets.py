"""Socket set-up shared by both ends: addresses, options, and kernel errors as one line each."""

from __future__ import annotations

import socket
import struct

from ..errors import InputError, from_errno
from . import _linux
from .config import Config

_FAMILY_NAME = {socket.AF_INET: "IPv4", socket.AF_INET6: "IPv6"}


def resolve(host: str | None, port: int, family: int) -> tuple:
    """The socket address for ``host`` (name or literal) in ``family``; the wildcard if None."""
    if host is None:
        return ("::", port, 0, 0) if family == socket.AF_INET6 else ("0.0.0.0", port)
    try:
        infos = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        other = "-4" if family == socket.AF_INET6 else "-6"
        raise InputError(f"no {_FAMILY_NAME[family]} address ({exc.strerror}; "
                         f"{other} switches the family)", obj=f"host {host!r}") from None
    return infos[0][4]


def describe(address: tuple) -> str:
    """``[::1]:8787`` or ``127.0.0.1:8787``."""
    host, port = address[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def set_option(sock: socket.socket, level: int, option: int, value: int, name: str,
               fmt: str = "i") -> None:
    """``setsockopt`` with a packed integer; a refusal becomes a KernelError naming ``name``."""
    try:
        sock.setsockopt(level, option, struct.pack(fmt, value))
    except OSError as exc:
        raise from_errno(f"setsockopt {name}={value}", exc.errno) from None


def tcp_socket(config: Config) -> socket.socket:
    """A TCP socket of the configured family with ``TCP_MAXSEG`` applied (before connect or
    listen, the only time it takes effect)."""
    try:
        sock = socket.socket(config.family, socket.SOCK_STREAM)
    except OSError as exc:
        raise from_errno(f"{_FAMILY_NAME[config.family]} TCP socket", exc.errno) from None
    try:
        if config.mss:
            set_option(sock, socket.IPPROTO_TCP, socket.TCP_MAXSEG, config.mss, "TCP_MAXSEG")
    except BaseException:
        sock.close()
        raise
    return sock


def rcv_mss(sock: socket.socket) -> int:
    """``tcpi_rcv_mss`` from ``TCP_INFO``: the receiver's estimate of the peer's segment size."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _linux.TCP_INFO_PREFIX)
    return struct.unpack_from("I", info, _linux.TCPI_RCV_MSS_OFFSET)[0]
