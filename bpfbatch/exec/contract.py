"""The constants of the map exec contract (``progs/map_exec.h``), read from an object's BTF.

``map_exec.h`` keeps its limits and codes in enums, and ``bpfbatch_filter.h`` makes every
object built on it carry them in its BTF (``struct map_exec_enums``). Python reads the values
the program was compiled with instead of retyping them, so the two cannot drift: what is
matched here is the enumerators' names, and a missing one is a clear error, not a wrong code.
"""

from __future__ import annotations

import dataclasses
import functools

from ..btf import Btf, Kind
from ..errors import InputError

#: The predicate language's operators → their ``enum map_exec_op`` enumerators.
OP_NAMES = {"==": "MAP_EXEC_EQ", "!=": "MAP_EXEC_NE", "<": "MAP_EXEC_LT",
            "<=": "MAP_EXEC_LE", ">": "MAP_EXEC_GT", ">=": "MAP_EXEC_GE"}
#: Exec's actions → their ``enum map_exec_action`` enumerators.
ACTION_NAMES = {"count": "MAP_EXEC_COUNT", "dump": "MAP_EXEC_DUMP", "delete": "MAP_EXEC_DELETE"}


@dataclasses.dataclass(frozen=True)
class Contract:
    """What the runner needs of ``map_exec.h``: the program's limits, and the codes of the
    parameter table (``op``, ``action``) and of ``stopped``."""

    max_terms: int
    max_cpus: int
    max_key_size: int
    max_value_size: int
    ops: dict[str, int]
    actions: dict[str, int]
    out_full: int
    limit: int
    put_back_failed: int
    resume_lost: int


def read_contract(btf: Btf, label: str) -> Contract:
    """The contract as compiled into the object ``label`` whose BTF is ``btf``; an
    :class:`InputError` naming the object when it was not built on ``bpfbatch_filter.h``."""

    def enumerators(enum: str) -> dict[str, int]:
        found = btf.find(Kind.ENUM, enum)
        if found is None:
            raise InputError(f"not built on bpfbatch_filter.h: the object lacks enum {enum} in "
                             "its BTF (rebuild it with clang -g against the installed header)",
                             obj=label)
        return dict(found.values)

    def pick(enum: str, names: dict[str, str]) -> dict[str, int]:
        values = enumerators(enum)
        missing = [name for name in names.values() if name not in values]
        if missing:
            raise InputError(f"enum {enum} has no {missing[0]}: built on another "
                             "bpfbatch_filter.h (rebuild it against the installed header)",
                             obj=label)
        return {key: values[name] for key, name in names.items()}

    limits = pick("map_exec_limit", {name: f"MAP_EXEC_{name.upper()}" for name in
                                     ("max_terms", "max_cpus", "max_key_size", "max_value_size")})
    return Contract(**limits, ops=pick("map_exec_op", OP_NAMES),
                    actions=pick("map_exec_action", ACTION_NAMES),
                    **pick("map_exec_stop", {"out_full": "MAP_EXEC_OUT_FULL",
                                             "limit": "MAP_EXEC_LIMIT",
                                             "put_back_failed": "MAP_EXEC_PUT_BACK_FAILED",
                                             "resume_lost": "MAP_EXEC_RESUME_LOST"}))


@functools.cache
def package_contract() -> Contract:
    """The contract of the package's own ``map_exec`` object (opened, not loaded: no
    privileges needed)."""
    from ..loader import BpfObject

    with BpfObject.package("map_exec") as obj:
        return read_contract(obj.btf, obj.label)
