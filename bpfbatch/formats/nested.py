"""Maps of maps, recursively: each outer entry with its inner map's elements
(``dump --recursive``, ``count --recursive``).

bpftool prints an ``array_of_maps`` or ``hash_of_maps`` entry with the inner map's id as its
value bytes and nothing of what that map holds. Here each outer entry is printed as ``dump``
prints it in the chosen format, with the inner map's whole dump nested under it:

- ``bpftool-json``: bpftool's outer entry, byte for byte, with ``"inner":`` and what
  ``bpftool -j map dump id INNER`` prints for the inner map, byte for byte (its newline
  left out) before the entry's closing brace:
  ``[{"key":[…],"value":[…],"inner":[{"key":[…],"value":[…],"formatted":{…}}]}]``;
- ``json`` / ``jsonl``: the outer entry as ``dump -o json`` prints it, then ``"inner_id":``
  and ``"inner":`` the inner map's elements as ``dump -o json`` prints them, typed from the
  *inner* map's BTF; one outer entry per line (an array of them for ``json``).

An inner map freed between the outer lookup and its opening shows ``"inner":{"error":…}``, as
bpftool shows an element it cannot read. The kernel does not nest maps of maps deeper than one
level, so neither does this. Like every dump, not a snapshot: the outer map and each inner map
are read one after the other.
"""

from __future__ import annotations

import errno
import io
import json
import os

from .. import interrupts
from ..errors import NotFoundError
from ..interrupts import Tally
from ..map import cursor
from ..map.handle import MapHandle
from ..records.columns import batch_rows
from ..records.codec import map_codecs
from .pipeline import Output, run
from .render import make_renderer

#: The formats ``dump --recursive`` writes.
FORMATS = ("json", "jsonl", "bpftool-json")


def inner_id(value: bytes) -> int:
    """The inner map's id in a map of maps' value (the kernel returns ids, not fds)."""
    return int.from_bytes(value[:4], "little")


def dump(outer: MapHandle, fmt: str, out, *, batch_size: int = cursor.DEFAULT_BATCH,
         decode: list[str] | None = None, tally: Tally | None = None) -> int:
    """Write ``outer``'s entries, each with its inner map's dump, in ``fmt`` (one of
    :data:`FORMATS`) to the binary stream ``out``; returns how many outer entries.
    ``decode`` applies to the inner maps' elements (``json``/``jsonl``); ``tally`` counts
    the outer entries written, each with the write that wrote it."""
    entry = _entry_template(fmt, outer.info)
    head, sep, end = _FRAMES[fmt]
    written = 0
    for batch in cursor.BatchCursor(outer, batch_size=batch_size):
        keys = batch_rows(batch.keys, batch.count, outer.info.key_size, small=True)
        values = batch_rows(batch.values, batch.count, 4, small=True)
        for i in range(batch.count):
            text = entry.render_joined([keys[i:i + 1], values[i:i + 1]], b"")[:-1]  # no "}"
            map_id = inner_id(values[i:i + 1].tobytes())
            if fmt != "bpftool-json":
                text += b',"inner_id":%d' % map_id
            whole = ((sep if written else head) + text + b',"inner":'
                     + _inner_text(map_id, fmt, decode) + b"}" + (b"\n" if fmt == "jsonl"
                                                                     else b""))
            with interrupts.deferred():
                out.write(whole)
                written += 1
                if tally is not None:
                    tally.add(1)
    out.write(end if written else _EMPTY[fmt])
    out.flush()
    return written


#: How a format frames its entries: what precedes the first, what separates them, what ends
#: them; and what an empty dump prints (as ``dump`` prints them).
_FRAMES = {"json": (b"[\n", b",\n", b"\n]\n"), "jsonl": (b"", b"", b""),
           "bpftool-json": (b"[", b",", b"]\n")}
_EMPTY = {"json": b"[]\n", "jsonl": b"", "bpftool-json": b"[]\n"}


def count(outer: MapHandle, *, batch_size: int = cursor.DEFAULT_BATCH) -> int:
    """How many elements ``outer``'s inner maps hold in all (one batched pass each; an inner
    map freed meanwhile counts nothing)."""
    total = 0
    for batch in cursor.BatchCursor(outer, batch_size=batch_size):
        values = batch.values.tobytes()
        for i in range(batch.count):
            try:
                inner = MapHandle.open_id(inner_id(values[4 * i:4 * i + 4]), read_only=True)
                with inner:
                    total += sum(b.count for b in cursor.BatchCursor(inner, batch_size=batch_size))
            except NotFoundError:
                continue
    return total


def _entry_template(fmt: str, info):
    """The template of one outer entry as ``dump -o FMT`` writes it."""
    return make_renderer(fmt, info, *map_codecs(info), None).template


def _inner_text(map_id: int, fmt: str, decode: list[str] | None) -> bytes:
    """The inner map's whole dump in ``fmt`` (``json`` for jsonl), on one line."""
    try:
        inner = MapHandle.open_id(map_id, read_only=True)
    except NotFoundError:
        return b'{"error":%s}' % json.dumps(os.strerror(errno.ENOENT)).encode()
    buffer = io.BytesIO()
    with inner:
        whole = "bpftool-json" if fmt == "bpftool-json" else "json"
        output = Output(whole, inner.info, buffer, decode=None if whole == "bpftool-json"
                        else decode or [])
        run(cursor.BatchCursor(inner, lookup_errors=whole == "bpftool-json"), output)
    text = buffer.getvalue()
    # bpftool's text is one line; the typed array's line breaks are only between elements
    return text[:-1] if whole == "bpftool-json" else text.replace(b"\n", b"")
