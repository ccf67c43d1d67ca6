"""``MapHandle``: one BPF map opened by id, pinned path, exact name or fd — its fd, its
info, and the per-element calls on bytes. The cursor (:mod:`.cursor`), the writes
(:mod:`.writes`), the whole-map policies (:mod:`.whole`), the drain (:mod:`.draining`), the
inventory and the probes build on it; the public :class:`bpfbatch.Map` (:mod:`bpfbatch.api`)
is this handle with the batch surface and the codecs on top. This module imports none of
them: imports in map/ point one way, down to here.

Addressing follows bpftool (``id N | pinned FILE | name NAME``): a name is an *exact* match of
the kernel's (at most 15-character) map name; operations on one map refuse a name several maps
share and list their ids.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import os
from collections.abc import Iterator

from .._sys import abi, libbpf
from .._sys.abi import MapType
from .._sys.libbpf import check, lib
from ..errors import (FILE_MODE, FROZEN, BpfBatchError, InputError, KernelError, NotFoundError,
                      NotSupportedError, from_errno)

#: Elements per batch syscall unless told otherwise (the cursor's default).
DEFAULT_BATCH = 8192


@dataclasses.dataclass(frozen=True)
class MapInfo:
    """What the kernel reports about a map (``bpf_obj_get_info_by_fd``), in Python terms."""

    id: int
    type: MapType | int
    name: str
    key_size: int
    value_size: int
    max_entries: int
    flags: int
    btf_id: int
    btf_key_type_id: int
    btf_value_type_id: int
    memlock: int = 0
    frozen: bool = False
    #: Key/value types the caller gave for a map without BTF
    #: (:class:`~bpfbatch.records.typespec.GivenTypes`); the codecs prefer them.
    types: object = None

    @property
    def type_name(self) -> str:
        return self.type.label if isinstance(self.type, MapType) else f"type_{self.type}"

    @property
    def percpu(self) -> bool:
        return self.type in abi.PERCPU_TYPES

    @property
    def cpu_stride(self) -> int:
        """Bytes per CPU inside a per-CPU value: ``round_up(value_size, 8)``."""
        return (self.value_size + 7) & ~7

    @property
    def value_stride(self) -> int:
        """Bytes one element's value occupies in syscall buffers (``bpf_map_value_size``).

        Per-CPU maps carry ``round_up(value_size, 8)`` for every *possible* CPU; map-in-map
        values are 4-byte ids (out) or fds (in).
        """
        if self.percpu:
            return self.cpu_stride * libbpf.num_possible_cpus()
        if self.type in abi.MAP_IN_MAP_TYPES:
            return 4
        return self.value_size

    @property
    def label(self) -> str:
        """How errors name this map: ``map 42 'flows'``."""
        return f"map {self.id} '{self.name}'" if self.name else f"map {self.id}"

    @classmethod
    def from_fd(cls, fd: int) -> "MapInfo":
        extra = _fdinfo(fd)
        if "map_type" not in extra:  # info-by-fd would read a program's info as a map's
            raise NotFoundError("not a BPF map", obj=f"fd {fd}")
        raw = abi.BpfMapInfo()
        libbpf.obj_info(fd, raw, f"fd {fd}")
        return cls(
            id=raw.id, type=MapType.parse(raw.type), name=raw.name.decode(errors="replace"),
            key_size=raw.key_size, value_size=raw.value_size, max_entries=raw.max_entries,
            flags=raw.map_flags, btf_id=raw.btf_id, btf_key_type_id=raw.btf_key_type_id,
            btf_value_type_id=raw.btf_value_type_id,
            memlock=int(extra.get("memlock", 0)), frozen=extra.get("frozen", "0") != "0",
        )


def _fdinfo(fd: int) -> dict[str, str]:
    """``/proc/self/fdinfo/<fd>`` as a dict: the only source of ``memlock`` and ``frozen``
    (bpftool reads them the same way)."""
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except OSError:
        return {}


#: Map types whose delete succeeds on an empty slot (``dev_map_delete_elem``,
#: ``cpu_map_delete_elem``).
_DELETE_SUCCEEDS_WHEN_EMPTY = frozenset({MapType.DEVMAP, MapType.CPUMAP})


class MapHandle:
    """An open BPF map, raw: its fd and info and the per-element calls on bytes. Owns its fd
    (closed by :meth:`close` or the ``with`` block) unless created with ``owned=False``.
    ``read_only`` maps refuse writes in the kernel (EPERM). Every constructor returns the
    class it is called on, so :class:`bpfbatch.Map` opens as itself."""

    def __init__(self, fd: int, *, owned: bool = True, read_only: bool = False):
        self.fd = fd
        self.owned = owned
        self.read_only = read_only
        self.info = MapInfo.from_fd(fd)

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def open(cls, *, id: int | None = None, pinned: str | None = None, name: str | None = None,
             read_only: bool = False) -> "MapHandle":
        """The map named by exactly one of ``id``, ``pinned`` (a bpffs path) or ``name`` (the
        kernel's exact map name, which must be unambiguous) — bpftool's ``id | pinned |
        name``. ``read_only`` opens it so that the kernel refuses writes (EPERM)."""
        given = [param for param, value in (("id", id), ("pinned", pinned), ("name", name))
                 if value is not None]
        if len(given) != 1:
            raise InputError("name the map with exactly one of id, pinned, name"
                             + (f" (got {' and '.join(given)})" if given else ""), obj="Map.open")
        if id is not None:
            return cls.open_id(id, read_only=read_only)
        if pinned is not None:
            return cls.open_pinned(pinned, read_only=read_only)
        return cls.open_name(name, read_only=read_only)

    @classmethod
    def open_id(cls, map_id: int, *, read_only: bool = False) -> "MapHandle":
        try:
            fd = libbpf.map_fd_by_id(map_id, read_only=read_only)
        except KernelError as exc:
            if exc.errno != errno.ENOENT:
                raise
            raise NotFoundError("no such map", obj=f"map id {map_id}", errno=exc.errno) from None
        return cls._adopt(fd, read_only, f"map id {map_id}")

    @classmethod
    def open_pinned(cls, path: str, *, read_only: bool = False) -> "MapHandle":
        try:
            mode = os.stat(path)
        except FileNotFoundError:
            raise NotFoundError("no such pinned object", obj=path, errno=errno.ENOENT) from None
        except PermissionError:  # bpffs is often mounted 0700: the path itself is hidden
            raise KernelError("open pinned object", errno.EACCES, obj=path,
                              cause="permission denied: a directory on the way is not "
                                    "searchable by this user") from None
        try:
            fd = libbpf.obj_fd_by_path(path, read_only=read_only)
        except KernelError as exc:
            if exc.errno not in (errno.EACCES, errno.EINVAL):
                raise
            # The kernel answers EACCES both for a file this user may not open and for a
            # file that is not on bpffs: tell the two apart by the file's own permissions.
            wanted = os.R_OK if read_only else os.R_OK | os.W_OK
            if exc.errno == errno.EACCES and not os.access(path, wanted):
                raise KernelError("open pinned object", errno.EACCES, obj=path, cause=(
                    f"{FILE_MODE} ({mode.st_mode & 0o777:04o}, owner uid {mode.st_uid}): uid "
                    f"{os.geteuid()} may not {'read' if read_only else 'write'} it")) from None
            raise NotFoundError("not a pinned BPF object (is it on bpffs?)", obj=path,
                                errno=exc.errno) from None
        return cls._adopt(fd, read_only, path)

    @classmethod
    def _adopt(cls, fd: int, read_only: bool, obj: str) -> "MapHandle":
        """Wrap a freshly opened fd, closing it if it is not a usable map."""
        try:
            return cls(fd, read_only=read_only)
        except NotFoundError:
            os.close(fd)
            raise NotFoundError("not a BPF map (a pinned program or link?)", obj=obj) from None
        except BpfBatchError:
            os.close(fd)
            raise

    @classmethod
    def open_name(cls, name: str, *, read_only: bool = False) -> "MapHandle":
        """The one map whose kernel name is exactly ``name``."""
        infos = list(iter_infos())
        ids = [info.id for info in infos if info.name == name]
        if not ids:
            raise NotFoundError("no map with this exact name" + _name_hint(name, infos),
                                obj=f"map name '{name}'")
        if len(ids) > 1:
            raise NotFoundError("several maps match this name: ids " + ", ".join(map(str, ids)),
                                obj=f"map name '{name}'")
        return cls.open_id(ids[0], read_only=read_only)

    @classmethod
    def create(cls, map_type: MapType, key_size: int, value_size: int, max_entries: int, *,
               name: str = "", flags: int = 0, btf_fd: int = 0, btf_key_type_id: int = 0,
               btf_value_type_id: int = 0, inner_map_fd: int = 0) -> "MapHandle":
        """Create a new map (not pinned: it lives while the fd is open)."""
        opts = abi.opts(abi.BpfMapCreateOpts, map_flags=flags, btf_fd=btf_fd,
                         btf_key_type_id=btf_key_type_id, btf_value_type_id=btf_value_type_id,
                         inner_map_fd=inner_map_fd)
        fd = check(lib.bpf_map_create(int(map_type), name.encode()[:15], key_size, value_size,
                                      max_entries, ctypes.byref(opts)),
                   f"create {MapType.parse(map_type)!s} map", name or None)
        return cls(fd)

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        if self.fd >= 0 and self.owned:
            os.close(self.fd)
        self.fd = -1

    def dup(self) -> "MapHandle":
        """The same map on a new fd of its own (close-on-exec), which stays usable when this
        one is closed: what outlives the caller's ``with`` block holds one
        (:meth:`drain`'s iterator)."""
        if self.fd < 0:
            raise InputError("the map is closed", obj=self.info.label)
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__, fd=os.dup(self.fd), owned=True)
        return twin

    def __enter__(self) -> "MapHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def pin(self, path: str) -> None:
        check(lib.bpf_obj_pin(self.fd, path.encode()), "pin map", path)

    def __repr__(self) -> str:
        i = self.info
        return (f"<Map {i.id} {i.type_name} '{i.name}' key {i.key_size} value {i.value_size} "
                f"max_entries {i.max_entries}>")

    # -- per-element operations ----------------------------------------------------------
    # Every argument is checked against the map's sizes before the syscall: the kernel copies
    # key_size / value_stride bytes from whatever pointer it is given, so a short buffer
    # would hand it the caller's heap (a root tool must never do that).

    def lookup(self, key, *, flags: int = 0) -> bytes | None:
        """The value of ``key`` (``value_stride`` bytes), or ``None`` when absent. Maps
        without keys (queue, stack) take ``None`` and peek at the next element."""
        key = self._key(key, "lookup element")
        value = ctypes.create_string_buffer(self.info.value_stride)
        ret = lib.bpf_map_lookup_elem_flags(self.fd, key, value, flags)  # no key: peek
        if ret == -errno.ENOENT:
            return None
        check(ret, "lookup element", self.info.label)
        return value.raw

    def update(self, key, value, flags: int = abi.BPF_ANY) -> None:
        """Write one element (``value`` is ``value_stride`` bytes: every possible CPU's slot
        for a per-CPU map); for a queue, stack or bloom filter ``key`` is ``None`` and the
        value is pushed."""
        key = self._key(key, "update element")
        value = self._sized(value, self.info.value_stride, "value", "update element")
        ret = lib.bpf_map_update_elem(self.fd, key, value, flags)
        if ret < 0:
            raise self.write_error("update element", -ret)

    def delete(self, key: bytes) -> bool:
        """Delete ``key``; ``False`` when it was not there.

        Not every type says so with ENOENT: a devmap or cpumap delete succeeds on an empty
        slot (so the slot is looked up first), a sockmap's answers EINVAL for one. An
        xskmap's slots cannot be looked up at all: its delete reports every slot emptied."""
        key = self._key(key, "delete element")
        if self.info.type in _DELETE_SUCCEEDS_WHEN_EMPTY and self.lookup(key) is None:
            return False
        ret = lib.bpf_map_delete_elem(self.fd, key)
        if ret == -errno.ENOENT or (ret == -errno.EINVAL and self.info.type == MapType.SOCKMAP):
            return False
        if ret < 0:
            raise self.write_error("delete element", -ret)
        return True

    def lookup_and_delete(self, key: bytes | None) -> bytes | None:
        """Take ``key``'s value out of the map (``BPF_MAP_LOOKUP_AND_DELETE_ELEM``), or
        ``None`` when absent; a queue or stack takes ``None`` and pops its next element."""
        key = self._key(key, "lookup and delete element")
        value = ctypes.create_string_buffer(self.info.value_stride)
        ret = lib.bpf_map_lookup_and_delete_elem(self.fd, key, value)
        if ret == -errno.ENOENT:
            return None
        if ret < 0:
            raise self.write_error("lookup and delete element", -ret)
        return value.raw

    def pop(self) -> bytes | None:
        """Take the next element of a queue or stack, or ``None`` when it is empty."""
        return self.lookup_and_delete(None)

    def freeze(self) -> None:
        """Make the map read-only for user space from now on (``BPF_MAP_FREEZE``)."""
        check(lib.bpf_map_freeze(self.fd), "freeze", self.info.label)

    def next_key(self, key: bytes | None) -> bytes | None:
        """The key after ``key`` (the first with ``None``), or ``None`` at the end."""
        if key is not None:
            key = self._key(key, "get next key")
        out = ctypes.create_string_buffer(self.info.key_size)
        ret = lib.bpf_map_get_next_key(self.fd, key, out)
        if ret == -errno.ENOENT:
            return None
        check(ret, "get next key", self.info.label)
        return out.raw

    def write_error(self, op: str, code: int) -> KernelError:
        """The error of a refused write. A frozen map answers EPERM like a missing
        capability; say which it is (the flag is read now: a map can be frozen after open)."""
        if code == errno.EPERM and _fdinfo(self.fd).get("frozen", "0") != "0":
            return from_errno(op, code, obj=self.info.label, cause=FROZEN)
        return from_errno(op, code, obj=self.info.label)

    def _key(self, key, op: str) -> bytes | None:
        if self.info.key_size == 0:
            if key not in (None, b""):
                raise InputError(f"{op}: {self.info.type_name} maps have no keys, got "
                                 f"{_size_of(key)} bytes", obj=self.info.label)
            return None
        if key is None:
            raise InputError(f"{op}: a {self.info.key_size}-byte key is needed",
                             obj=self.info.label)
        return self._sized(key, self.info.key_size, "key", op)

    def _sized(self, data, size: int, what: str, op: str) -> bytes:
        """``data`` as bytes when it holds exactly ``size`` bytes, else an InputError."""
        if _size_of(data) != size:
            raise InputError(f"{op}: {what} has {_size_of(data)} bytes, the map's {what}s have "
                             f"{size}", obj=self.info.label)
        return bytes(data)


# -- what each map type allows -----------------------------------------------------------
# The commands a map type cannot do, and why, in the user's terms: one table, asked by every
# command before it touches the map (the type matrix in the README is this table).

_RING = "a ring buffer is consumed through mmap and epoll, not element by element"
_STORAGE = ("elements are keyed by the {} they belong to (an fd on update): the kernel has "
            "no way to walk them")
_CGROUP_STORAGE = ("elements live as long as their program's cgroup attachment: the kernel "
                   "refuses to delete them")
_SOCKETS = "values are sockets a process holds: a file cannot hold them"
_READ_ONLY_SOCKETS = ("the kernel returns socket cookies only for 8-byte values: with "
                      "{}-byte values no element can be read (-o bpftool-json lists the "
                      "slots with that error, as bpftool -j does)")
_KERNEL_FILLED = "elements are written by the kernel only (stack ids from bpf_get_stackid)"
_POP_ONLY = "elements can only be popped: drain takes them in pop order"
_BLOOM = "a bloom filter answers membership only: elements can be neither listed nor removed"
_UNREADABLE_SLOTS = ("the kernel answers {} to a lookup of any slot from user space, so "
                     "elements cannot be read (-o bpftool-json lists the slots with that "
                     "error, as bpftool -j does)")
_NOT_EXEC = "exec walks hash, LRU hash and array maps and their per-CPU variants"

_REFUSED: dict[MapType, dict[str, str]] = {
    MapType.ARRAY: {"delete": "elements always exist: clear zeroes them",
                    "drain": "elements always exist: dump, then clear zeroes them"},
    MapType.PERCPU_ARRAY: {"delete": "elements always exist: clear zeroes them",
                           "drain": "elements always exist: dump, then clear zeroes them"},
    MapType.PROG_ARRAY: {"drain": "a drained program may be freed before it could be put "
                                  "back on failure: dump, then clear"},
    MapType.ARRAY_OF_MAPS: {"drain": "a drained inner map may be freed before it could be put "
                                     "back on failure: dump, then clear"},
    MapType.HASH_OF_MAPS: {"drain": "a drained inner map may be freed before it could be put "
                                    "back on failure: dump, then clear"},
    MapType.PERF_EVENT_ARRAY: dict.fromkeys(("dump", "count", "drain"),
                                            _UNREADABLE_SLOTS.format("ENOTSUPP")) | {
        "load": "values are perf event fds a process holds: a file cannot hold them"},
    MapType.XSKMAP: dict.fromkeys(("dump", "count", "drain"),
                                  _UNREADABLE_SLOTS.format("EOPNOTSUPP")) | {
        "load": "values are AF_XDP sockets a process holds: a file cannot hold them"},
    MapType.CGROUP_ARRAY: dict.fromkeys(("dump", "count", "drain"),
                                        _UNREADABLE_SLOTS.format("ENOTSUPP")) | {
        "load": "values are cgroup fds a process holds: a file cannot hold them"},
    MapType.STACK_TRACE: {"load": _KERNEL_FILLED},
    MapType.CGROUP_STORAGE: dict.fromkeys(("delete", "clear", "drain"), _CGROUP_STORAGE),
    MapType.PERCPU_CGROUP_STORAGE: dict.fromkeys(("delete", "clear", "drain"), _CGROUP_STORAGE),
    MapType.QUEUE: dict.fromkeys(("dump", "count", "delete"), _POP_ONLY),
    MapType.STACK: dict.fromkeys(("dump", "count", "delete"), _POP_ONLY),
    MapType.BLOOM_FILTER: dict.fromkeys(("dump", "count", "delete", "clear", "drain"), _BLOOM),
    MapType.RINGBUF: dict.fromkeys(("dump", "count", "load", "delete", "clear", "drain"),
                                   _RING),
    MapType.USER_RINGBUF: dict.fromkeys(("dump", "count", "load", "delete", "clear", "drain"),
                                        _RING),
    MapType.ARENA: dict.fromkeys(("dump", "count", "load", "delete", "clear", "drain"),
                                 "an arena is memory pages mapped into programs and processes, "
                                 "not elements"),
}
for _kind, _owner in ((MapType.SK_STORAGE, "socket"), (MapType.INODE_STORAGE, "inode"),
                      (MapType.TASK_STORAGE, "task"), (MapType.CGRP_STORAGE, "cgroup")):
    _REFUSED[_kind] = dict.fromkeys(("dump", "count", "load", "delete", "clear", "drain"),
                                    _STORAGE.format(_owner))
#: Types whose values cannot be read but whose keys can be walked (bpftool lists each with
#: its lookup's error).
_SLOTS_LISTABLE = frozenset({MapType.PERF_EVENT_ARRAY, MapType.XSKMAP, MapType.CGROUP_ARRAY,
                             MapType.SOCKMAP, MapType.SOCKHASH, MapType.REUSEPORT_SOCKARRAY})
_EXEC_TYPES = frozenset({MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH,
                         MapType.LRU_PERCPU_HASH, MapType.ARRAY, MapType.PERCPU_ARRAY})
#: The commands of the type matrix, in its order.
COMMANDS = ("list", "dump", "count", "load", "delete", "clear", "drain", "exec")


def refusal(info: MapInfo, command: str) -> str | None:
    """Why ``command`` (one of :data:`COMMANDS`, or ``slots``: listing the keys with what a
    lookup of each answers, as bpftool-json does) cannot work on this map, or ``None``."""
    if command == "slots":
        return None if info.type in _SLOTS_LISTABLE else refusal(info, "dump")
    if command == "exec":
        return None if info.type in _EXEC_TYPES else _NOT_EXEC
    if info.type in (MapType.SOCKMAP, MapType.SOCKHASH, MapType.REUSEPORT_SOCKARRAY):
        if command == "load":
            return _SOCKETS
        if command in ("dump", "count", "drain") and info.value_size != 8:
            return _READ_ONLY_SOCKETS.format(info.value_size)
        return None
    return _REFUSED.get(info.type, {}).get(command)


def require(info: MapInfo, command: str) -> None:
    """Raise the one-line :class:`NotSupportedError` of :func:`refusal`, if any."""
    reason = refusal(info, command)
    if reason is not None:
        raise NotSupportedError(command, errno.EOPNOTSUPP, obj=info.label,
                                cause=f"{info.type_name} maps: {reason}")


def _size_of(data) -> int:
    try:
        return memoryview(data).nbytes
    except TypeError:
        raise InputError(f"expected a bytes-like object, got {type(data).__name__}") from None


def _name_hint(name: str, infos: list[MapInfo], limit: int = 5) -> str:
    """`` (maps with a similar name: a (id 3), b (id 9))``: names that hold ``name`` or are
    held by it (the kernel keeps 15 characters of a name), case aside, else the closest
    spellings; or where to look when nothing is near."""
    import difflib

    wanted = name.lower()
    near = [i for i in infos if i.name and (wanted in i.name.lower() or i.name.lower() in wanted)]
    if not near:
        close = set(difflib.get_close_matches(name, {i.name for i in infos}, n=limit, cutoff=0.6))
        near = [i for i in infos if i.name in close]
    if not near:
        return " (bpfbatch list shows every map's name)"
    shown = ", ".join(f"{i.name} (id {i.id})" for i in near[:limit])
    return f" (maps with a similar name: {shown}{', ...' if len(near) > limit else ''})"


def iter_infos() -> Iterator[MapInfo]:
    """Info of every map on the system (maps that vanish meanwhile are skipped)."""
    for map_id in libbpf.map_ids():
        try:
            fd = libbpf.map_fd_by_id(map_id, read_only=True)
        except BpfBatchError as exc:
            if exc.errno == errno.ENOENT:
                continue
            raise
        try:
            yield MapInfo.from_fd(fd)
        finally:
            os.close(fd)


def pinned_paths(root: str = "/sys/fs/bpf", deadline: float | None = None,
                 ) -> dict[int, list[str]]:
    """Map id → the paths it is pinned at under ``root`` (bpftool's ``map show -f``). Pins
    that are programs or links, or that cannot be opened, are skipped. With ``deadline`` (a
    :func:`time.monotonic` time), the walk stops there and returns what it found."""
    import time

    found: dict[int, list[str]] = {}
    for folder, _, files in os.walk(root):
        for file in sorted(files):
            if deadline is not None and time.monotonic() >= deadline:
                return found
            path = os.path.join(folder, file)
            try:
                fd = libbpf.obj_fd_by_path(path, read_only=True)
            except BpfBatchError:
                continue
            try:
                map_id = _fdinfo(fd).get("map_id")
            finally:
                os.close(fd)
            if map_id is not None:
                found.setdefault(int(map_id), []).append(path)
    return found
