"""The two ends of a migration: FROM, a map or a file of records, and TO, a map.

A map is read whole with the batch cursor (:func:`bpfbatch.map.cursor.read_all`) — again at
every catch-up pass. A file is read once, the way ``load`` reads it
(:func:`bpfbatch.formats.read.read_records`: JSONL, JSON, CSV, bpftool JSON, Parquet, Arrow),
as records of the *source* layout: the types given for it (``--btf OBJ --key-type T
--value-type T``, the old program's object), else TO's own layout. Both ends expose their
layout trees (:func:`trees`), which the plan matches.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from .._sys.abi import MapType
from ..api import Map
from ..errors import InputError
from ..map import cursor
from ..map.handle import MapInfo
from ..records.codec import BtfCodec, PerCpuCodec, map_codecs
from ..records.decoding import view

__all__ = ["Source", "file_source", "map_source", "trees"]


@dataclasses.dataclass
class Source:
    """FROM: ``info`` describes its records (a map's, or a file's sizes and types); ``map``
    is set for a map, which can be read again (catch-up), ``path`` for a file, read in
    ``fmt`` (default: from its name) with the ``decode`` options it was dumped with."""

    label: str
    info: MapInfo
    map: Map | None = None
    path: str | None = None
    fmt: str | None = None
    decode: list[str] | None = None
    _records: object = None

    @property
    def live(self) -> bool:
        return self.map is not None

    def read(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """Every record: ``(keys, values)`` as ``count × size`` uint8 rows."""
        if self.map is not None:
            return cursor.read_all(self.map, batch_size=batch_size)
        from ..formats.read import read_records

        records = read_records(self.path, self.info, fmt=self.fmt,
                               codecs=view(self.info, self.decode))
        self._records = records
        n = records.count
        return (np.frombuffer(records.keys, np.uint8).reshape(n, self.info.key_size),
                np.frombuffer(records.values, np.uint8).reshape(n, self.info.value_stride))

    def where(self, row: int, key: bytes) -> str:
        """The record of ``row`` as a message names it: its key as ``dump`` prints it (a
        map), or ``file:line``."""
        if self._records is not None:
            return self._records.where(row)
        import json

        shown = view(self.info)[0].decode(key)
        text = key.hex() if isinstance(shown, bytes) else json.dumps(shown, separators=(",", ":"))
        return f"{self.label} key {text}"


def map_source(m: Map) -> Source:
    return Source(m.info.label, m.info, map=m)


def file_source(path: str, target: MapInfo, key_type=None, value_type=None, btf=None, *,
                fmt: str | None = None, decode: list[str] | None = None,
                percpu: bool = False) -> Source:
    """FROM a file whose records have the layout ``key_type``/``value_type`` (of ``btf``:
    an object file), each side not given taking TO's (``target``); ``fmt`` and ``decode``
    as ``load`` takes them (the file as ``dump -o FMT --decode ...`` wrote it). ``percpu``:
    its values are per-CPU (a per-CPU map's dump, for ``--sum`` into a plain TO), one per
    possible CPU of this machine, as ``load`` reads them."""
    if path != "-" and not os.path.exists(path):
        raise InputError("no such file (FROM is a file, or a map: id N, pinned PATH, name "
                         "NAME)", obj=path)
    from ..records.typespec import GivenTypes, given_type, load_btf

    if btf is not None and key_type is None and value_type is None:
        raise InputError("names the types of --key-type/--value-type; give one of them",
                         obj="--btf")
    source = load_btf(btf) if isinstance(btf, str) else btf
    own = map_codecs(target)
    sides = {}
    for side, spec, codec in (("key", key_type, own[0]), ("value", value_type, own[1])):
        base = codec.base if isinstance(codec, PerCpuCodec) else codec
        if spec is not None:
            sides[side] = given_type(spec, None, f"{side}_type", btf=source)
        elif isinstance(base, BtfCodec):
            sides[side] = (_btf_of(target), base.type_id)
        else:
            sides[side] = None
    sizes = {side: (found[0].size_of(found[1]) if found else getattr(target, f"{side}_size"))
             for side, found in sides.items()}
    kind = _PER_CPU.get(target.type, target.type) if percpu else target.type
    info = dataclasses.replace(target, id=0, type=kind, name=os.path.basename(path),
                               key_size=sizes["key"],
                               value_size=sizes["value"],
                               types=GivenTypes(sides["key"], sides["value"]))
    return Source(path, info, path=path, fmt=fmt, decode=decode)


#: A plain map's per-CPU kind: what a per-CPU file FROM of a plain TO was dumped from.
_PER_CPU = {MapType.HASH: MapType.PERCPU_HASH, MapType.ARRAY: MapType.PERCPU_ARRAY,
            MapType.LRU_HASH: MapType.LRU_PERCPU_HASH}


def _btf_of(info: MapInfo):
    from ..btf import Btf

    return Btf.from_kernel(info.btf_id)


def trees(info: MapInfo, *, shown: bool = False):
    """``(key tree, value tree)`` of the records ``info`` describes, as stored (no display
    decoders): the layout trees of :mod:`bpfbatch.records.layout`, ``None`` for a side
    without BTF. ``shown``: as ``dump`` shows them (the map's view: ``__be32`` addresses,
    ``__be16`` ports decoded), whose encoders take the shown and the stored forms."""
    key, value = view(info) if shown else map_codecs(info)
    value = value.base if isinstance(value, PerCpuCodec) else value
    return tuple(c.node if isinstance(c, BtfCodec) else None for c in (key, value))
