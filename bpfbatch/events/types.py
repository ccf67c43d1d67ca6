"""The type of an event map's records, named by the user, and the view that prints them.

An event map (ring buffer, perf event array) has no key and no value type: its records are
whatever its programs write. ``--type 'struct event'`` names the type; it is looked up in
``--btf FILE.o`` when given, else in the BTF of the programs that use the map (the kernel
lists every program's map ids, and each program's BTF id), and a C base type (``u64``,
``char[16]``) needs no BTF at all.

The records are then shown through the one value model (:func:`event_info` makes the map
look like a keyless map whose value is that type, as a queue's elements are), so ``record``
prints what ``dump``/``drain`` print for such values, with the same decoders and formats.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re

from ..btf import Btf
from ..errors import BpfBatchError, InputError, NotFoundError

_NEEDS_BTF = re.compile(r"^\s*(struct|union|enum)\s")


def event_type(info, spec: str, btf_file: str | None = None) -> tuple[Btf, int]:
    """``(Btf, type_id)`` of ``spec`` for the event map ``info`` (see the module)."""
    from ..records.typespec import given_type, load_btf

    if btf_file is not None:
        return given_type(spec, None, "--type", btf=load_btf(btf_file))
    if not _NEEDS_BTF.match(spec):
        try:
            return given_type(spec, None, "--type")
        except InputError:
            pass  # a typedef's name: look in the programs' BTF
    searched = []
    for name, btf in _program_btfs(info.id):
        searched.append(name)
        try:
            return given_type(spec, None, "--type", btf=btf)
        except InputError:
            continue
    if not searched:
        raise NotFoundError(f"no program with BTF uses the map, so '{spec}' cannot be looked "
                            "up: give --btf FILE.o", obj=info.label)
    raise NotFoundError(f"no '{spec}' in the BTF of the programs using the map "
                        f"({', '.join(searched)}): give --btf FILE.o", obj=info.label)


def _program_btfs(map_id: int):
    """``(program name, Btf)`` of each program using map ``map_id`` that has BTF."""
    from .._sys import abi, libbpf
    from ..map.inventory import map_programs

    seen = set()
    for prog in map_programs().get(map_id, []):
        try:
            fd = libbpf.prog_fd_by_id(prog.id)
        except BpfBatchError as exc:
            if exc.errno == errno.ENOENT:  # gone meanwhile
                continue
            raise
        try:
            info = abi.BpfProgInfo()
            libbpf.obj_info(fd, info, f"program id {prog.id}")
        finally:
            os.close(fd)
        if info.btf_id and info.btf_id not in seen:
            seen.add(info.btf_id)
            yield prog.name, Btf.from_kernel(info.btf_id)


def event_info(info, record_type: tuple[Btf, int] | None, size: int | None):
    """``info`` (the event map's) as the value model sees its records: no key, a value of
    ``record_type`` (its size), or raw ``size``-byte values when no type is given."""
    from ..records.typespec import GivenTypes

    if record_type is not None:
        btf, type_id = record_type
        return dataclasses.replace(info, key_size=0, value_size=btf.size_of(type_id),
                                   btf_id=0, btf_key_type_id=0, btf_value_type_id=0,
                                   types=GivenTypes(value=record_type))
    return dataclasses.replace(info, key_size=0, value_size=size, btf_id=0,
                               btf_key_type_id=0, btf_value_type_id=0, types=None)
