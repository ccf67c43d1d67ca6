"""The value law over random layouts: whatever one surface prints, every other takes back to
the same bytes.

Random C layouts (``tools/layoutgen.py`` with the decoded types: ``__be16`` ports, ``__be32
*addr`` addresses, ``struct in6_addr``, ...), compiled into one object and filled with random
bytes, then brought to the state a load leaves (a ``char[N]``'s bytes after its string and a
NaN's payload are not printed, so no reader can bring them back). Then, per map, each pair of
surfaces from one view (the automatic decoders, ``decode="none"``) to the same or the default
view:

- ``dump -o FMT`` → ``load`` and → ``delete``, for jsonl, json, csv, bpftool-json, parquet and
  arrow (the columnar ones where the layout has columns);
- ``Map.items`` → ``Map.update_items`` and ``Map.delete_keys``;
- a single element as the per-element commands print it (``lookup``) → as they parse it
  (``update``);
- ``bpftool -j map dump`` in a ``.json`` file → ``load`` and ``delete``.

A number of a byte-order field (``be16``: ``443``) is its display value, so a ``--decode
none`` text dump of a layout with one loads back with ``--decode none`` (checked), not with
the default view; every other field reads either way (checked too).
"""

from __future__ import annotations

import io
import json
import random
import shutil
import subprocess

import pytest

from bpfbatch.errors import InputError
from bpfbatch.map import whole, writes
from bpfbatch.map.cursor import BatchCursor
from bpfbatch.formats import pipeline
from bpfbatch.records.decoding import Decoded, view
from bpfbatch.records.layout import LeafKind, leaf_columns, leaf_kind
from bpfbatch.formats.read import read_records
from tools import layoutgen

pytestmark = pytest.mark.skipif(not (shutil.which("bpftool") and shutil.which(layoutgen.CLANG)),
                                reason="needs bpftool and clang")

SEED = 20261201
COUNT = 60
TEXT = ("jsonl", "json", "csv", "bpftool-json")
COLUMNAR = ("parquet", "arrow")
VIEWS = (None, "none")
SUFFIX = {"jsonl": "jsonl", "json": "json", "csv": "csv", "bpftool-json": "json",
          "parquet": "parquet", "arrow": "arrow"}


def raw(m) -> list[tuple[bytes, bytes]]:
    """Every element's key and value bytes, sorted (a reload reverses each hash bucket)."""
    ks, vs = m.info.key_size, m.info.value_stride
    out = []
    for batch in BatchCursor(m, batch_size=64):
        keys, values = bytes(batch.keys), bytes(batch.values)
        out += [(keys[i * ks:(i + 1) * ks], values[i * vs:(i + 1) * vs])
                for i in range(batch.count)]
    return sorted(out)


def restore(m, entries) -> None:
    whole.clear(m)
    whole.load(m, b"".join(k for k, _ in entries), b"".join(v for _, v in entries),
               len(entries))


def render(m, fmt: str, decode, btf) -> bytes:
    out = io.BytesIO()
    pipeline.run(BatchCursor(m, batch_size=4),
                 pipeline.Output(fmt, m.info, out, btf=btf, decode=decode))
    return out.getvalue()


def by_number(m, btf=None) -> bool:
    """Whether a field of the map's default view is a byte-order kind (its numbers are display
    values: ambiguous with the stored ones)."""
    codecs = view(m.info, btf=btf)
    return any(isinstance(leaf, Decoded) and leaf.decoder.numeric
               for side, codec in zip(("key", "value"), codecs)
               for leaf in _leaves(getattr(codec, "base", codec), side))


def _leaves(codec, side):
    node = getattr(codec, "node", None)
    if node is None:
        return []
    found = []
    for _, leaf in leaf_columns(node, side):
        found.append(leaf)
        if leaf_kind(leaf) is LeafKind.ARRAY:
            found += list(leaf.elems)
    return found


class Law:
    """The compiled maps, each in its loaded state, and the failures found. ``btf``: the
    maps' kernel BTF, read once (its parse costs more than a map's render or read)."""

    def __init__(self, obj, names, tmp):
        self.obj, self.names, self.tmp = obj, names, tmp
        self.maps = {name: obj.map(name) for name in names}
        self.btf = layoutgen.kernel_btf(list(self.maps.values()))
        self.before = {}
        for name, m in self.maps.items():
            records = self.read(m, render(m, "jsonl", "none", self.btf), "jsonl", "none")
            whole.clear(m)
            whole.load(m, records.keys, records.values, records.count)
            self.before[name] = raw(m)

    def read(self, m, data: bytes, fmt: str, decode, with_values=True, given=True):
        path = self.tmp / f"{m.info.name}.{SUFFIX[fmt]}"
        path.write_bytes(data)
        return read_records(str(path), m.info, fmt=fmt if given else None,
                            with_values=with_values, codecs=view(m.info, decode, btf=self.btf))

    def load_back(self, m, data: bytes, fmt: str, decode, given=True) -> str | None:
        """What differs after a load of ``data`` into the emptied map, or ``None``."""
        try:
            records = self.read(m, data, fmt, decode, given=given)
        except InputError as exc:
            return str(exc)
        whole.clear(m)
        whole.load(m, records.keys, records.values, records.count)
        after = raw(m)
        restore(m, self.before[m.info.name])
        return None if after == self.before[m.info.name] else "other bytes"

    def delete_back(self, m, data: bytes, fmt: str, decode, given=True) -> str | None:
        """What is left after a delete of ``data``'s keys, or ``None``."""
        if "array" in m.info.type_name:
            return None  # elements always exist
        try:
            records = self.read(m, data, fmt, decode, with_values=False, given=given)
        except InputError as exc:
            return str(exc)
        writes.delete(m, records.keys, records.count)
        left = raw(m)
        restore(m, self.before[m.info.name])
        return None if not left else f"{len(left)} left"


@pytest.fixture(scope="module")
def law(tmp_path_factory):
    source = layoutgen.generate(SEED, COUNT, layoutgen.Features(decoded=True))
    with layoutgen.build(source, tmp_path_factory.mktemp("law")) as obj:
        names = layoutgen.map_names(obj)
        rng = random.Random(SEED)
        for name in names:
            layoutgen.fill(obj.map(name), obj.btf, rng)
        yield Law(obj, names, tmp_path_factory.mktemp("law-files"))


def test_the_layouts_have_decoded_fields(law):
    decoded = [n for n, m in law.maps.items() if view(m.info) != view(m.info, "none")
               and any(isinstance(leaf, Decoded) for side, c in zip(("key", "value"),
                                                                    view(m.info))
                       for leaf in _leaves(getattr(c, "base", c), side))]
    assert len(decoded) >= COUNT // 2
    assert sum(map(by_number, law.maps.values())) >= 10
    assert sum(not by_number(m) for m in law.maps.values()) >= 10


@pytest.mark.parametrize("fmt", TEXT + COLUMNAR)
@pytest.mark.parametrize("decode", VIEWS, ids=["auto", "none"])
def test_dump_loads_and_deletes_back(law, fmt, decode):
    bad, covered = [], 0
    for name, m in law.maps.items():
        try:
            data = render(m, fmt, decode if fmt != "bpftool-json" else None, law.btf)
        except InputError:
            assert fmt in COLUMNAR  # a layout without Arrow columns, or non-ASCII text
            continue
        covered += 1
        # The same view reads it back; the default one too but for byte-order numbers.
        views = [decode] + ([None] if decode == "none" and (
            fmt in COLUMNAR or not by_number(m, law.btf)) else [])
        for reader in views:
            for surface, check in (("load", law.load_back), ("delete", law.delete_back)):
                problem = check(m, data, fmt, reader)
                if problem:
                    bad.append(f"{name} {surface} --decode {reader}: {problem}")
    assert bad == []
    assert covered >= (5 if fmt in COLUMNAR else COUNT)


@pytest.mark.parametrize("decode", VIEWS, ids=["auto", "none"])
def test_items_update_and_delete_back(law, decode):
    bad = []
    for name, m in law.maps.items():
        items = list(m.items(decode=decode))
        whole.clear(m)
        m.update_items(items, decode=decode)
        if raw(m) != law.before[name]:
            bad.append(f"{name} update_items")
        if "array" not in m.info.type_name:
            m.delete_keys([k for k, _ in items], decode=decode)
            if raw(m):
                bad.append(f"{name} delete_keys")
        restore(m, law.before[name])
    assert bad == []


@pytest.mark.parametrize("decode", VIEWS, ids=["auto", "none"])
def test_an_element_printed_parses_back(law, decode):
    """``lookup`` prints an element through the view's codecs as JSON, ``update`` parses
    the JSON it is given through the same codecs."""
    bad = []
    for name, m in law.maps.items():
        key_codec, value_codec = view(m.info, decode, btf=law.btf)
        for key, value in law.before[name]:
            printed = json.dumps({"key": key_codec.decode(key), "value": value_codec.decode(value)})
            parsed = json.loads(printed)
            if (key_codec.encode(parsed["key"], "KEY"), value_codec.encode(parsed["value"],
                                                                           "VALUE")) \
                    != (key, value):
                bad.append(name)
                break
    assert bad == []


def test_bpftools_dump_in_a_json_file_loads_and_deletes_back(law):
    bad = []
    for name, m in law.maps.items():
        data = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m.info.id)],
                              check=True, capture_output=True).stdout
        for surface, check in (("load", law.load_back), ("delete", law.delete_back)):
            problem = check(m, data, "json", None, given=False)  # read from the content
            if problem:
                bad.append(f"{name} {surface}: {problem}")
    assert bad == []
