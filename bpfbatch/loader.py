"""The package's CO-RE objects (``bpfbatch/progs/<name>.bpf.o``): open, configure, load,
attach, hand out maps, close.

Life cycle, as libbpf's skeletons have it::

    with BpfObject.package("tcptop") as obj:
        obj.set_rodata(target_pid=1234)   # before load: the verifier sees the constants
        obj.load()                          # picks tp_btf or raw_tp, then loads (CO-RE)
        obj.attach()                        # one link per loaded program
        flows = obj.map("flows_a")          # a Map over the object's fd (not owned)

Objects hook each tracepoint twice, ``SEC("tp_btf/X")`` and ``SEC("raw_tp/X")``, with the same
body; :meth:`BpfObject.load` keeps the variant the feature probes say this kernel loads *and
attaches* (tp_btf first: typed arguments, no probe-read of the context) and raises one line
naming both probes' reasons when neither works.

Failures are one line (``tcptop.bpf.o: load object: ... (EACCES)``); libbpf's log, including
the verifier's, goes wherever :func:`bpfbatch._sys.libbpf.set_log_sink` sends it (the CLI's
``-v``). Record and variable layouts are read from the object's BTF (:mod:`bpfbatch.btf`),
never retyped in Python.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import functools
import re
from pathlib import Path

import numpy as np

from ._sys import abi, libbpf
from ._sys.abi import MapType
from ._sys.libbpf import check, check_ptr, lib
from .api import Map
from .btf import Btf, BtfType, Kind
from .errors import (
    BpfBatchError,
    InputError,
    NotFoundError,
    NotSupportedError,
    errno_meaning,
    from_errno,
)
from .map import probes
from .records.codec import codec_for

PROGS_DIR = Path(__file__).with_name("progs")

#: Section prefixes of the two ways to hook a tracepoint, in order of preference.
HOOK_KINDS = ("tp_btf", "raw_tp")
_PROBES = {"tp_btf": probes.tp_btf, "raw_tp": probes.raw_tp}
#: Sections that load a program without naming where it attaches.
UNATTACHED = frozenset({"raw_tp", "raw_tracepoint", "syscall"})


@dataclasses.dataclass(frozen=True)
class Program:
    """A program of an opened object: its C function name and its ELF section."""

    name: str
    section: str
    handle: int

    @property
    def tracepoint(self) -> tuple[str, str] | None:
        """``("tp_btf", "sock_send_length")`` for a tracepoint section, else ``None``."""
        kind, _, target = self.section.partition("/")
        return (kind, target) if kind in HOOK_KINDS and target else None


class BpfObject:
    """One opened CO-RE object file; owns the libbpf object, its programs, maps and links."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.label = self.path.name
        if not self.path.exists():
            raise NotFoundError("no such BPF object", obj=str(self.path))
        with libbpf.signals_deferred():
            opened = lib.bpf_object__open_file(str(self.path).encode(), None)
        self._obj = check_ptr(opened, "open BPF object", self.label)
        self._links: list[int] = []
        self._maps: dict[str, Map] = {}
        self._templates: list[Map] = []
        self.loaded = False
        #: ``tracepoint -> "tp_btf" | "raw_tp"``, decided by :meth:`load`.
        self.hooks: dict[str, str] = {}

    @classmethod
    def package(cls, name: str) -> "BpfObject":
        """``bpfbatch/progs/<name>.bpf.o``, built by ``make -C progs`` and shipped in the wheel."""
        path = PROGS_DIR / f"{name}.bpf.o"
        if not path.exists():
            raise NotFoundError("BPF object not built: run `make -C progs` (needs clang and "
                                "bpftool)", obj=f"{name}.bpf.o")
        return cls(path)

    @functools.cached_property
    def btf(self) -> Btf:
        """The object's BTF, read when first needed (a plain tc object file may have none)."""
        handle = check_ptr(lib.bpf_object__btf(self._obj), "read object BTF", self.label)
        size = ctypes.c_uint32()
        raw = check_ptr(lib.btf__get_raw_data(handle, ctypes.byref(size)), "read object BTF",
                        self.label)
        return Btf.from_bytes(ctypes.string_at(raw, size.value))

    # -- before load ---------------------------------------------------------------------

    def programs(self) -> list[Program]:
        out, prog = [], None
        while prog := lib.bpf_object__next_program(self._obj, prog):
            out.append(Program(lib.bpf_program__name(prog).decode(),
                               lib.bpf_program__section_name(prog).decode(), prog))
        return out

    def set_rodata(self, **values: int) -> None:
        """Set ``const volatile`` globals of ``.rodata`` by name, before :meth:`load`.

        Integers only (what the tools configure: pids, families); the size and signedness come
        from the variable's BTF, and a value that does not fit is refused.
        """
        if self.loaded:
            raise BpfBatchError(".rodata is frozen once the object is loaded", obj=self.label)
        section = self._section(".rodata")
        size = ctypes.c_size_t()
        base = check_ptr(lib.bpf_map__initial_value(self._map_handle(".rodata"),
                                                    ctypes.byref(size)),
                         "read .rodata", self.label)
        for name, value in values.items():
            offset, var_size, signed = self._variable(section, name)
            try:
                data = int(value).to_bytes(var_size, "little", signed=signed)
            except OverflowError:
                raise InputError(f"{value} does not fit the {var_size}-byte variable",
                                 obj=f"{self.label}: {name}") from None
            ctypes.memmove(base + offset, data, var_size)

    def configure_map(self, name: str, *, reuse_fd: int | None = None,
                      value_size: int | None = None, max_entries: int | None = None,
                      inner_max_entries: int | None = None) -> None:
        """Before :meth:`load`: make map ``name`` an existing map (``reuse_fd``, which libbpf
        dups), or resize it; ``inner_max_entries`` resizes the template of a map-in-map's
        inner maps, which every map put in a slot must match."""
        if self.loaded:
            raise BpfBatchError("maps are fixed once the object is loaded", obj=self.label)
        handle, what = self._map_handle(name), f"{self.label}: {name}"
        if reuse_fd is not None:
            check(lib.bpf_map__reuse_fd(handle, reuse_fd), "reuse map fd", what)
        if value_size is not None:
            check(lib.bpf_map__set_value_size(handle, value_size), "set map value size", what)
        if max_entries is not None:
            check(lib.bpf_map__set_max_entries(handle, max_entries), "set map max_entries", what)
        if inner_max_entries is not None:
            self._resize_inner_template(handle, inner_max_entries, what)

    def _resize_inner_template(self, handle: int, max_entries: int, what: str) -> None:
        """Give a map-in-map an inner template of ``max_entries``. libbpf (1.1) cannot resize
        the template it built from the BTF definition (``bpf_map__set_max_entries`` reads the
        template's object pointer, which it never sets), so hand it a map of the same
        definition and the new size; the kernel only compares definitions with it."""
        inner = lib.bpf_map__inner_map(handle)
        if not inner:
            raise InputError("not a map-in-map: it has no inner map template", obj=what)
        template = Map.create(MapType.parse(lib.bpf_map__type(inner)),
                              lib.bpf_map__key_size(inner), lib.bpf_map__value_size(inner),
                              max_entries, flags=lib.bpf_map__map_flags(inner),
                              name="inner_template")
        self._templates.append(template)  # the outer map is created at load: keep it open
        check(lib.bpf_map__set_inner_map_fd(handle, template.fd), "set inner map template",
              what)

    def only_section(self, section: str, prog_type: int, name: str | None = None) -> Program:
        """Load only the (first) program in ELF ``section``, or the one named ``name`` in any
        section, as ``prog_type`` (tc's ``bpf obj FILE sec NAME [program NAME]``: the section
        name is the user's, libbpf may not know what type it implies)."""
        chosen = None
        for prog in self.programs():
            mine = (prog.section == section if name is None else prog.name == name) \
                and chosen is None
            check(lib.bpf_program__set_autoload(prog.handle, mine), "set autoload",
                  f"{self.label}: {prog.name}")
            if mine:
                check(lib.bpf_program__set_type(prog.handle, prog_type), "set program type",
                      f"{self.label}: {prog.name}")
                chosen = prog
        if chosen is None:
            raise NotFoundError(f"no program in section {section}" if name is None
                                else f"no program named {name}", obj=self.label)
        return chosen

    def program_fd(self, name: str) -> int:
        """The fd of loaded program ``name`` (owned by the object)."""
        self._require_loaded(f"program {name}")
        for prog in self.programs():
            if prog.name == name:
                return check(lib.bpf_program__fd(prog.handle), "program fd", f"{self.label}: {name}")
        raise NotFoundError("no such program in the object", obj=f"{self.label}: {name}")

    # -- load and attach -----------------------------------------------------------------

    def load(self, *, hook_kinds: tuple[str, ...] = HOOK_KINDS) -> None:
        """Choose each tracepoint's hook, then load every program and map into the kernel.

        ``hook_kinds`` is the order of preference (``("raw_tp",)`` forces the fallback).
        """
        self._choose_hooks(hook_kinds)
        log: list[str] = []
        forward = libbpf.log_sink()

        def tee(line: str) -> None:  # keep the log for the error line, still honour -v
            log.append(line)
            if forward:
                forward(line)

        libbpf.set_log_sink(tee)
        try:
            with libbpf.signals_deferred():
                ret = lib.bpf_object__load(self._obj)
        finally:
            libbpf.set_log_sink(forward)
        if ret < 0:
            rejected = _verifier_verdict("".join(log))
            if rejected:
                reason = f"the verifier rejected program {rejected[0]}: {rejected[1]}"
            elif -ret == errno.EACCES:  # what the verifier returns for an unsafe program
                reason = "the verifier rejected the object"
            else:
                reason = errno_meaning(-ret)
            raise from_errno("load object", -ret, obj=self.label,
                             detail=f"{reason}; run with -v for libbpf's and the verifier's log")
        self.loaded = True

    def _choose_hooks(self, hook_kinds: tuple[str, ...]) -> None:
        by_target: dict[str, dict[str, list[Program]]] = {}
        for prog in self.programs():
            if prog.tracepoint:
                kind, target = prog.tracepoint
                by_target.setdefault(target, {}).setdefault(kind, []).append(prog)
        for target, variants in by_target.items():
            reasons = []
            for kind in hook_kinds:
                if kind not in variants:
                    continue
                support = _PROBES[kind](target)
                if support:
                    self.hooks[target] = kind
                    break
                reasons.append(f"{kind}: {support.reason}")
            else:
                if not reasons:
                    raise NotFoundError(f"the object has no {'/'.join(hook_kinds)} program for "
                                        f"tracepoint {target}", obj=self.label)
                raise NotSupportedError(
                    f"hook tracepoint {target}", errno.EOPNOTSUPP, obj=self.label,
                    detail="no way to attach works here (" + "; ".join(reasons) + ")")
            for kind, progs in variants.items():
                for prog in progs:
                    check(lib.bpf_program__set_autoload(prog.handle, kind == self.hooks[target]),
                          "set autoload", f"{self.label}: {prog.name}")

    def attach(self) -> None:
        """Attach every loaded program (libbpf derives the attach point from its section).
        A program whose section names no attach point (a bare ``SEC("raw_tp")``, run from
        user space with BPF_PROG_RUN) is left unattached."""
        self._require_loaded("attach")
        for prog in self.programs():
            if not lib.bpf_program__autoload(prog.handle) or prog.section in UNATTACHED:
                continue
            with libbpf.signals_deferred():
                link = lib.bpf_program__attach(prog.handle)
            self._links.append(check_ptr(link, f"attach {prog.section}",
                                         f"{self.label}: {prog.name}"))

    def recursion_misses(self) -> int:
        """Events the kernel skipped the loaded programs for, summed: a tracing program that
        would run while it is already running on that CPU is not run (``recursion_misses``
        of ``bpf_prog_info``, 5.12+; older kernels leave it 0)."""
        self._require_loaded("recursion misses")
        total = 0
        for prog in self.programs():
            if lib.bpf_program__autoload(prog.handle):
                what = f"{self.label}: {prog.name}"
                info = abi.BpfProgInfo()
                libbpf.obj_info(check(lib.bpf_program__fd(prog.handle), "program fd", what),
                                 info, what)
                total += info.recursion_misses
        return total

    # -- after load ----------------------------------------------------------------------

    def map(self, name: str) -> Map:
        """The loaded map ``name`` (``.bss``/``.data``/``.rodata`` for the globals), as a
        :class:`~bpfbatch.Map` sharing the object's fd: valid until :meth:`close`."""
        self._require_loaded(f"open map {name}")
        if name not in self._maps:
            fd = check(lib.bpf_map__fd(self._map_handle(name)), "map fd", f"{self.label}: {name}")
            self._maps[name] = Map(fd, owned=False)
        return self._maps[name]

    def global_value(self, section: str, name: str) -> int:
        """The current value of integer global ``name`` in ``section`` (e.g. ``.bss``)."""
        offset, size, signed = self._variable(self._section(section), name)
        blob = self.map(section).lookup(b"\0\0\0\0")
        return int.from_bytes(blob[offset:offset + size], "little", signed=signed)

    def dtype(self, struct: str) -> np.dtype:
        """numpy dtype of ``struct <struct>`` (offsets and types from the object's BTF)."""
        t = self.struct(struct)
        return codec_for(self.btf, t.id, t.size).dtype

    def struct(self, name: str) -> BtfType:
        """The object's BTF ``struct name`` (a record layout from a ``progs/<name>.h``)."""
        return self._find(Kind.STRUCT, name, "no such struct in the object's BTF")

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Detach (links first), then free programs and maps. Safe to call twice."""
        for link in reversed(self._links):
            lib.bpf_link__destroy(link)
        self._links.clear()
        for m in (*self._maps.values(), *self._templates):
            m.close()
        self._maps.clear()
        self._templates.clear()
        if self._obj:
            lib.bpf_object__close(self._obj)
            self._obj = None

    def __enter__(self) -> "BpfObject":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- helpers -------------------------------------------------------------------------

    def _require_loaded(self, what: str) -> None:
        if not self.loaded:
            raise BpfBatchError(f"{what}: the object is not loaded yet", obj=self.label)

    def _map_handle(self, name: str) -> int:
        handle = lib.bpf_object__find_map_by_name(self._obj, name.encode())
        if not handle:
            raise NotFoundError("no such map in the object", obj=f"{self.label}: {name}")
        return handle

    def _section(self, name: str) -> BtfType:
        return self._find(Kind.DATASEC, name, "the object has no such data section")

    def _find(self, kind: Kind, name: str, missing: str) -> BtfType:
        found = self.btf.find(kind, name)
        if found is None:
            raise NotFoundError(missing, obj=f"{self.label}: {name}")
        return found

    def _variable(self, section: BtfType, name: str) -> tuple[int, int, bool]:
        """``(offset, size, signed)`` of integer variable ``name`` in a DATASEC."""
        for var_id, offset, size in section.entries:
            var = self.btf[var_id]
            if var.name != name:
                continue
            target = self.btf[self.btf.resolve(var_id)]
            if target.kind not in (Kind.INT, Kind.ENUM):
                raise InputError(f"not an integer ({self.btf.name_of(var.type)})",
                                 obj=f"{self.label}: {name}")
            signed = target.kind == Kind.INT and bool(target.encoding & 1)
            return offset, size, signed
        known = ", ".join(self.btf[v].name for v, _, _ in section.entries)
        raise InputError(f"no such variable in {section.name} (it has: {known})",
                         obj=f"{self.label}: {name}")


_LOAD_LOG = re.compile(r"prog '([^']+)': -- BEGIN PROG LOAD LOG --\n(.*?)-- END PROG LOAD LOG --",
                       re.S)


def _verifier_verdict(log: str) -> tuple[str, str] | None:
    """``(program, last verifier line before its statistics)`` from libbpf's log, if any."""
    found = _LOAD_LOG.search(log)
    if not found:
        return None
    lines = [line for line in found.group(2).splitlines() if line.strip()]
    while lines and lines[-1].startswith(("processed ", "verification time", "stack depth")):
        lines.pop()
    return (found.group(1), lines[-1]) if lines else None
