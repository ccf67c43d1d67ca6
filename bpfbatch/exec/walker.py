"""Map exec: run a predicate over every element of a map and count, dump or delete what it
selects — in the kernel, or in a user-space emulation with the same semantics.

**Kernel path** (:class:`KernelWalker`): the generic program ``progs/map_exec.bpf.c``, a
``BPF_PROG_TYPE_SYSCALL`` program run with ``BPF_PROG_TEST_RUN``, walks the map with
``bpf_for_each_map_elem`` and evaluates the compiled predicate (:mod:`bpfbatch.exec.predicate`).
A ``kernel`` delete (:meth:`KernelWalker._run_checked`) has the program only select; each
selected key is then taken with ``BPF_MAP_LOOKUP_AND_DELETE_ELEM``, which returns exactly the
value it deleted, judged again and put back when a writer refreshed it (as the emulation
does, below): the only window left is an in-place write through a pointer looked up before
the delete. A ``kernel-fast`` delete (and a user filter's) happens in the program's visit:
read again by key, copied, judged on that, deleted, then compared with the copy; an element
a writer wrote in between is put back from the same run (``progs/bpfbatch_filter.h``). Faster
(per-key work never leaves the kernel) but, on a plain or LRU hash, an update replacing the
element between the program's last lookup and its delete is lost: no helper deletes a key
and returns what it deleted. Selected records go to an mmap-able array
(the "out" map) that Python reads through the mapping, with no syscall; when it fills, the pass
stops, Python hands the records on and runs the program again (deleted elements are gone; a dump skips what it
already emitted). One object is loaded per target map (``bpf_map__reuse_fd``), so the verifier
checks every access against that map's sizes; a :class:`KernelWalker` is reused across rounds.
Why not an ``iter/bpf_map_elem`` iterator: on some kernels attaching one is refused (EPERM)
while syscall programs run; ``bpf_for_each_map_elem`` also has no 1M-object read budget.

**User-space emulation** (:func:`user_exec`): batched lookups (:class:`~bpfbatch.map.cursor.
BatchCursor`), the predicate vectorised with numpy, then for each selected key of the batch
``BPF_MAP_LOOKUP_AND_DELETE_ELEM`` — the value it returns is exactly what was deleted — and a
re-check of those values, :data:`RECHECK_CHUNK` keys at a time: an element a writer refreshed
since the batch was read is put back with ``BPF_NOEXIST`` (a writer that re-created the key
meanwhile keeps its own). Remaining window: a refreshed element is absent from its delete to
the end of its chunk (about a millisecond); an in-place write landing then is lost, an
insert landing then wins.

**User-written filters** (:class:`Filter`, :func:`exec_filter`): the kernel path's program is
itself a filter over the walk of ``progs/bpfbatch_filter.h``, which also holds the contract for
filters users write in C: a ``static long bpfbatch_filter(const void *key, void *value)``
returning ``BPFBATCH_KEEP``/``SELECT``/``STOP``, made a program by
``BPFBATCH_FILTER_PROGRAM(name)``. The same :class:`KernelWalker` loads and drives either one.

Every mode takes ``now`` once per pass (CLOCK_MONOTONIC, as ``bpf_ktime_get_ns``). None is a
snapshot: elements added behind the walk are not seen. Per-CPU maps compare each field's
largest per-CPU value (:mod:`bpfbatch.exec.predicate`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import itertools
import mmap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .. import interrupts
from .._sys import abi
from .._sys.abi import MapType
from .._sys.libbpf import check, lib, num_possible_cpus
from ..api import Map
from ..btf import Kind
from ..errors import BpfBatchError, InputError, NotFoundError, NotSupportedError, from_errno
from ..loader import PROGS_DIR, BpfObject
from ..map import cursor, probes
from ..map.handle import require
from ..records.decoding import view
from .contract import ACTION_NAMES, package_contract, read_contract
from .predicate import Predicate, compile_predicate

ACTIONS = tuple(ACTION_NAMES)
#: ``kernel``: the program selects, each selected key is deleted with
#: ``BPF_MAP_LOOKUP_AND_DELETE_ELEM`` and re-checked (a refreshed one is put back);
#: ``kernel-fast``: the program deletes in the same visit and puts back what it finds written
#: after (a replacing update landing between its last lookup and its delete is lost);
#: ``user``: the emulation. ``auto`` deletes as ``kernel-fast`` on per-CPU maps (their updates
#: write in place: its compare sees them, so nothing is left that ``kernel`` closes) and as
#: ``kernel`` on the others.
MODES = ("auto", "kernel", "kernel-fast", "user")

#: Map types ``bpf_for_each_map_elem`` walks.
KERNEL_TYPES = frozenset({MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH,
                          MapType.LRU_PERCPU_HASH, MapType.ARRAY, MapType.PERCPU_ARRAY})
DELETABLE_TYPES = frozenset({MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH,
                             MapType.LRU_PERCPU_HASH})
#: Memory of the out map, which bounds the records handed over per kernel pass.
OUT_BYTES = 32 << 20

Sink = Callable[[cursor.Batch], None]

#: Where ``bpfbatch_filter.h`` (and the ``map_exec.h`` it includes) are installed: the ``-I``
#: for building a filter.
FILTER_INCLUDE_DIR = PROGS_DIR
#: What a filter object must hold besides its program (``progs/bpfbatch_filter.h``).
_FILTER_MAPS = ("target", "out")
_FILTER_CONTEXT = "map_exec_args"
#: ELF header bytes up to e_machine, and e_machine of a BPF object.
_ELF_HEADER, _EM_BPF = 20, 247


@dataclasses.dataclass(frozen=True)
class Filter:
    """A user-written filter: syscall program ``program`` of BPF object file ``path``, built
    against ``bpfbatch_filter.h`` (see that header for the contract)."""

    path: Path
    program: str

    def open(self) -> BpfObject:
        """The object opened with only this program set to load, after checking it keeps the
        contract (one line naming the file and what is wrong, before anything is loaded)."""
        self._check_elf()
        obj = BpfObject(self.path)
        try:
            self._check(obj)
        except BaseException:
            obj.close()
            raise
        return obj

    def _check_elf(self) -> None:
        """A BPF ELF object, or a clear line (libbpf only says "libelf error" for the rest)."""
        if not self.path.exists():
            raise NotFoundError("no such BPF object file", obj=str(self.path))
        try:
            with open(self.path, "rb") as f:
                header = f.read(_ELF_HEADER)
        except OSError as e:
            raise InputError(f"cannot read: {e.strerror}", obj=str(self.path), errno=e.errno) from None
        if len(header) < _ELF_HEADER or not header.startswith(b"\x7fELF"):
            raise InputError("not an ELF file (a BPF object is what clang -target bpf -c "
                             "writes)", obj=str(self.path))
        machine = int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")
        if machine != _EM_BPF:
            raise InputError(f"an ELF object for machine {machine}, not BPF (build it with "
                             "clang -target bpf)", obj=str(self.path))

    def _check(self, obj: BpfObject) -> None:
        where = f"{obj.label}: {self.program}"
        programs = obj.programs()
        chosen = next((p for p in programs if p.name == self.program), None)
        if chosen is None:
            names = ", ".join(p.name for p in programs) or "none"
            raise NotFoundError(f"no such program in the object (it has: {names})", obj=where)
        if chosen.section != "syscall":
            raise InputError(f"a '{chosen.section}' program, not a filter: a filter is the "
                             "syscall program BPFBATCH_FILTER_PROGRAM(name) makes "
                             "(bpfbatch_filter.h)", obj=where)
        maps = obj.btf.find(Kind.DATASEC, ".maps")
        declared = {obj.btf[var].name for var, _, _ in maps.entries} if maps else set()
        missing = [name for name in _FILTER_MAPS if name not in declared]
        if missing or obj.btf.find(Kind.STRUCT, _FILTER_CONTEXT) is None:
            lacks = f"map '{missing[0]}'" if missing else f"struct {_FILTER_CONTEXT} in its BTF"
            raise InputError(f"not built on bpfbatch_filter.h: the object lacks {lacks}",
                             obj=obj.label)
        for prog in programs:
            check(lib.bpf_program__set_autoload(prog.handle, prog is chosen), "set autoload",
                  f"{obj.label}: {prog.name}")


@dataclasses.dataclass
class ExecResult:
    """What one exec did. ``kept``: selected, then found refreshed (by the re-check before the
    delete, or after it, and put back); ``superseded``: deleted, written since, and re-created
    by a writer before it could be put back (the writer's element stays)."""

    mode: str
    action: str
    visited: int = 0
    selected: int = 0
    deleted: int = 0
    kept: int = 0
    superseded: int = 0
    passes: int = 0
    seconds: float = 0.0


def _round8(n: int) -> int:
    return (n + 7) & ~7


def _check_action(m: Map, action: str, max_selected: int) -> None:
    require(m.info, "exec")
    if action not in ACTIONS:
        raise InputError(f"unknown action '{action}' (use {', '.join(ACTIONS)})", obj="action")
    if max_selected < 0:
        raise InputError(f"must not be negative, got {max_selected}", obj="max_selected")
    if action == "delete" and m.info.type not in DELETABLE_TYPES:
        raise NotSupportedError("delete", errno.EINVAL, obj=m.info.label,
                                detail=f"{m.info.type_name} elements cannot be deleted")


def compile_for(m: Map, where: str | Predicate, decode=None) -> Predicate:
    """``where`` compiled against the map's view (a Predicate passes through): ``decode``
    as :func:`bpfbatch.records.decoding.view` takes it (``None``: the automatic decoders,
    as ``dump`` shows the fields), whose fields then take display values."""
    if isinstance(where, Predicate):
        return where
    require(m.info, "exec")  # before the predicate: its errors would hide the real reason
    key, value = view(m.info, decode)
    return compile_predicate(where, value, key=key)


def kernel_support(m: Map) -> probes.Support:
    """Whether the kernel path can run on ``m`` (map type, sizes, syscall programs)."""
    info = m.info
    if info.type not in KERNEL_TYPES:
        return probes.Support(False, f"bpf_for_each_map_elem cannot walk {info.type_name} maps")
    limits = package_contract()
    if info.key_size > limits.max_key_size or info.value_size > limits.max_value_size:
        return probes.Support(False, f"key/value larger than {limits.max_key_size}/"
                                     f"{limits.max_value_size} bytes")
    if info.percpu and num_possible_cpus() > limits.max_cpus:
        return probes.Support(False, f"more than {limits.max_cpus} possible CPUs")
    return probes.syscall_program()


# -- kernel path ---------------------------------------------------------------------------


class KernelWalker:
    """The map exec program, or ``user_filter``, loaded against one map. ``records``:
    whether passes can hand selected records out (sizes the out map; without it only counts
    come back). ``terms``: the most comparisons a predicate run on it may have (default: the
    program's limit); the verifier walks only that many, so a walker for one predicate is
    loaded for its own count (a 1-term prune verifies ~20x faster than 16 terms).
    ``keys_only``: the records are keys alone, for counts and :meth:`_run_checked` deletes
    only (whose values come from lookup-and-delete): a run then selects three to five times
    as many keys and copies no value."""

    def __init__(self, m: Map, *, records: bool = True, out_bytes: int = OUT_BYTES,
                 user_filter: Filter | None = None, terms: int | None = None,
                 keys_only: bool = False):
        support = kernel_support(m)
        if not support:
            raise NotSupportedError("map exec in the kernel", errno.EOPNOTSUPP, obj=m.info.label,
                                    detail=support.reason)
        self.map = m
        self.records = records or keys_only
        self.keys_only = keys_only and user_filter is None
        info = m.info
        self.key_stride = _round8(info.key_size)
        self.rec_size = self.key_stride + (0 if self.keys_only else _round8(info.value_stride))
        self.slots = max(1, min(info.max_entries, out_bytes // self.rec_size)) \
            if self.records else 1
        program = user_filter.program if user_filter else "map_exec"
        self._obj = user_filter.open() if user_filter else BpfObject.package(program)
        self._out: mmap.mmap | None = None
        try:
            self.contract = read_contract(self._obj.btf, self._obj.label)
            self._obj.configure_map("target", reuse_fd=m.fd)
            self._obj.configure_map("out", value_size=self.rec_size, max_entries=self.slots)
            self.max_terms = self.contract.max_terms if terms is None else min(
                terms, self.contract.max_terms)
            self._obj.set_rodata(key_size=info.key_size, key_stride=self.key_stride,
                                 value_size=info.value_size, cpu_stride=info.cpu_stride,
                                 nr_cpus=num_possible_cpus() if info.percpu else 0,
                                 out_slots=self.slots)
            if user_filter is None:
                self._obj.set_rodata(term_slots=self.max_terms, values_out=int(not self.keys_only))
            self._obj.load()
            self.args_dtype = self._obj.dtype("map_exec_args")
            self._prog_fd = self._obj.program_fd(program)
            self._out = mmap.mmap(self._obj.map("out").fd, self.slots * self.rec_size,
                                  mmap.MAP_SHARED, mmap.PROT_READ)
        except BaseException:
            self.close()
            raise

    def run(self, predicate: Predicate | None, action: str, *, sink: Sink | None = None,
            max_selected: int = 0, fast: bool = False, batch_size: int = 0) -> ExecResult:
        """One exec: as many program runs as the out map needs to hand over every record.
        ``predicate``: the map exec program's parameters (``None`` for a user's filter).
        ``batch_size``: a delete that hands records to ``sink`` deletes at most that many per
        run before the sink has them, so a SIGKILL loses at most that many (0: as many as the
        out map holds).

        A delete by predicate goes through :meth:`_run_checked` unless ``fast``; otherwise
        (and for a user filter, which cannot be judged outside the kernel) the program judges
        each element on what it holds right before its delete, compares it after, and puts
        back an element a writer wrote in between (``bpfbatch_filter.h``)."""
        _check_action(self.map, action, max_selected)
        if batch_size:
            cursor.check_batch_size(batch_size)
        if sink is not None and not self.records:
            raise BpfBatchError("this walker was made without records", obj=self.map.info.label)
        per_run = batch_size if action == "delete" and sink is not None else 0
        if action == "delete" and predicate is not None and not fast:
            return self._run_checked(predicate, sink, max_selected, per_run)
        if self.keys_only and (action == "delete" or sink is not None):
            raise BpfBatchError("this walker was made for keys only (counts and checked "
                                "deletes)", obj=self.map.info.label)
        args = self._args(predicate, action, emit=sink is not None)
        result = ExecResult("kernel-fast" if action == "delete" and fast else "kernel", action)
        start = time.perf_counter()
        while True:
            skip = result.selected if action == "dump" else 0
            args["skip"] = skip
            cap = min((n for n in (max_selected - result.selected if max_selected else 0,
                                   per_run) if n), default=0)
            args["max_selected"] = skip + cap if cap else 0
            with interrupts.deferred():  # the program deletes: its records are in hand
                out = self._run_once(args)
                result.passes += 1
                result.visited += int(out["visited"]) - min(int(args["resume"][0]),
                                                             int(out["visited"]))
                result.deleted += int(out["deleted"])
                result.kept += int(out["rechecked_out"]) + int(out["put_back"])
                result.superseded += int(out["superseded"])
                result.selected += int(out["selected"]) - skip
                if sink is not None and out["emitted"]:
                    sink(self._records(int(out["emitted"])))
            stopped = int(out["stopped"])
            if stopped == self.contract.put_back_failed:
                self._put_back_failed(int(out["emitted"]), -int(out["put_back_errno"]))
            batch_done = stopped == self.contract.limit and per_run and not (
                max_selected and result.selected >= max_selected)
            # A delete goes on where the last run stopped (judged elements it kept are passed
            # over, checked by the last one's key), from the start when the map moved there.
            if action == "delete":
                args["resume"] = 0 if stopped == self.contract.resume_lost else out["resume_next"]
            if stopped not in (self.contract.out_full, self.contract.resume_lost) and \
                    not batch_done:
                break
        result.seconds = time.perf_counter() - start
        return result

    def _run_checked(self, predicate: Predicate, sink: Sink | None, max_selected: int,
                     per_run: int) -> ExecResult:
        """Delete by predicate, safely: each run the program only selects (up to ``per_run``
        records, 0: as many as the out map holds), then :meth:`_Deleter.run` takes every
        selected key with ``BPF_MAP_LOOKUP_AND_DELETE_ELEM``, judges the value it deleted
        again and puts a refreshed one back. The next run resumes behind the elements this
        one judged (less those now gone), checked by the key it kept last, from the start
        when the map moved there."""
        if not self.records:
            raise BpfBatchError("this walker was made without records", obj=self.map.info.label)
        info = self.map.info
        deleter = _Deleter(self.map, predicate)
        args = self._args(predicate, "dump", emit=True)
        result = ExecResult("kernel", "delete")
        start = time.perf_counter()
        while True:
            cap = min((n for n in (max_selected - result.selected if max_selected else 0,
                                   per_run) if n), default=0)
            args["max_selected"] = cap
            out = self._run_once(args)
            result.passes += 1
            result.visited += int(out["visited"]) - min(int(args["resume"][0]),
                                                         int(out["visited"]))
            emitted, gone = int(out["emitted"]), 0
            if emitted:
                recs = np.frombuffer(self._out[:emitted * self.rec_size], np.uint8).reshape(
                    emitted, -1)
                with interrupts.deferred():  # deleted records are in hand until sunk
                    keys, values, gone = deleter.run(recs[:, :info.key_size], int(out["now"]),
                                                     result)
                    if sink is not None and len(keys):
                        sink(_batch(keys, values))
            stopped = int(out["stopped"])
            more = stopped == self.contract.limit and not (
                max_selected and result.selected >= max_selected)
            args["resume"] = 0 if stopped == self.contract.resume_lost else max(
                0, int(out["resume_next"]) - gone)
            if stopped not in (self.contract.out_full, self.contract.resume_lost) and not more:
                break
        result.seconds = time.perf_counter() - start
        return result

    def _put_back_failed(self, slot: int, err: int) -> None:
        """The program deleted an element a writer had written since its judgement and could
        not put it back: name the key (its record is in out slot ``slot``)."""
        at = slot * self.rec_size
        key = bytes(self._out[at:at + self.map.info.key_size])
        raise from_errno(f"put back refreshed element (key {key.hex()}; it is lost)", err,
                         obj=self.map.info.label)

    def _args(self, predicate: Predicate | None, action: str, *, emit: bool) -> np.ndarray:
        """The program's context for ``predicate`` and ``action``."""
        terms = predicate.table(self.contract.ops) if predicate is not None else []
        if len(terms) > self.max_terms:
            raise InputError(f"{len(terms)} comparisons; the kernel program was loaded for "
                             f"{self.max_terms}", obj=predicate.text or "predicate")
        args = np.zeros(1, self.args_dtype)
        args["action"] = self.contract.actions[action]
        args["nterms"] = len(terms)
        args["emit"] = int(emit)
        for i, term in enumerate(terms):
            for name, value in term.items():
                args["terms"][name][0, i] = value
        return args

    def _run_once(self, args: np.ndarray) -> np.void:
        buf = bytearray(args.tobytes())
        ctx = (ctypes.c_char * len(buf)).from_buffer(buf)
        opts = abi.opts(abi.BpfTestRunOpts, ctx_in=ctypes.addressof(ctx), ctx_size_in=len(buf))
        ret = lib.bpf_prog_test_run_opts(self._prog_fd, ctypes.byref(opts))
        del ctx
        if ret < 0:
            raise from_errno("run map exec program", -ret, obj=self.map.info.label)
        return np.frombuffer(bytes(buf), self.args_dtype)[0]

    def _records(self, count: int) -> cursor.Batch:
        """The first ``count`` records of the out map, copied: the next run overwrites it.
        Sliced out of the mapping as ``bytes``, so no view of it ever exists: a signal here
        leaves none behind in the traceback, which would make :meth:`close` fail to unmap
        (``BufferError``) instead of reporting the interruption."""
        info = self.map.info
        recs = np.frombuffer(self._out[:count * self.rec_size], np.uint8).reshape(count, -1)
        keys = recs[:, :info.key_size].copy()
        values = recs[:, self.key_stride:self.key_stride + info.value_stride].copy()
        return _batch(keys, values)

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
        self._obj.close()

    def __enter__(self) -> "KernelWalker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _batch(keys: np.ndarray, values: np.ndarray) -> cursor.Batch:
    """``(n, key_size)`` and ``(n, value_stride)`` rows as a Batch (contiguous copies if
    needed)."""
    return cursor.Batch(len(keys), memoryview(np.ascontiguousarray(keys)).cast("B"),
                        memoryview(np.ascontiguousarray(values)).cast("B"))


# -- user-space emulation ------------------------------------------------------------------


def user_exec(m: Map, predicate: Predicate, action: str, *, sink: Sink | None = None,
              max_selected: int = 0, batch_size: int = cursor.DEFAULT_BATCH) -> ExecResult:
    """The emulation (see the module doc): same selection, same counts, same records."""
    _check_action(m, action, max_selected)
    info = m.info
    cpus = num_possible_cpus() if info.percpu else 0
    result = ExecResult("user", action)
    deleter = _Deleter(m, predicate)
    start = time.perf_counter()
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    for batch in cursor.BatchCursor(m, batch_size=batch_size):
        result.passes = 1
        result.visited += batch.count
        keys = np.frombuffer(batch.keys, np.uint8).reshape(batch.count, info.key_size)
        values = np.frombuffer(batch.values, np.uint8).reshape(batch.count, info.value_stride)
        picked = np.flatnonzero(predicate.evaluate(values, now, keys=keys, cpus=cpus,
                                                   cpu_stride=info.cpu_stride))
        if max_selected:
            picked = picked[:max_selected - result.selected]
        with interrupts.deferred():  # deleted records are in hand until the sink has them
            if action == "delete":
                keys, values, _ = deleter.run(keys[picked], now, result)
            else:
                keys, values = keys[picked], values[picked]
                result.selected += len(picked)
            if sink is not None and action != "count" and len(keys):
                sink(_batch(keys, values))
        if max_selected and result.selected >= max_selected:
            break
    result.seconds = time.perf_counter() - start
    return result


#: Keys deleted per re-check: bounds how long a refreshed element stays out before it is put
#: back (one lookup-and-delete syscall per key, then one vectorised re-check per chunk).
RECHECK_CHUNK = 1024


class _Deleter:
    """Deletes selected keys of one map, checked: each key is taken with
    ``BPF_MAP_LOOKUP_AND_DELETE_ELEM`` (atomic under the bucket lock, and it returns exactly
    the value it deleted), the values of a chunk are judged again at once, and one a writer
    refreshed since the selection is put back with ``BPF_NOEXIST`` (a writer that re-created
    the key meanwhile keeps its own: superseded). Per key there is one ctypes call driven from
    C (``map`` over address ranges into a preallocated value buffer), nothing else."""

    def __init__(self, m: Map, predicate: Predicate):
        self.map, self.predicate = m, predicate
        self.cpus = num_possible_cpus() if m.info.percpu else 0
        self._values = np.empty((0, m.info.value_stride), np.uint8)

    def run(self, keys: np.ndarray, now: int, result: ExecResult
            ) -> tuple[np.ndarray, np.ndarray, int]:
        """Delete ``keys`` (rows of key bytes, any row stride), counting into ``result``: the
        keys and values deleted, and how many of ``keys`` are no longer in the map (deleted,
        or gone before their turn)."""
        info = self.map.info
        vs, n = info.value_stride, len(keys)
        if keys.strides[-1] != 1:
            keys = np.ascontiguousarray(keys)
        if len(self._values) < n:
            self._values = np.empty((n, vs), np.uint8)
        values = self._values[:n]
        gone = np.zeros(n, bool)
        lookup_and_delete, fd = lib.bpf_map_lookup_and_delete_elem, self.map.fd
        key_at, stride, value_at = keys.ctypes.data, keys.strides[0], values.ctypes.data
        vanished = 0
        for lo in range(0, n, RECHECK_CHUNK):
            hi = min(lo + RECHECK_CHUNK, n)
            rets = np.fromiter(map(lookup_and_delete, itertools.repeat(fd, hi - lo),
                                   range(key_at + lo * stride, key_at + hi * stride, stride),
                                   range(value_at + lo * vs, value_at + hi * vs, vs)),
                               np.int32, hi - lo)
            failed = rets[(rets != 0) & (rets != -errno.ENOENT)]  # ENOENT: gone already
            if len(failed):
                raise from_errno("lookup and delete element", -int(failed[0]), obj=info.label)
            vanished += int((rets == -errno.ENOENT).sum())
            taken = lo + np.flatnonzero(rets == 0)
            gone[taken] = True
            fresh = taken[~self.predicate.evaluate(values[taken], now, keys=keys[taken],
                                                   cpus=self.cpus,
                                                   cpu_stride=info.cpu_stride)]
            for i in fresh.tolist():  # refreshed since the selection: back as it is now
                self._put_back(keys[i], values[i], result)
            gone[fresh] = False
        deleted = int(gone.sum())
        result.selected += deleted
        result.deleted += deleted
        return keys[gone], values[gone], deleted + vanished

    def _put_back(self, key: np.ndarray, value: np.ndarray, result: ExecResult) -> None:
        """Put one refreshed element back; a failure names the key (it is lost)."""
        ret = lib.bpf_map_update_elem(self.map.fd, key.ctypes.data, value.ctypes.data,
                                      abi.BPF_NOEXIST)
        if ret == -errno.EEXIST:  # a writer re-created it meanwhile: theirs stays
            result.superseded += 1
        elif ret < 0:
            raise from_errno(f"put back refreshed element (key {key.tobytes().hex()}; it is "
                             "lost)", -ret, obj=self.map.info.label)
        else:
            result.kept += 1


# -- the entry point -----------------------------------------------------------------------


def choose_mode(m: Map, mode: str) -> str:
    """``kernel``, ``kernel-fast`` or ``user`` for ``mode`` (``auto``, when the kernel path's
    probe passes: ``kernel-fast`` on a per-CPU map, whose updates write in place, so deleting
    in the program is as safe as ``kernel`` and ten times faster; ``kernel`` on the others,
    where an update replaces the element and only lookup-and-delete returns what it
    deleted)."""
    if mode not in MODES:
        raise InputError(f"unknown mode '{mode}' (use {', '.join(MODES)})", obj="mode")
    if mode == "auto":
        if not kernel_support(m):
            return "user"
        return "kernel-fast" if m.info.percpu else "kernel"
    return mode


def open_walker(m: Map, mode: str, *, records: bool, predicate: Predicate | None = None,
                action: str = "delete") -> KernelWalker | None:
    """The kernel path's walker for ``mode`` and ``action`` (loaded for ``predicate``'s
    comparisons, when given), or ``None`` for the emulation. ``auto`` also falls back when the
    program does not load on this kernel (e.g. a verifier it predates). A ``kernel`` delete
    or count gets a walker whose records are keys only (a delete needs them whatever
    ``records`` says; its values come from lookup-and-delete)."""
    chosen = choose_mode(m, mode)
    if chosen == "user":
        return None
    keys_only = chosen == "kernel" and (action == "delete" or (action == "count"
                                                               and not records))
    try:
        return KernelWalker(m, records=records, keys_only=keys_only,
                            terms=None if predicate is None else len(predicate.terms))
    except BpfBatchError:
        if mode == "auto":
            return None
        raise


def exec_map(m: Map, where: str | Predicate, action: str = "count", *, mode: str = "auto",
             sink: Sink | None = None, max_selected: int = 0, decode=None,
             batch_size: int = cursor.DEFAULT_BATCH) -> ExecResult:
    """Run ``where`` over every element of ``m`` and ``count``, ``dump`` or ``delete`` the
    selected ones; ``sink`` receives the dumped or deleted records batch by batch (zero-copy
    views, valid during the call). ``max_selected`` stops after that many (0: no limit).
    ``decode``: how ``where`` reads the fields, as :meth:`Map.items` takes it (default: the
    automatic decoders, ``key.dport == 443``; ``"none"``: as stored). ``batch_size``: deleted
    records are handed to ``sink`` at least every that many, in every mode: what a SIGKILL
    can lose."""
    _check_action(m, action, max_selected)
    cursor.check_batch_size(batch_size)
    predicate = compile_for(m, where, decode)
    walker = open_walker(m, mode, records=sink is not None, predicate=predicate,
                         action=action)
    if walker is None:
        return user_exec(m, predicate, action, sink=sink, max_selected=max_selected,
                         batch_size=batch_size)
    with walker:
        return walker.run(predicate, action, sink=sink, max_selected=max_selected,
                          fast=choose_mode(m, mode) == "kernel-fast", batch_size=batch_size)


def exec_filter(m: Map, user_filter: Filter, action: str = "count", *, sink: Sink | None = None,
                max_selected: int = 0, batch_size: int = cursor.DEFAULT_BATCH) -> ExecResult:
    """:func:`exec_map` with a user-written filter instead of a predicate: the kernel path
    only (the filter is BPF code; there is nothing to emulate)."""
    _check_action(m, action, max_selected)
    with KernelWalker(m, records=sink is not None,
                      user_filter=user_filter) as walker:
        return walker.run(None, action, sink=sink, max_selected=max_selected,
                          batch_size=batch_size)
