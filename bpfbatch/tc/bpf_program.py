"""The program of a bpf classifier or action, as tc names and sends it: one model for the
batch parser (``kinds/bpf.py``: ``f_bpf.c``, ``m_bpf.c``) and the rule objects of the Python
API (:class:`~.rules.BpfProg`), so both send the same attributes for the same program."""

from __future__ import annotations

import dataclasses
import os
import struct

from .resolve import BPF_PROG_TYPE_SCHED_ACT, Resolver

#: struct sock_filter: code, jt, jf, k.
_SOCK_FILTER = struct.Struct("=HBBI")


@dataclasses.dataclass(slots=True)
class EbpfProgram:
    """An eBPF program as tc's ``bpf_do_parse`` names it: the ``section`` (or the program
    called ``name``) of object file ``path``, loaded as ``prog_type``, or (``section`` None)
    the program pinned at ``path``; ``uds``: the socket tc's ``export`` hands the object's
    maps to."""

    path: str
    section: str | None = None
    name: str | None = None
    uds: str | None = None
    prog_type: int = BPF_PROG_TYPE_SCHED_ACT

    def fd(self, resolve: Resolver) -> int:
        """Its fd, loaded (or opened) once per batch; NotFoundError in tc's words."""
        if self.section is None:
            return resolve.program_fd(self.path)
        return resolve.object_program_fd(self.path, self.section, self.prog_type,
                                         self.name)

    def annotation(self) -> bytes:
        """tc's ``TCA_ACT_BPF_NAME``/``TCA_BPF_NAME``: ``snprintf("%s:[%s]", basename(FILE),
        SECTION)`` into 256 bytes (``*fsobj`` for a pinned program)."""
        text = f"{os.path.basename(self.path)}:[{self.section or '*fsobj'}]"
        return text.encode(errors="surrogateescape")[:255]


def ops_attrs(len_type: int, ops_type: int, ops: tuple) -> list:
    """A classic program as tc's ``cbpf_cb`` adds it: its length, then its instructions
    ((code, jt, jf, k) each)."""
    return [(len_type, struct.pack("=H", len(ops))),
            (ops_type, b"".join(_SOCK_FILTER.pack(*op) for op in ops))]


def fd_attrs(fd_type: int, name_type: int, fd: int, name: bytes) -> list:
    """An eBPF program as tc's ``ebpf_cb`` adds it: its fd, then its name (``name``: without
    the NUL)."""
    return [(fd_type, struct.pack("=I", fd)), (name_type, name + b"\0")]
