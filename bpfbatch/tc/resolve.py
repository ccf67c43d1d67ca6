"""Names in rules → kernel handles: device names → ifindex, pinned programs and object files
→ program fds.

Each name is resolved once per run and cached (a batch's own lines cannot create or rename
devices). Resolution happens in user space before a message is built, as iproute2 does, so a
missing device is an input error on its line and nothing for it is sent. Device lookups go
through a socket created when the resolver is (``SIOCGIFINDEX``), so they answer for the
network namespace the resolver was made in, wherever the thread is later.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct

from ..errors import KernelError, NotFoundError

SIOCGIFINDEX = 0x8933
BPF_PROG_TYPE_SCHED_CLS = 3
_IFREQ = struct.Struct("16si12x")
IFNAMSIZ = 16


class Resolver:
    """Cached device and pinned-program lookups; ``close()`` releases the sockets and fds."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._ifindex: dict[str, int] = {}
        self._program_fd: dict[str, int] = {}

    def ifindex(self, dev: str | int) -> int:
        """The ifindex of ``dev`` (a name, or an ifindex passed through); NotFoundError if absent."""
        if isinstance(dev, int):
            return dev
        found = self._ifindex.get(dev)
        if found is None:
            found = self._ifindex[dev] = self._lookup(dev)
        return found

    def find_device(self, dev: str) -> int | None:
        """``dev``'s ifindex, or None where it does not exist (a lookup the ``ifindex`` cache
        then keeps)."""
        try:
            return self.ifindex(dev)
        except NotFoundError:
            return None

    def _lookup(self, dev: str) -> int:
        name = dev.encode()
        if not name or len(name) >= IFNAMSIZ or b"\0" in name:
            raise NotFoundError(f'Cannot find device "{dev}" (not a valid device name)')
        try:
            reply = fcntl.ioctl(self._sock.fileno(), SIOCGIFINDEX, _IFREQ.pack(name, 0))
        except OSError:
            raise NotFoundError(f'Cannot find device "{dev}"') from None
        return _IFREQ.unpack(reply)[1]

    def program_fd(self, path: str) -> int:
        """An fd of the BPF program pinned at ``path``, opened once and kept until close()."""
        fd = self._program_fd.get(path)
        if fd is None:
            from .._sys import libbpf  # loads libbpf: only batches with bpf filters pay for it

            try:
                fd = libbpf.obj_fd_by_path(path, read_only=False)
            except KernelError as exc:  # in tc's words (f_bpf's bpf_parse_opt)
                raise NotFoundError(f"Couldn't retrieve pinned program '{path}': "
                                    f"{os.strerror(exc.errno)}\nUnable to parse bpf command line"
                                    ) from None
            self._program_fd[path] = fd
        return fd

    def object_program_fd(self, path: str, section: str) -> int:
        """The fd of the program in ``section`` of object file ``path``, loaded once through
        the package's loader as a tc classifier and kept until close()."""
        key = f"{path}\0{section}"
        fd = self._program_fd.get(key)
        if fd is None:
            from ..loader import BpfObject  # loads libbpf: only batches that need it pay

            if not os.access(path, os.R_OK):  # tc's words when it cannot read the ELF file
                raise NotFoundError("Cannot initialize ELF context!\nUnable to load program")
            with BpfObject(path) as obj:
                program = obj.only_section(section, BPF_PROG_TYPE_SCHED_CLS)
                obj.load()
                fd = self._program_fd[key] = os.dup(obj.program_fd(program.name))
        return fd

    def close(self) -> None:
        for fd in self._program_fd.values():
            os.close(fd)
        self._program_fd.clear()
        self._sock.close()
