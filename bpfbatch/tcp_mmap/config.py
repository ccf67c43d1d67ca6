"""What one tcp_mmap run is asked to do, checked before any socket is opened.

:class:`Config` holds the options of the kernel selftest ``tcp_mmap`` (same letters, same
defaults: IPv6, port 8787, 512 KiB chunks, mappings aligned to the huge page size) plus the
amount a client sends. :meth:`Config.validate` rejects what the kernel would refuse later or
what makes no sense, with an :class:`~bpfbatch.errors.InputError` naming the option.
"""

from __future__ import annotations

import dataclasses
import re
import socket

from ..errors import InputError
from ._linux import PAGE_SIZE, huge_page_size

DEFAULT_PORT = 8787
DEFAULT_CHUNK = 512 * 1024
DEFAULT_SIZE = 1 << 30
#: x86-64's PMD size, used when /proc/meminfo names no huge page size (as the selftest does).
FALLBACK_ALIGN = 2 * 1024 * 1024
#: TCP_MAXSEG bounds the kernel accepts (TCP_MIN_MSS, MAX_TCP_WINDOW).
MSS_RANGE = (88, 32767)

_SIZE = re.compile(r"(\d+)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)
_UNITS = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}


def parse_size(text: str, option: str) -> int:
    """``"512K"`` → 524288. Suffixes K, M, G, T are powers of 1024; a bare number is bytes."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise InputError(f"not a size: {text!r} (a number with an optional K, M, G or T suffix)",
                         obj=option)
    return int(match.group(1)) << _UNITS[match.group(2).lower()]


def default_alignment() -> int:
    """The selftest's default for ``-a``: the huge page size, else 2 MiB."""
    return huge_page_size() or FALLBACK_ALIGN


@dataclasses.dataclass
class Config:
    """One run: a server (``server=True``) or a client sending ``size`` bytes to ``host``.

    ``align`` 0 means :func:`default_alignment`; ``mss`` and ``pacing_rate`` 0 mean "leave the
    kernel's default". ``connections`` (server only) stops after that many connections; None
    serves until interrupted.
    """

    server: bool = False
    host: str | None = None
    port: int = DEFAULT_PORT
    family: int = socket.AF_INET6
    zerocopy: bool = False
    chunk_size: int = DEFAULT_CHUNK
    align: int = 0
    mss: int = 0
    hash: bool = False
    pacing_rate: int = 0
    size: int = DEFAULT_SIZE
    connections: int | None = None

    @property
    def mapping_align(self) -> int:
        return self.align or default_alignment()

    def validate(self) -> Config:
        """Raise :class:`InputError` for the first option that cannot work; return self."""
        if not self.server and self.host is None:
            raise InputError("say -s to receive or -H HOST to send", obj="-s/-H")
        if not 0 <= self.port <= 65535 or (self.port == 0 and not self.server):
            raise InputError(f"port {self.port} out of range (1-65535; 0 lets a server pick)",
                             obj="-p")
        if self.chunk_size <= 0 or self.chunk_size > 1 << 30:
            raise InputError(f"chunk size {self.chunk_size} out of range (1 byte to 1 GiB)",
                             obj="-C")
        if self.zerocopy and self.server and self.chunk_size % PAGE_SIZE:
            raise InputError(f"chunk size {self.chunk_size} is not a multiple of the page size "
                             f"({PAGE_SIZE}): TCP_ZEROCOPY_RECEIVE maps whole pages", obj="-C")
        if self.align and (self.align % PAGE_SIZE or self.align & (self.align - 1)):
            raise InputError(f"alignment {self.align} is not a power of two multiple of the "
                             f"page size ({PAGE_SIZE})", obj="-a")
        if self.mss and not MSS_RANGE[0] <= self.mss <= MSS_RANGE[1]:
            raise InputError(f"MSS {self.mss} out of range ({MSS_RANGE[0]}-{MSS_RANGE[1]})",
                             obj="-M")
        if self.pacing_rate < 0:
            raise InputError(f"pacing rate {self.pacing_rate} is negative", obj="-P")
        if self.size <= 0 and not self.server:
            raise InputError(f"size {self.size} must be positive", obj="-n")
        if self.connections is not None and self.connections <= 0:
            raise InputError(f"{self.connections} connections: must be positive",
                             obj="--connections")
        return self
