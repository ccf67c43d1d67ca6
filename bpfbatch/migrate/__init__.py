"""Upgrade without losing state: a map's records moved into a map of a new layout, by field name.

``bpfbatch.migrate(src, dst, ...)`` (and ``bpfbatch migrate FROM TO``) matches the two
layouts' fields by name from their BTF (:mod:`.plan`), converts every record with numpy over
whole batches (:mod:`.convert`), copies FROM into TO and catches up with what changed in FROM
meanwhile (:mod:`.copy`), and can rename TO's pin over FROM's path (:mod:`.pin`). FROM may
be a file of records instead (:mod:`.source`). One module per job; this one puts them
together and is the API.

The package is callable — ``bpfbatch.migrate(src, dst)`` is :func:`migrate` — because the
command's package and the API share their name: the module's class is swapped for one with
``__call__`` (a module may set its ``__class__``, Python ≥ 3.5).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import types

from .. import interrupts
from .._sys.abi import ELEMENTS_ALWAYS_EXIST
from ..errors import InputError
from ..map import cursor
from ..map.handle import DEFAULT_BATCH
from . import pin
from .copy import Copier, Counts, Sides
from .convert import Layout
from .plan import Field, SidePlan, describe, find_field, side_plan
from .source import Source, file_source, map_source, trees

__all__ = ["Result", "migrate", "prepare"]


@dataclasses.dataclass
class Result:
    """What :func:`migrate` planned and did: ``plan`` as ``--plan`` prints it, ``fields``
    one per target field (where from, by which rule), ``removed`` the source fields nothing
    takes, ``counts`` (:class:`~.copy.Counts`; all zero for a plan only)."""

    plan: str
    fields: list[Field]
    removed: list[str]
    counts: Counts


def migrate(src, dst, *, plan_only: bool = False, rename=(), set=(), sum: bool = False,
            catch_up: int = 0, swap_pin: str | None = None, dst_pin: str | None = None,
            batch_size: int = DEFAULT_BATCH, src_types: dict | None = None,
            fmt: str | None = None, decode=None, counts: Counts | None = None) -> Result:
    """Move ``src``'s records into ``dst`` (an open :class:`~bpfbatch.Map`), converted to its
    layout; returns the plan and the counts (:class:`Result`).

    ``src``: a Map, or the path of a file of records (JSONL, JSON, CSV, bpftool JSON,
    Parquet, Arrow) whose layout ``src_types`` gives (``{"btf": "old.bpf.o", "key_type":
    "struct k", "value_type": "struct v"}``; each side not given is ``dst``'s), in format
    ``fmt`` (default: from its name), written with the ``decode`` options (``["saddr=ipv4"]``,
    as ``dump``'s) — ``load``'s reading of a file.
    ``rename``: ``"OLD=NEW"`` strings or ``{OLD: NEW}`` (field paths as ``dump -o csv``
    names columns, ``value.first_seen_ns``; a bare name is a value field). ``set``:
    ``"FIELD=VALUE"`` or ``{FIELD: VALUE}`` (VALUE as ``dump -o jsonl`` prints it, or as
    stored: a ``__be32`` address as ``"10.0.0.1"`` or its number); other
    new fields are zero. ``sum``: a per-CPU ``src`` into a plain ``dst``, integers added up.
    ``catch_up``: after the copy, up to that many passes copying what changed in ``src``.
    ``swap_pin``: then rename ``dst``'s pin (``dst_pin``, where it is pinned; else it is
    pinned next to that path first) over that path, which must be ``src``'s pin (any map's
    when ``src`` is a file). ``plan_only``: compute, check and return the plan, reading
    and converting ``src`` as the copy would (so it meets every refusal the copy would), and
    write nothing. ``counts``: filled in as the migration goes (a caller that may stop it says
    from it what was done; else a new one, in the result).

    ``dst`` must be empty (no entry; for an array, every value zero), so that it ends up
    holding ``src``'s records and nothing else — after a failed or interrupted migration,
    clear it and run again. Refused before anything is written, ``--plan`` too: a ``dst``
    that is not empty or is ``src``, options that name no field, a ``swap_pin`` that is not
    ``src``'s pin; ``src`` holding more entries than ``dst``'s ``max_entries`` (or an index
    past an array's) is refused before the copy (or the pass) that would write them.

    Every record is converted before the first write: one that cannot be (a value that
    does not fit a narrower field, an enumerator the new enum lacks, a cut string) is an
    :class:`~bpfbatch.errors.InputError` naming its key, and nothing is written.
    """
    source = src if isinstance(src, Source) else \
        map_source(src) if not isinstance(src, str) else \
        file_source(src, dst.info, **(src_types or {}), fmt=fmt, decode=decode,
                    percpu=sum and not dst.info.percpu)
    sides, plans, sets = prepare(source, dst, rename=rename, set=set, sum=sum)
    if catch_up and not source.live:
        raise InputError("a file does not change: --catch-up needs FROM to be a map",
                         obj="--catch-up")
    if swap_pin is not None:
        pin.check(swap_pin, source.info.id if source.live else None)
    _empty(dst)
    counts = counts if counts is not None else Counts()
    counts.swap_pin = swap_pin
    result = Result(describe(plans, sets), [f for p in plans for f in p.fields],
                    [r for p in plans for r in p.removed], counts)
    copier = Copier(source, dst, sides, batch_size=batch_size, counts=counts)
    copier.first(write=not plan_only)
    if plan_only:
        return result
    if catch_up:
        copier.catch_up(catch_up)
    if swap_pin is not None:
        with interrupts.deferred():  # the swap and its mark: both, or neither
            pin.swap(dst, swap_pin, dst_pin)
            counts.swapped = True
            counts.window_ns = time.monotonic_ns() - counts.last_read_ns
    return result


def _empty(dst) -> None:
    """Refuse a TO that holds anything: its entries would mix with FROM's, and no catch-up
    pass could tell them apart (an array's elements always exist: then every value must be
    zero, as a new array's are)."""
    keys, values = cursor.read_all(dst)
    held = values.any(axis=1).sum() if dst.info.type in ELEMENTS_ALWAYS_EXIST else len(keys)
    if held:
        raise InputError(f"TO is not empty ({held} entr{'y' if held == 1 else 'ies'}"
                         f"{' not zero' if dst.info.type in ELEMENTS_ALWAYS_EXIST else ''}): "
                         "migrate fills an empty map, so that it holds FROM's records and "
                         "nothing else (clear it first: bpfbatch clear ...)", obj=dst.info.label)


def _pairs(given, option: str, what: str) -> dict[str, str]:
    """``OLD=NEW`` strings (or a dict) as a dict, each side a field path with its side; a
    string that is not ``what`` is an error naming ``option``."""
    items = given.items() if isinstance(given, dict) else [
        text.partition("=")[::2] if "=" in text else (text, None) for text in given]
    out = {}
    for name, value in items:
        if not name or value in (None, ""):
            raise InputError(f"expected {what}, got {name!r}", obj=option)
        out[_path(name)] = value
    return out


def _path(name: str) -> str:
    """A field path with its side: ``value.x``; a bare ``x`` is a value field."""
    name = name.strip()
    return name if name.split(".", 1)[0].split("[", 1)[0] in ("key", "value") else \
        f"value.{name}"


def prepare(source: Source, dst, *, rename=(), set=(), sum: bool = False
            ) -> tuple[Sides, list[SidePlan], dict[str, str]]:
    """The plan of moving ``source`` into ``dst``, checked: both sides' plans, layouts and
    templates, and the ``--set`` values by field."""
    src_info, dst_info = source.info, dst.info
    if source.live and src_info.id == dst_info.id:
        raise InputError("FROM and TO are the same map", obj=dst_info.label)
    if src_info.percpu and not dst_info.percpu and not sum:
        raise InputError(f"FROM is per-CPU, TO ({dst_info.label}) is not: --sum adds the CPUs' "
                         "values up", obj="--sum")
    if sum and not (src_info.percpu and not dst_info.percpu):
        raise InputError("only sums a per-CPU FROM into a plain TO", obj="--sum")
    if dst_info.percpu and not src_info.percpu:
        raise InputError("FROM is not per-CPU: no rule says which CPU of TO gets its value",
                         obj=dst_info.label)
    renames = {new: old for old, new in ((_path(o), _path(n))
                                         for o, n in _pairs(rename, "--rename", "OLD=NEW").items())}
    sets = _pairs(set, "--set", "FIELD=VALUE")
    src_trees, dst_trees = trees(src_info), trees(dst_info)
    for new, old in renames.items():
        side = ("key", "value").index(old.split(".", 1)[0].split("[", 1)[0])
        if find_field(src_trees[side], old, old.split(".", 1)[0]) is None:
            raise InputError(f"FROM has no field {old}", obj=f"--rename {old}={new}")
    plans = [side_plan(side, dst_tree, src_tree, renames=renames, sets=set_paths,
                       summed=sum and side == "value")
             for side, dst_tree, src_tree, set_paths in
             (("key", dst_trees[0], src_trees[0], sets.keys()),
              ("value", dst_trees[1], src_trees[1], sets.keys()))]
    unused = [new for new in renames if not any(new in p.renamed for p in plans)]
    if unused:
        raise InputError(f"TO has no field {unused[0]}", obj=f"--rename {renames[unused[0]]}="
                         f"{unused[0]}")
    shown = trees(dst_info, shown=True)  # --set takes a value as dump shows it, or as stored
    templates = tuple(_template(tree, info_size, side, sets)
                      for tree, info_size, side in ((shown[0], dst_info.key_size, "key"),
                                                    (shown[1], dst_info.value_size, "value")))
    layouts = (Layout(src_info.key_size), Layout(dst_info.key_size),
               _value_layout(src_info), _value_layout(dst_info))
    return Sides(plans[0], plans[1], layouts, templates, sum), plans, sets


def _value_layout(info) -> Layout:
    if not info.percpu:
        return Layout(info.value_size)
    return Layout(info.value_size, info.value_stride // info.cpu_stride, info.cpu_stride)


def _template(tree, size: int, side: str, sets: dict[str, str]) -> bytes:
    """A record of ``size`` zero bytes with the ``--set`` values of ``side`` written in."""
    from ..records.encode import encoder

    buf = bytearray(size)
    for path, text in sets.items():
        if path.split(".", 1)[0] != side:
            continue
        node = find_field(tree, path, side)
        if node is None:
            raise InputError(f"TO has no field {path}", obj=f"--set {path}={text}")
        value = text
        if isinstance(text, str):
            try:
                value = json.loads(text)
            except ValueError:
                pass  # a word that is not JSON is a string, as lookup's words
        encoder(node)(buf, value, f"--set {path}")
    return bytes(buf)


class _CallableModule(types.ModuleType):
    """This package, callable as :func:`migrate` (see the module's docstring)."""

    def __call__(self, src, dst, **options) -> Result:
        return migrate(src, dst, **options)


sys.modules[__name__].__class__ = _CallableModule
