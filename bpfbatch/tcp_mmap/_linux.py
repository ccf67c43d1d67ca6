"""The Linux ABI the tool needs and Python's ``socket`` module lacks.

Constants come from the UAPI headers (``linux/tcp.h``, ``linux/errqueue.h``,
``asm-generic/socket.h``, ``linux/in.h``, ``linux/in6.h``). The libc calls are made through
ctypes because the standard library cannot express them: ``socket.getsockopt`` hands the
kernel a zeroed buffer, but ``TCP_ZEROCOPY_RECEIVE`` is an in/out call whose input (the
mapping address) must be filled in; and ``mmap.mmap`` hides the address the kernel chose,
which the receiver has to align and pass back. ctypes releases the GIL around each call, so
receiver threads make progress in parallel.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import socket

from ..errors import from_errno

PAGE_SIZE = mmap.PAGESIZE

# asm-generic/socket.h, linux/socket.h
SO_MAX_PACING_RATE = 47
SO_ZEROCOPY = 60
MSG_ZEROCOPY = 0x4000000
# linux/tcp.h
TCP_ZEROCOPY_RECEIVE = 35
# linux/in.h, linux/in6.h: the cmsg types the error queue uses
IP_RECVERR = 11
IPV6_RECVERR = 25
# linux/errqueue.h
SO_EE_ORIGIN_ZEROCOPY = 5
SO_EE_CODE_ZEROCOPY_COPIED = 1
# struct tcp_info: u8 x 8 (state .. rate flags), then u32 rto, ato, snd_mss, rcv_mss
TCPI_RCV_MSS_OFFSET = 20
TCP_INFO_PREFIX = TCPI_RCV_MSS_OFFSET + 4


class TcpZerocopyReceive(ctypes.Structure):
    """``struct tcp_zerocopy_receive`` (linux/tcp.h), the 64-byte layout of Linux 5.11+.

    In: ``address`` (page-aligned, inside an mmap of the socket) and ``length``. Out:
    ``length`` = bytes now mapped there, ``recv_skip_hint`` = bytes the caller must read with
    recv() before the next call (data that is not page-aligned payload), ``inq`` = bytes left
    queued, ``err`` = pending socket error. The copybuf, flags and msg_control fields stay zero.
    """

    _fields_ = [
        ("address", ctypes.c_uint64),
        ("length", ctypes.c_uint32),
        ("recv_skip_hint", ctypes.c_uint32),
        ("inq", ctypes.c_uint32),
        ("err", ctypes.c_int32),
        ("copybuf_address", ctypes.c_uint64),
        ("copybuf_len", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("msg_control", ctypes.c_uint64),
        ("msg_controllen", ctypes.c_uint64),
        ("msg_flags", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.mmap.restype = ctypes.c_void_p
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.munmap.restype = ctypes.c_int
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.madvise.restype = ctypes.c_int
_libc.getsockopt.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_uint32)]
_libc.getsockopt.restype = ctypes.c_int

_MAP_FAILED = ctypes.c_void_p(-1).value


def mmap_socket(fd: int, length: int) -> int:
    """Reserve ``length`` bytes of address space backed by TCP socket ``fd``; return the address.

    The kernel only creates the VMA here; pages arrive with each ``TCP_ZEROCOPY_RECEIVE``.
    """
    address = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address is None or address == _MAP_FAILED:
        raise from_errno("mmap of the TCP socket", ctypes.get_errno())
    return address


def munmap(address: int, length: int) -> None:
    if _libc.munmap(address, length) != 0:
        raise from_errno("munmap", ctypes.get_errno())


def release_pages(address: int, length: int) -> None:
    """``madvise(MADV_DONTNEED)``: drop the mapped skb pages now so the kernel can free them,
    rather than at the next ``TCP_ZEROCOPY_RECEIVE`` (which would zap them itself)."""
    if _libc.madvise(address, length, mmap.MADV_DONTNEED) != 0:
        raise from_errno("madvise MADV_DONTNEED", ctypes.get_errno())


def zerocopy_receive(fd: int, zc: TcpZerocopyReceive) -> int:
    """``getsockopt(fd, IPPROTO_TCP, TCP_ZEROCOPY_RECEIVE, &zc)``; 0 or the errno it failed with."""
    size = ctypes.c_uint32(ctypes.sizeof(zc))
    if _libc.getsockopt(fd, socket.IPPROTO_TCP, TCP_ZEROCOPY_RECEIVE, ctypes.byref(zc),
                        ctypes.byref(size)) != 0:
        return ctypes.get_errno()
    return 0


def memory_view(address: int, length: int) -> memoryview:
    """A read-only view of ``length`` bytes at ``address``, without copying them."""
    return memoryview((ctypes.c_char * length).from_address(address)).cast("B").toreadonly()


def huge_page_size(meminfo: str = "/proc/meminfo") -> int | None:
    """The default huge page size in bytes (``Hugepagesize:`` in /proc/meminfo), or None."""
    try:
        with open(meminfo) as lines:
            for line in lines:
                if line.startswith("Hugepagesize:"):
                    value, unit = line.split()[1:3]
                    return int(value) * 1024 if unit == "kB" else None
    except OSError:
        return None
    return None
