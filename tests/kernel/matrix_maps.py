"""One real map of every type this kernel creates, holding elements where user space can put
some, for the type matrix (``test_type_matrix.py``).

Each factory returns the map and the elements it holds as bpftool would list them (``None``
for the types whose elements cannot be listed), and registers what it opened on a stack the
caller closes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket

from bpfbatch import Map
from bpfbatch._sys import abi
from bpfbatch._sys.abi import BPF_F_NO_PREALLOC, MapType
from bpfbatch._sys.libbpf import check, lib
from bpfbatch.btf import BtfBuilder

BPF_F_MMAPABLE = 1 << 10
BPF_PROG_TYPE_SOCKET_FILTER = 1
ENTRIES = 4
#: A cgroup v2 directory (the root of the unified hierarchy, wherever it is mounted).
CGROUP2 = next((line.split()[1] for line in open("/proc/mounts") if line.split()[2] == "cgroup2"),
               "/sys/fs/cgroup")


def u32(i: int) -> bytes:
    return i.to_bytes(4, "little")


class Lab:
    """What the factories need: a BTF with ``u32``/``int`` and a struct, and an exit stack."""

    def __init__(self, stack: contextlib.ExitStack):
        self.stack = stack
        self.btf = stack.enter_context(BtfBuilder())
        self.u32 = self.btf.integer("unsigned int", 4)
        self.int = self.btf.integer("int", 4, signed=True)
        u64 = self.btf.integer("long long unsigned int", 8)
        self.stats = self.btf.struct("stats", [("packets", u64), ("bytes", u64)])
        self.fd = self.btf.load()

    def create(self, map_type: MapType, key_size: int, value_size: int, max_entries: int,
               typed: bool = False, **kw) -> Map:
        if typed:
            kw.update(btf_fd=self.fd, btf_key_type_id=self.u32 if key_size == 4 else 0,
                      btf_value_type_id=self.u32 if value_size == 4 else self.stats)
        m = Map.create(map_type, key_size, value_size, max_entries,
                       name=f"bbmx_{map_type.label[:10]}", **kw)
        self.stack.callback(m.close)
        return m

    def fd_of(self, closable) -> int:
        self.stack.callback(closable.close)
        return closable.fileno() if hasattr(closable, "fileno") else closable.fd

    def program(self) -> int:
        code = ctypes.create_string_buffer(abi.RETURN_ZERO, len(abi.RETURN_ZERO))
        fd = check(lib.bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, b"bbmx_prog", b"GPL", code,
                                     len(abi.RETURN_ZERO) // 8, None), "load program")
        self.stack.callback(os.close, fd)
        return fd

    def udp_socket(self, reuseport: bool = False) -> int:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if reuseport:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", 0))
        return self.fd_of(sock)


def _stats(m: Map, i: int) -> bytes:
    """A ``struct stats`` value for element ``i`` (on every CPU of a per-CPU map)."""
    one = (i * 10).to_bytes(8, "little") + (i * 1000).to_bytes(8, "little")
    return one * (m.info.value_stride // 16)


def _typed(map_type, max_entries):
    """``u32 -> struct stats`` holding keys 0..ENTRIES-1."""
    def make(lab: Lab):
        m = lab.create(map_type, 4, 16, max_entries, typed=True)
        for i in range(ENTRIES):
            m.update(u32(i), _stats(m, i))
        return m
    return make


def _fd_array(map_type, value_size, value_fd):
    """An array of fds (or ifindexes): slot 1 set, the others empty (holes)."""
    def make(lab: Lab):
        m = lab.create(map_type, 4, value_size, ENTRIES)
        if value_fd is not None:
            m.update(u32(1), value_fd(lab).to_bytes(value_size, "little"))
        return m
    return make


def _keyless(map_type):
    def make(lab: Lab):
        m = lab.create(map_type, 0, 8, 16)
        for i in range(ENTRIES if map_type != MapType.BLOOM_FILTER else 2):
            m.update(None, (100 + i).to_bytes(8, "little"))
        return m
    return make


def _lpm(lab: Lab):
    m = lab.create(MapType.LPM_TRIE, 8, 4, 64, flags=BPF_F_NO_PREALLOC)
    for i in range(ENTRIES):
        m.update(u32(32) + bytes([10, 0, 0, i]), u32(i))
    return m


def _map_in_map(map_type):
    def make(lab: Lab):
        inner = lab.create(MapType.ARRAY, 4, 4, 2)
        m = lab.create(map_type, 4, 4, ENTRIES, inner_map_fd=inner.fd)
        m.update(u32(1), u32(inner.fd))
        return m
    return make


def _cgroup_fd(lab: Lab) -> int:
    fd = os.open(CGROUP2, os.O_RDONLY)
    lab.stack.callback(os.close, fd)
    return fd


def _local_storage(map_type):
    def make(lab: Lab):
        return lab.create(map_type, 4, 16, 0, typed=True, flags=BPF_F_NO_PREALLOC)
    return make


def _sockhash(lab: Lab):
    m = lab.create(MapType.SOCKHASH, 4, 4, ENTRIES)
    m.update(u32(7), u32(lab.udp_socket()))
    return m


def _devmap_hash(lab: Lab):
    m = lab.create(MapType.DEVMAP_HASH, 4, 4, ENTRIES)
    m.update(u32(3), u32(1))  # key 3 -> ifindex 1 (lo)
    return m


#: map type -> factory. STRUCT_OPS is absent: it needs a kernel struct's BTF and programs.
FACTORIES = {
    MapType.HASH: _typed(MapType.HASH, 64),
    MapType.ARRAY: _typed(MapType.ARRAY, ENTRIES),
    MapType.PROG_ARRAY: _fd_array(MapType.PROG_ARRAY, 4, Lab.program),
    MapType.PERF_EVENT_ARRAY: _fd_array(MapType.PERF_EVENT_ARRAY, 4, None),
    MapType.PERCPU_HASH: _typed(MapType.PERCPU_HASH, 64),
    MapType.PERCPU_ARRAY: _typed(MapType.PERCPU_ARRAY, ENTRIES),
    MapType.STACK_TRACE: lambda lab: lab.create(MapType.STACK_TRACE, 4, 32, ENTRIES),
    MapType.CGROUP_ARRAY: _fd_array(MapType.CGROUP_ARRAY, 4, _cgroup_fd),
    MapType.LRU_HASH: _typed(MapType.LRU_HASH, 64),
    MapType.LRU_PERCPU_HASH: _typed(MapType.LRU_PERCPU_HASH, 64),
    MapType.LPM_TRIE: _lpm,
    MapType.ARRAY_OF_MAPS: _map_in_map(MapType.ARRAY_OF_MAPS),
    MapType.HASH_OF_MAPS: _map_in_map(MapType.HASH_OF_MAPS),
    MapType.DEVMAP: _fd_array(MapType.DEVMAP, 4, lambda lab: 1),
    MapType.SOCKMAP: _fd_array(MapType.SOCKMAP, 4, Lab.udp_socket),
    MapType.CPUMAP: _fd_array(MapType.CPUMAP, 4, lambda lab: 192),  # qsize
    MapType.XSKMAP: _fd_array(MapType.XSKMAP, 4, None),
    MapType.SOCKHASH: _sockhash,
    MapType.CGROUP_STORAGE: lambda lab: lab.create(MapType.CGROUP_STORAGE, 16, 8, 0),
    MapType.REUSEPORT_SOCKARRAY: _fd_array(MapType.REUSEPORT_SOCKARRAY, 4,
                                           lambda lab: lab.udp_socket(reuseport=True)),
    MapType.PERCPU_CGROUP_STORAGE: lambda lab: lab.create(MapType.PERCPU_CGROUP_STORAGE, 16,
                                                          8, 0),
    MapType.QUEUE: _keyless(MapType.QUEUE),
    MapType.STACK: _keyless(MapType.STACK),
    MapType.SK_STORAGE: _local_storage(MapType.SK_STORAGE),
    MapType.DEVMAP_HASH: _devmap_hash,
    MapType.RINGBUF: lambda lab: lab.create(MapType.RINGBUF, 0, 0, 4096),
    MapType.INODE_STORAGE: _local_storage(MapType.INODE_STORAGE),
    MapType.TASK_STORAGE: _local_storage(MapType.TASK_STORAGE),
    MapType.BLOOM_FILTER: _keyless(MapType.BLOOM_FILTER),
    MapType.USER_RINGBUF: lambda lab: lab.create(MapType.USER_RINGBUF, 0, 0, 4096),
    MapType.CGRP_STORAGE: _local_storage(MapType.CGRP_STORAGE),
    MapType.ARENA: lambda lab: lab.create(MapType.ARENA, 0, 0, 1, flags=BPF_F_MMAPABLE),
}
