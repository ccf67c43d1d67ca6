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
import sys

from ..errors import BpfBatchError, KernelError, NotFoundError

SIOCGIFINDEX = 0x8933
BPF_PROG_TYPE_SCHED_CLS, BPF_PROG_TYPE_SCHED_ACT = 3, 4
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
        """An fd of the BPF program pinned at ``path``, opened once and kept until close();
        NotFoundError in the words of tc's ``bpf_obj_pinned`` (its caller adds its own line)."""
        fd = self._program_fd.get(path)
        if fd is None:
            from .._sys import libbpf  # loads libbpf: only batches with bpf programs pay for it

            try:
                fd = libbpf.obj_fd_by_path(path, read_only=False)
            except KernelError as exc:
                raise NotFoundError(f"Couldn't retrieve pinned program '{path}': "
                                    f"{os.strerror(exc.errno)}") from None
            self._program_fd[path] = fd
        return fd

    def object_program_fd(self, path: str, section: str, prog_type: int = BPF_PROG_TYPE_SCHED_CLS,
                          name: str | None = None) -> int:
        """The fd of the program in ``section`` of object file ``path`` (or, given ``name``,
        of the program of that name: tc's ``program NAME``), loaded once through the package's
        loader as ``prog_type`` and kept until close(). NotFoundError in the words of tc's
        ``iproute2_load_libbpf`` where the file is no eBPF object or lacks the program (its
        caller adds its own line); a load the kernel refuses fails as the loader says."""
        key = f"{path}\0{section}\0{prog_type}\0{name}"
        fd = self._program_fd.get(key)
        if fd is None:
            from ..loader import BpfObject  # loads libbpf: only batches that need it pay

            _check_elf(path)
            try:
                obj = BpfObject(path)
            except BpfBatchError:
                raise NotFoundError("ERROR: opening BPF object file failed") from None
            with obj:
                if not any(p.section == section if name is None else p.name == name
                           for p in obj.programs()):
                    raise NotFoundError("object file doesn't contain "
                                        + (f"sec {section}" if name is None else f"prog {name}"))
                program = obj.only_section(section, prog_type, name)
                obj.load()
                fd = self._program_fd[key] = os.dup(obj.program_fd(program.name))
        return fd

    def close(self) -> None:
        for fd in self._program_fd.values():
            os.close(fd)
        self._program_fd.clear()
        self._sock.close()


#: tc's line when ``bpf_elf_ctx_init`` fails.
_NO_ELF = "Cannot initialize ELF context!"
_ET_REL, _EM_NONE, _EM_BPF, _EV_CURRENT = 1, 0, 247, 1


def _check_elf(path: str) -> None:
    """What tc's ``bpf_elf_ctx_init`` checks (through libelf) before libbpf opens ``path``, in
    its words: a readable ELF file (libelf's magic, class, byte order and version, a whole
    header) that is a relocatable object for eBPF in this machine's byte order."""
    try:
        with open(path, "rb") as file:
            head = file.read(64)
    except OSError:
        raise NotFoundError(_NO_ELF) from None
    if head[:4] != b"\x7fELF" or len(head) < 16 or head[4] not in (1, 2) \
            or head[5] not in (1, 2) or head[6] != _EV_CURRENT \
            or len(head) < (52 if head[4] == 1 else 64):
        raise NotFoundError(_NO_ELF)
    order = "<" if head[5] == 1 else ">"
    e_type, e_machine, e_version = struct.unpack_from(f"{order}HHI", head, 16)
    if e_type != _ET_REL or e_machine not in (_EM_NONE, _EM_BPF) or e_version != _EV_CURRENT:
        raise NotFoundError(f"ELF format error, ELF file not for eBPF?\n{_NO_ELF}")
    if (order == "<") != (sys.byteorder == "little"):
        ours, theirs = ("little", "big") if sys.byteorder == "little" else ("big", "little")
        raise NotFoundError(f"We are {ours} endian, eBPF object is {theirs} endian!\n{_NO_ELF}")
