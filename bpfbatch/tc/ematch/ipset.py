"""ipset (``em_ipset.c``): ``ipset(SETNAME FLAGS)``, FLAGS ``src``/``dst`` joined by commas; the
set's index asked of the kernel by name (ipset's ``getsockopt`` interface, as tc does), then a
``struct xt_set_info``. tc's words, including those of a failed lookup."""

from __future__ import annotations

import ctypes
import os
import socket
import struct

from . import Arg, EmError

KIND, KIND_NUM = "ipset", 8
USAGE = """\
Usage: ipset(SETNAME FLAGS)
where: SETNAME:= string
       FLAGS  := { FLAG[,FLAGS] }
       FLAG   := { src | dst }

Example: 'ipset(bulk src,dst)'
"""
_MAXNAMELEN, _DIM_MAX, _INVALID_ID = 32, 6, 65535
_SO_IP_SET, _OP_GET_BYNAME, _OP_VERSION = 83, 0x6, 0x100
_REQ = struct.Struct("=II32s")  # struct ip_set_req_get_set: op, version, name | index
_INFO = struct.Struct("=HBB")  # struct xt_set_info: index, dim, flags


def parse(args: list[Arg]) -> bytes:
    """``ipset_parse_eopt``: set name, flags → the set's index, dimensions and directions."""
    name = args[0]
    if len(name.data) >= _MAXNAMELEN:
        raise EmError(f"ipset: set name too long (max {_MAXNAMELEN - 1})", name)
    text = name.cstr()
    printed, index = _set_index(text)
    if index is None:
        raise EmError(f"ipset: unknown set name '{text.decode('utf-8', 'surrogateescape')}'", name, before=printed)
    if len(args) == 1:
        raise EmError("ipset: missing set flags", name, before=printed)
    printed_dirs, dims = _directions(args[1].cstr().decode("latin-1"))
    if dims is None:
        raise EmError("ipset: error parsing set flags", args[1], before=printed + printed_dirs,
                      first=1)
    if len(args) > 2:
        raise EmError("ipset: unknown parameter", args[2], before=printed, first=2)
    return _INFO.pack(index, *dims)


def _directions(text: str) -> tuple[str, tuple[int, int] | None]:
    """``parse_dirs``: (what it printed, (dim, flags) or None)."""
    dim = flags = 0
    parts = text.split(",")
    while dim < _DIM_MAX and parts:
        dim += 1
        part = parts.pop(0)
        if part.startswith("src"):
            flags |= 1 << dim
        elif not part.startswith("dst"):
            return "You must specify (the comma separated list of) 'src' or 'dst'\n", None
    if parts:
        return f"Can't be more src/dst options than {_DIM_MAX}", None
    return "", (dim, flags)


def _set_index(name: bytes) -> tuple[str, int | None]:
    """``get_set_byname``: (what tc prints on the way, the set's index or None)."""
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    except OSError:
        return "Can't open socket to ipset.\n", None
    with sock:
        version = _getsockopt(sock, struct.pack("=II", _OP_VERSION, 0))
        if isinstance(version, int):
            return f"xt_set getsockopt: {os.strerror(version)}\n", None
        request = _REQ.pack(_OP_GET_BYNAME, struct.unpack_from("=I", version, 4)[0],
                            name[:_MAXNAMELEN - 1])
        reply = _getsockopt(sock, request)
    if isinstance(reply, int):
        return f"Problem when communicating with ipset: {os.strerror(reply)}\n", None
    if len(reply) != _REQ.size:
        return ("Incorrect return size from kernel during ipset lookup, "
                f"(want {_REQ.size}, got {len(reply)})\n"), None
    index = struct.unpack_from("=H", reply, 8)[0]
    return "", None if index == _INVALID_ID else index


def _getsockopt(sock: socket.socket, request: bytes) -> bytes | int:
    """``getsockopt(SOL_IP, SO_IP_SET)`` with ``request`` in the buffer (Python's own passes
    none in): the reply, or the errno."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(request, len(request))
    size = ctypes.c_uint32(len(request))
    if libc.getsockopt(sock.fileno(), socket.SOL_IP, _SO_IP_SET, buf, ctypes.byref(size)):
        return ctypes.get_errno()
    return buf.raw[:size.value]
