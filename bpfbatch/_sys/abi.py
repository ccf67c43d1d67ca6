"""Kernel and libbpf ABI: ctypes structures and constants, nothing else.

Layouts follow ``include/uapi/linux/bpf.h`` and libbpf 1.1's ``bpf.h``; every ``*_opts``
structure starts with ``size_t sz`` so libbpf can tell which fields the caller knows.
"""

from __future__ import annotations

import ctypes
import enum

BPF_OBJ_NAME_LEN = 16

# Element flags.
BPF_ANY = 0
BPF_NOEXIST = 1
BPF_EXIST = 2
BPF_F_LOCK = 4

# Map creation / open flags.
BPF_F_NO_PREALLOC = 1 << 0
BPF_F_NO_COMMON_LRU = 1 << 1
BPF_F_RDONLY = 1 << 3


class MapType(enum.IntEnum):
    """``enum bpf_map_type``; names are what bpftool prints (lower case)."""

    UNSPEC = 0
    HASH = 1
    ARRAY = 2
    PROG_ARRAY = 3
    PERF_EVENT_ARRAY = 4
    PERCPU_HASH = 5
    PERCPU_ARRAY = 6
    STACK_TRACE = 7
    CGROUP_ARRAY = 8
    LRU_HASH = 9
    LRU_PERCPU_HASH = 10
    LPM_TRIE = 11
    ARRAY_OF_MAPS = 12
    HASH_OF_MAPS = 13
    DEVMAP = 14
    SOCKMAP = 15
    CPUMAP = 16
    XSKMAP = 17
    SOCKHASH = 18
    CGROUP_STORAGE = 19
    REUSEPORT_SOCKARRAY = 20
    PERCPU_CGROUP_STORAGE = 21
    QUEUE = 22
    STACK = 23
    SK_STORAGE = 24
    DEVMAP_HASH = 25
    STRUCT_OPS = 26
    RINGBUF = 27
    INODE_STORAGE = 28
    TASK_STORAGE = 29
    BLOOM_FILTER = 30
    USER_RINGBUF = 31
    CGRP_STORAGE = 32
    ARENA = 33

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, value: int) -> "MapType | int":
        try:
            return cls(value)
        except ValueError:
            return value


PERCPU_TYPES = frozenset({
    MapType.PERCPU_HASH, MapType.PERCPU_ARRAY, MapType.LRU_PERCPU_HASH,
    MapType.PERCPU_CGROUP_STORAGE,
})
HASH_TYPES = frozenset({
    MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH, MapType.LRU_PERCPU_HASH,
    MapType.HASH_OF_MAPS,
})
#: Maps whose every index always holds a value: nothing can be deleted, "clear" means zeroing.
#: (An array-of-maps slot can be empty, so it is not one of them.)
ELEMENTS_ALWAYS_EXIST = frozenset({MapType.ARRAY, MapType.PERCPU_ARRAY})
MAP_IN_MAP_TYPES = frozenset({MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS})
#: Maps without keys whose elements are taken with BPF_MAP_LOOKUP_AND_DELETE_ELEM (pop).
POP_TYPES = frozenset({MapType.QUEUE, MapType.STACK})


class BpfMapInfo(ctypes.Structure):
    """``struct bpf_map_info`` up to ``map_extra`` (the kernel zero-fills what we do not ask for)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("name", ctypes.c_char * BPF_OBJ_NAME_LEN),
        ("ifindex", ctypes.c_uint32),
        ("btf_vmlinux_value_type_id", ctypes.c_uint32),
        ("netns_dev", ctypes.c_uint64),
        ("netns_ino", ctypes.c_uint64),
        ("btf_id", ctypes.c_uint32),
        ("btf_key_type_id", ctypes.c_uint32),
        ("btf_value_type_id", ctypes.c_uint32),
        ("btf_vmlinux_id", ctypes.c_uint32),
        ("map_extra", ctypes.c_uint64),
    ]


class BpfMapBatchOpts(ctypes.Structure):
    """``struct bpf_map_batch_opts`` (24 bytes on LP64)."""

    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("elem_flags", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
    ]


class BpfMapCreateOpts(ctypes.Structure):
    """``struct bpf_map_create_opts`` as of libbpf 1.1."""

    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("btf_fd", ctypes.c_uint32),
        ("btf_key_type_id", ctypes.c_uint32),
        ("btf_value_type_id", ctypes.c_uint32),
        ("btf_vmlinux_value_type_id", ctypes.c_uint32),
        ("inner_map_fd", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("map_extra", ctypes.c_uint64),
        ("numa_node", ctypes.c_uint32),
        ("map_ifindex", ctypes.c_uint32),
    ]


class BpfGetFdByIdOpts(ctypes.Structure):
    """``struct bpf_get_fd_by_id_opts`` (libbpf 1.1)."""

    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("open_flags", ctypes.c_uint32),
    ]


class BpfObjGetOpts(ctypes.Structure):
    """``struct bpf_obj_get_opts`` (libbpf 1.0)."""

    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("file_flags", ctypes.c_uint32),
    ]


# --- Program loading, for feature probes (libbpf 1.1's bpf.h) ---

BPF_PROG_TYPE_RAW_TRACEPOINT = 17
BPF_PROG_TYPE_TRACING = 26
BPF_PROG_TYPE_SYSCALL = 31
BPF_TRACE_RAW_TP = 23
BPF_F_SLEEPABLE = 1 << 4


class BpfProgLoadOpts(ctypes.Structure):
    """``struct bpf_prog_load_opts`` up to ``attach_btf_obj_fd`` (libbpf accepts a shorter
    ``sz``: fields past it read as zero)."""

    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("attempts", ctypes.c_int),
        ("expected_attach_type", ctypes.c_uint32),
        ("prog_btf_fd", ctypes.c_uint32),
        ("prog_flags", ctypes.c_uint32),
        ("prog_ifindex", ctypes.c_uint32),
        ("kern_version", ctypes.c_uint32),
        ("attach_btf_id", ctypes.c_uint32),
        ("attach_prog_fd", ctypes.c_uint32),
        ("attach_btf_obj_fd", ctypes.c_uint32),
    ]


class BpfProgInfo(ctypes.Structure):
    """``struct bpf_prog_info`` (linux/bpf.h) up to ``recursion_misses`` (5.12+): the kernel
    fills what it knows of the ``info_len`` it is given. Pointer members stay zero (no arrays
    asked for)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("tag", ctypes.c_uint8 * 8),
        ("jited_prog_len", ctypes.c_uint32),
        ("xlated_prog_len", ctypes.c_uint32),
        ("jited_prog_insns", ctypes.c_uint64),
        ("xlated_prog_insns", ctypes.c_uint64),
        ("load_time", ctypes.c_uint64),
        ("created_by_uid", ctypes.c_uint32),
        ("nr_map_ids", ctypes.c_uint32),
        ("map_ids", ctypes.c_uint64),
        ("name", ctypes.c_char * BPF_OBJ_NAME_LEN),
        ("ifindex", ctypes.c_uint32),
        ("gpl_compatible", ctypes.c_uint32),
        ("netns_dev", ctypes.c_uint64),
        ("netns_ino", ctypes.c_uint64),
        ("nr_jited_ksyms", ctypes.c_uint32),
        ("nr_jited_func_lens", ctypes.c_uint32),
        ("jited_ksyms", ctypes.c_uint64),
        ("jited_func_lens", ctypes.c_uint64),
        ("btf_id", ctypes.c_uint32),
        ("func_info_rec_size", ctypes.c_uint32),
        ("func_info", ctypes.c_uint64),
        ("nr_func_info", ctypes.c_uint32),
        ("nr_line_info", ctypes.c_uint32),
        ("line_info", ctypes.c_uint64),
        ("jited_line_info", ctypes.c_uint64),
        ("nr_jited_line_info", ctypes.c_uint32),
        ("line_info_rec_size", ctypes.c_uint32),
        ("jited_line_info_rec_size", ctypes.c_uint32),
        ("nr_prog_tags", ctypes.c_uint32),
        ("prog_tags", ctypes.c_uint64),
        ("run_time_ns", ctypes.c_uint64),
        ("run_cnt", ctypes.c_uint64),
        ("recursion_misses", ctypes.c_uint64),
    ]


class BpfTestRunOpts(ctypes.Structure):
    """``struct bpf_test_run_opts`` (libbpf 1.1)."""

    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("data_in", ctypes.c_void_p),
        ("data_out", ctypes.c_void_p),
        ("data_size_in", ctypes.c_uint32),
        ("data_size_out", ctypes.c_uint32),
        ("ctx_in", ctypes.c_void_p),
        ("ctx_out", ctypes.c_void_p),
        ("ctx_size_in", ctypes.c_uint32),
        ("ctx_size_out", ctypes.c_uint32),
        ("retval", ctypes.c_uint32),
        ("repeat", ctypes.c_int),
        ("duration", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32),
        ("batch_size", ctypes.c_uint32),
    ]


#: ``r0 = 0; exit``: the smallest program every type accepts.
RETURN_ZERO = bytes.fromhex("b700000000000000" "9500000000000000")


def opts(struct_type: type[ctypes.Structure], **fields) -> ctypes.Structure:
    """An ``*_opts`` structure with ``sz`` filled in, as libbpf's ``LIBBPF_OPTS`` does."""
    value = struct_type(**fields)
    value.sz = ctypes.sizeof(struct_type)
    return value


# --- perf events (include/uapi/linux/perf_event.h): the BPF output event of a perf event array

PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_BPF_OUTPUT = 10
PERF_SAMPLE_RAW = 1 << 10
PERF_FLAG_FD_CLOEXEC = 1 << 3
#: ``attr.flags`` bit: wake the reader every ``wakeup_watermark`` bytes, not events.
PERF_ATTR_FLAG_WATERMARK = 1 << 14
#: ``_IO('$', 0)``
PERF_EVENT_IOC_ENABLE = 0x2400
#: ``struct perf_event_header.type`` of the records a BPF output event writes.
PERF_RECORD_LOST = 2
PERF_RECORD_SAMPLE = 9
#: ``struct perf_event_mmap_page``: where ``data_head``, ``data_tail``, ``data_offset`` and
#: ``data_size`` sit in the first page of the mapping (the ABI fixes them at byte 1024).
PERF_MMAP_DATA_HEAD = 1024
PERF_MMAP_DATA_TAIL = 1032
PERF_MMAP_DATA_OFFSET = 1040
PERF_MMAP_DATA_SIZE = 1048


class PerfEventAttr(ctypes.Structure):
    """``struct perf_event_attr`` as of ``PERF_ATTR_SIZE_VER0`` (64 bytes): the kernel reads
    the fields past ``size`` as zero. The bit fields (``disabled``, ``watermark``, ...) are
    one ``flags`` word here."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("wakeup", ctypes.c_uint32),  # wakeup_events, or wakeup_watermark with the flag
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
    ]
