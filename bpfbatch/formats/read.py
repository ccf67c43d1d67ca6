"""Reading map records from files: JSONL, JSON, CSV and bpftool JSON in, packed key and value
buffers out, ready for one batch write.

The whole input is parsed and encoded before anything touches the map, so bad input changes
nothing; every error names ``file:line`` (and the field, from the codec). The accepted shapes
are what :mod:`bpfbatch.formats.render` prints, so a dump loads back unchanged:

- ``jsonl``: one ``{"key": K, "value": V}`` per line (per-CPU maps: ``"values": [{"cpu": 0,
  "value": V}, …]``, or one ``"value"`` for every CPU); ``K``/``V`` typed from the map's BTF,
  raw bytes (``["0x01", …]`` or a hex string) when it has none.
- ``json``: a JSON array of the same objects.
- ``csv``: a header of ``key``/``key.field`` … ``value``/``value.field`` columns (``cpu`` and
  one row per CPU for per-CPU maps); each cell is read by the type of its field, as the CSV
  renderer writes it (a ``char`` or ``char[N]`` is text even when it reads as a number,
  arrays are JSON); raw sides are hex strings.
- ``bpftool-json``: what ``bpftool -j map dump`` prints; its raw ``key``/``value`` byte lists
  are used (``formatted`` is ignored), so it loads into any map of the same sizes.
- ``parquet``, ``arrow`` (an IPC stream): the columns ``dump -o parquet|arrow`` writes (see
  :mod:`bpfbatch.formats.columnar`), written into the records column by column; an error
  names the column and the record, counted from 1 (``file:N``).

Records are parsed and encoded in chunks (JSONL: pieces of the file, so it is never held
whole), each side of a chunk with one :meth:`~bpfbatch.records.codec.Codec.encode_batch`; a chunk
with a bad record is redone record by record, which names the first one.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import gc
import io
import itertools
import json
import math
import operator
import os
import re
import stat
import sys
from array import array
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import BinaryIO

from .._numpy import np
from ..errors import InputError
from ..records.codec import BtfCodec, Codec, PerCpuCodec, RawCodec
from ..records.encode import overflows_double
from ..records.layout import LeafKind, Node, leaf_columns, leaf_kind
from .typedjson import RecordLines, TypedLines, record_lines, typed_lines

READ_FORMATS = ("jsonl", "json", "csv", "bpftool-json", "parquet", "arrow")
_BY_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv",
              ".parquet": "parquet", ".arrow": "arrow", ".arrows": "arrow"}
#: Columnar formats, read by :mod:`bpfbatch.formats.columnar` without a record in Python.
_COLUMNAR = ("parquet", "arrow")


class FormatError(InputError):
    """The input is not of the shape its format has (bad JSON, an unknown member or
    column, not Parquet): :func:`read_records` adds which format it read and how to choose
    another."""


class PerCpuGiven(InputError):
    """The input holds per-CPU values (``"values"``, a ``cpu`` column, per-CPU list columns)
    where the value codec is not per-CPU: the map is not, or its values are read as sums
    (``diff --sum`` reads such a file again as per-CPU values, to sum them)."""


@dataclasses.dataclass(frozen=True)
class Records:
    """``count`` records packed for the kernel, and where each came from. The buffers are
    writable: the batch write takes their addresses without copying them first."""

    source: str
    count: int
    keys: bytearray
    values: bytearray | None  # None when only keys were asked for
    line_of: Callable[[int], int]  # record index -> line in the source
    fmt: str  # the format it was read as

    def where(self, index: int) -> str:
        return f"{self.source}:{self.line_of(index)}"


def guess_format(path: str) -> str | None:
    """The format a file name's suffix says, or ``None`` (stdin, other names): then
    :func:`sniff_format` reads it from the content. The content has the last word between
    the JSON formats (:func:`read_records`): a ``.json`` file may hold bpftool's dump."""
    for suffix, fmt in _BY_SUFFIX.items():
        if path.endswith(suffix):
            return fmt
    return None


_BPFTOOL_UNSUPPORTED = "(unsupported-kind"
_BPFTOOL_KEY = re.compile(rb'\[\s*\{\s*"key"\s*:\s*\[\s*"0x')


def sniff_format(data: bytes) -> str:
    """The format of an input from its first bytes: a JSON array is ``bpftool-json`` when its
    first entry's key is bpftool's list of ``"0x.."`` bytes (what ``bpftool -j map dump``
    prints; those raw bytes load into any map of the sizes), else ``json``; an object per
    line is ``jsonl``; a first line naming ``key`` columns is ``csv``; anything else is read
    as ``jsonl``, whose error then names the line."""
    head = data[:4096].lstrip()
    if head.startswith(b"["):
        return "bpftool-json" if _BPFTOOL_KEY.match(head) else "json"
    if head.startswith(b"key") and b"," in head.split(b"\n", 1)[0] or head.startswith(b"key\n"):
        return "csv"
    return "jsonl"


def read_records(path: str, info, *, fmt: str | None = None, with_values: bool = True,
                 codecs: tuple[Codec, Codec] | None = None, data: bytes | None = None
                 ) -> Records:
    """Parse and encode every record of ``path`` (``-`` is stdin) for the map described by
    ``info``, with ``codecs`` (default: the map's view,
    :func:`~bpfbatch.records.decoding.view`). The format is ``fmt``, else the file name's (a
    text format's content decides between the JSON ones: bpftool's dump in a ``.json`` file
    reads as ``bpftool-json``), else the content's. Raises :class:`InputError` naming ``file:line`` on the first bad record; a
    record that leaves a struct field out is one unless the codecs were built with
    ``default_zero``; an input not of its format's shape says which format was read and
    that ``--format`` chooses. ``data``: the input's bytes, when the caller has read them
    (:func:`read_bytes`: a pipe that is to be parsed twice); ``path`` then only names it."""
    source = "<stdin>" if path == "-" else path
    how = "given"
    if fmt is None:
        fmt, how = guess_format(path), "from the file name"
        if fmt is None:
            if data is None:
                data = read_bytes(path, source)  # the format had to be read from them
            fmt, how = sniff_format(data), "from the content"
        elif fmt not in _COLUMNAR and fmt != "csv":
            sniffed = sniff_format(data[:_HEAD] if data is not None else _head(path, source))
            if sniffed in ("json", "bpftool-json") and sniffed != fmt:
                fmt, how = sniffed, "from the content"
    if fmt not in READ_FORMATS:
        raise InputError(f"unknown format '{fmt}' (use {', '.join(READ_FORMATS)})", obj="fmt")
    if codecs is None:
        from ..records.decoding import view

        codecs = view(info)
    try:
        return _read(path, source, data, fmt, info, with_values, codecs)
    except FormatError as exc:
        exc.message += (f" (read as {fmt}, {how}; --format chooses: "
                        f"{', '.join(READ_FORMATS)})")
        raise


#: How much of an input :func:`sniff_format` is given when the name said a text format.
_HEAD = 4096


def _head(path: str, source: str) -> bytes:
    """The first bytes of a regular file, enough for :func:`sniff_format` (nothing of
    another kind of file, which cannot be read twice)."""
    try:
        with open(path, "rb") as f:
            return f.read(_HEAD) if stat.S_ISREG(os.fstat(f.fileno()).st_mode) else b""
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", obj=source, errno=exc.errno) from None


def _read(path: str, source: str, data: bytes | None, fmt: str, info, with_values: bool,
          codecs: tuple[Codec, Codec]) -> Records:
    if fmt in _COLUMNAR:
        from .columnar import read_packed

        count, keys, values = read_packed(path, fmt, source, *codecs, data=data)
        return Records(source, count, keys, values if with_values else None,
                       lambda index: index + 1, fmt)  # records counted from 1
    # Read first: an unreadable file or bad UTF-8 is reported before anything else.
    if fmt == "jsonl":
        stream = _jsonl_stream(path, source, data)
    else:
        text = _decode(data if data is not None else read_bytes(path, source), 0, source)
    if fmt == "bpftool-json":
        key_codec, value_codec = _raw_codecs(info)
        # bpftool prints a type it cannot show (a float, in 7.1) as this bare token, which
        # is not JSON; it is only ever in "formatted", which is not read.
        text = text.replace(_BPFTOOL_UNSUPPORTED, "null")
    else:
        key_codec, value_codec = codecs
    encoder = _Encoder(key_codec, value_codec, with_values, source,
                       allowed={"key", "value", "values"} | (
                           {"formatted"} if fmt == "bpftool-json" else set()))
    lines = array("q")  # of each record, when the format tells them as it goes
    with _gc_paused():
        if fmt in ("json", "bpftool-json"):
            json_array = _JsonArray(text, source)
            chunks, line_of = json_array.chunks(), json_array.line_of
        else:
            chunks = (_csv_chunks(text, source, key_codec, value_codec) if fmt == "csv"
                      else _jsonl_chunks_of(stream, source,  # a delete's dump too
                                            typed_lines(key_codec, value_codec)))
            line_of = lines.__getitem__
        keys: list[bytes] = []
        values: list[bytes] = []
        count = 0
        # Closed when the loop is left by an error or a signal too, not when the generator is
        # collected: what it holds open (a file, the halves' child) goes with the load.
        with contextlib.closing(chunks):
            for numbers, entries in chunks:
                if numbers is None:  # a JSON array: lines are looked up on error only
                    def where(i, first=count):
                        return f"{source}:{line_of(first + i)}"
                else:
                    lines.extend(numbers)

                    def where(i, numbers=numbers):
                        return f"{source}:{numbers[i]}"
                if isinstance(entries, Packed):
                    chunk_keys, chunk_values = entries.keys, entries.values
                else:
                    chunk_keys, chunk_values = encoder.encode(entries, where, numbers is None)
                keys.append(chunk_keys)
                values.append(chunk_values)
                count += len(numbers) if isinstance(entries, Packed) else len(entries)
    return Records(source, count, bytearray().join(keys),
                   bytearray().join(values) if with_values else None,
                   line_of, fmt)


@contextlib.contextmanager
def _gc_paused():
    """Parsing allocates millions of short-lived dicts and lists that form no cycles; the
    cyclic collector's passes over them would double the time of a large load."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Encoder:
    """Entries of a chunk -> packed keys and values, one :meth:`Codec.encode_batch` per side.

    The reference is :meth:`entry`, one record at a time; a chunk in which anything fails is
    redone that way, so the error is the first failing record's, exactly as if every record
    had been encoded in order (a bad value in record 3 is reported before a bad key in
    record 5)."""

    def __init__(self, key_codec: Codec, value_codec: Codec, with_values: bool, source: str,
                 allowed: set[str]):
        self.key_codec, self.value_codec = key_codec, value_codec
        self.with_values, self.source, self.allowed = with_values, source, frozenset(allowed)
        self.percpu = isinstance(value_codec, PerCpuCodec)

    def encode(self, entries: list, where: Callable[[int], str],
               lazy_lines: bool) -> tuple[bytes, bytes | None]:
        """``where(i)``: ``file:line`` of entry ``i``; ``lazy_lines``: it is costly (a JSON
        array), so the record-by-record pass names the file only until a record fails."""
        try:
            packed = self._batch(entries)
        except Exception:  # noqa: BLE001 -- the record-by-record pass decides
            packed = None
        return packed or self._one_by_one(entries, where, lazy_lines)

    def _batch(self, entries: list) -> tuple[bytes, bytes | None] | None:
        """The chunk encoded side by side; ``None`` for entries of unusual shape. Its errors
        are not the ones reported (see the class), so they name nothing."""
        members = _members(entries, self.allowed)
        if members is None or "key" not in members:
            return None

        def unnamed(i: int) -> str:
            return self.source

        keys = self.key_codec.encode_batch(members["key"], unnamed)
        if not self.with_values:
            return keys, None
        if "values" in members:
            values = [_cpu_values(slots, self.value_codec, self.source)
                      for slots in members["values"]]
        else:
            values = members["value"]
        return keys, self.value_codec.encode_batch(values, unnamed)

    def _one_by_one(self, entries: list, where: Callable[[int], str],
                    lazy_lines: bool) -> tuple[bytes, bytes | None]:
        keys, values = [], []
        for i, entry in enumerate(entries):
            try:
                key, value = self.entry(entry, f"{self.source}:0" if lazy_lines else where(i))
            except InputError:
                if lazy_lines:
                    self.entry(entry, where(i))  # raises again, naming the line
                raise
            keys.append(key)
            values.append(value)
        return b"".join(keys), b"".join(values) if self.with_values else None

    def entry(self, entry, where: str) -> tuple[bytes, bytes | None]:
        """One record, checked and encoded."""
        keyless = self.key_codec.size == 0  # a queue, stack or bloom filter: values only
        if not isinstance(entry, dict) or ("key" not in entry and not keyless):
            raise FormatError('expected an object with a "key" member', obj=where)
        unknown = entry.keys() - self.allowed
        if unknown:
            raise FormatError(f"unknown member {sorted(unknown)[0]!r} (expected key, value"
                              f"{', values' if self.percpu else ''})", obj=where)
        key = b"" if keyless and "key" not in entry else \
            self.key_codec.encode(entry["key"], f"{where}: key")
        if not self.with_values:
            return key, None
        if "values" in entry:
            value = _cpu_values(entry["values"], self.value_codec, where)
            return key, self.value_codec.encode(value, f"{where}: values")
        if "value" not in entry:
            raise InputError('missing "value"', obj=where)
        return key, self.value_codec.encode(entry["value"], f"{where}: value")


def _members(entries: list, allowed: frozenset[str]) -> dict[str, list] | None:
    """Each member's column when every entry is a dict with the same allowed members (the
    usual input), else ``None``."""
    if not entries or type(entries[0]) is not dict:
        return None
    names = tuple(entries[0])
    if (not allowed.issuperset(names) or set(map(type, entries)) != {dict}
            or set(map(len, entries)) != {len(names)}):
        return None
    try:
        return {name: list(map(operator.itemgetter(name), entries)) for name in names}
    except KeyError:
        return None


def _cpu_values(slots, codec: Codec, where: str) -> list:
    """The values of a per-CPU entry's ``"values"``: ``[{"cpu": 0, "value": V}, ...]``."""
    if not isinstance(codec, PerCpuCodec):
        raise PerCpuGiven('"values" (per CPU) given for a map that is not per-CPU', obj=where)
    if not isinstance(slots, list) or len(slots) != codec.ncpus or not all(
            isinstance(s, dict) and s.get("cpu") == c and "value" in s
            for c, s in enumerate(slots)):
        raise InputError(f'"values" must list {{"cpu": N, "value": …}} for CPUs 0 to '
                         f"{codec.ncpus - 1} in order", obj=where)
    return [s["value"] for s in slots]


#: The most a pipe, a device or stdin may hand over: they have no size to check first, and
#: /dev/zero never ends. A larger input belongs in a regular file.
MAX_STREAM_BYTES = 1 << 28


def read_bytes(path: str, source: str) -> bytes:
    """The whole input: a regular file as it is, anything else (stdin, a pipe, a device) up
    to :data:`MAX_STREAM_BYTES`; a closed stdin or an unreadable file is an InputError."""
    try:
        if path == "-":
            stream = getattr(sys.stdin, "buffer", sys.stdin)
            if stream is None or stream.closed:
                raise InputError("stdin is closed: nothing to read", obj=source)
            return _bounded(stream, source)
        with open(path, "rb") as f:
            if stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return f.read()
            return _bounded(f, source)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", obj=source, errno=exc.errno) from None


def _bounded(stream, source: str) -> bytes:
    blocks, total = [], 0
    while block := stream.read(1 << 20):
        if isinstance(block, str):  # a text stream standing in for stdin (tests, notebooks)
            block = block.encode()
        total += len(block)
        if total > MAX_STREAM_BYTES:
            raise InputError(f"more than {MAX_STREAM_BYTES >> 20} MiB from a pipe or device: "
                             "write it to a file and name that file", obj=source)
        blocks.append(block)
    return b"".join(blocks)


def _jsonl_pieces(path: str, source: str, data: bytes | None = None) -> Iterator[bytes]:
    """The bytes of a JSONL input in pieces of about ``_JSONL_CHUNK`` bytes, each ending with
    a line break (see :func:`_jsonl_stream`)."""
    return _pieces(_jsonl_stream(path, source, data), source, close=True)


def _jsonl_stream(path: str, source: str, data: bytes | None = None) -> BinaryIO:
    """A JSONL input to read in pieces, so a regular file is never in memory whole: the
    file itself, or ``data``, when the input was already read, or a stream's bytes (bounded,
    see :func:`read_bytes`) in memory.

    Every byte is checked to be UTF-8 before this returns, so that error comes first, as
    when the text is read at once (ASCII input, the usual one, is UTF-8 without decoding
    it)."""
    try:
        if data is not None:
            stream = io.BytesIO(data)
        elif path == "-":
            stream = io.BytesIO(read_bytes(path, source))
        else:
            stream = open(path, "rb")  # noqa: SIM115 -- closed by the reader
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                with stream:
                    stream = io.BytesIO(_bounded(stream, source))
        if not all(block.isascii() for block in iter(lambda: stream.read(_JSONL_CHUNK), b"")):
            stream.seek(0)
            offset = 0
            for piece in _pieces(stream, source):  # cut at line breaks: never in a character
                _decode(piece, offset, source)
                offset += len(piece)
        stream.seek(0)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", obj=source, errno=exc.errno) from None
    return stream


def _pieces(data: BinaryIO, source: str, close: bool = False) -> Iterator[bytes]:
    """``data`` (anything with ``read(n)``) in pieces cut after a line break."""
    pending = []
    try:
        while block := data.read(_JSONL_CHUNK):
            cut = block.rfind(b"\n") + 1
            pending.append(memoryview(block)[:cut] if cut else block)
            if cut:
                yield b"".join(pending)
                pending = [block[cut:]]
        if any(pending):
            yield b"".join(pending)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", obj=source, errno=exc.errno) from None
    finally:
        if close:
            data.close()


def _decode(piece: bytes, offset: int, source: str) -> str:
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {offset + exc.start})", obj=source) from None


def _raw_codecs(info) -> tuple[Codec, Codec]:
    value: Codec = RawCodec(info.value_size)
    if info.percpu:
        from .._sys.libbpf import num_possible_cpus
        value = PerCpuCodec(value, num_possible_cpus())
    return RawCodec(info.key_size), value


# -- JSON ----------------------------------------------------------------------------------
# Layouts msgspec can type take the typed path first (:mod:`bpfbatch.formats.typedjson`:
# parse and shape check in C, no dict per record); this general parse reads the rest, and
# every block the typed path declines. orjson was left out: it reads integers beyond 64
# bits as floats.


#: Bytes of JSONL read, split into lines and parsed as one JSON array at a time: a parse per
#: chunk is about 40% faster than one per line (the decoder shares the key strings of all
#: its records), and memory stays bounded by the chunk rather than the file.
_JSONL_CHUNK = 1 << 19
#: Entries of other formats encoded together.
_CHUNK = 4096



@dataclasses.dataclass(frozen=True)
class Packed:
    """A chunk's records already encoded (by :mod:`~bpfbatch.formats.typedjson`)."""

    keys: bytes
    values: bytes


# (line of each entry, or None: ask line_of; entries, or the chunk already encoded)
Chunk = tuple[Sequence[int] | None, "list | Packed"]


def _jsonl_chunks(pieces: Iterator[bytes], source: str, typed: TypedLines | None = None,
                  first: int = 1) -> Generator[Chunk, None, int]:
    """Each piece's lines (UTF-8, see :func:`_jsonl_pieces`; the first is line ``first``)
    parsed exactly as ``json.loads`` of every line would (each line one JSON value, else an
    error naming it), but as one JSON array when that is the same; or, with ``typed``,
    encoded by it (:func:`typed_piece`) until the first piece it declines. Returns the
    number of the line after the last.

    Lines are split at ``\\n`` only: a JSON string may hold U+2028 and the like, which
    ``str.splitlines`` cuts at."""
    end = first  # line number of the next piece's first line
    for piece in pieces:
        start, lines = end, None
        if typed is not None:
            numbers, lines, end, packed = typed_piece(piece, start, typed)
            if packed is not None:
                yield numbers, packed
                continue
            typed = None  # the rest is likely of the same shape: not parsed twice
        if lines is None:
            numbers, lines, end = _nonblank_lines(piece.decode("utf-8"), start)
        parsed = _parse_joined(lines)
        if parsed is None:  # the per-line parse names the bad line
            parsed = [_decode_json(line, source, n) for n, line in zip(numbers, lines)]
        if parsed:
            yield numbers, parsed
    return end


def _jsonl_chunks_of(stream: BinaryIO, source: str, typed: TypedLines | None
                     ) -> Iterator[Chunk]:
    """The chunks of a JSONL input (see :func:`_jsonl_stream`): a large regular file with a
    typed layout in two halves at once (:mod:`~bpfbatch.formats.halves`), anything else
    piece after piece."""
    if typed is not None:
        from . import halves

        if halves.worth_splitting(stream):
            return halves.chunks(stream, source, typed)
    return _jsonl_chunks(_pieces(stream, source, close=True), source, typed)


def typed_piece(piece: bytes, first: int, typed: TypedLines
                ) -> tuple[Sequence[int], list[str] | None, int, Packed | None]:
    """``(line numbers, lines, next line number, packed)`` of a piece whose first line is
    ``first``, encoded by ``typed`` (see :mod:`~bpfbatch.formats.typedjson`): in one parse
    when the piece is one record a line and nothing else (then ``lines`` is ``None``: they
    were not split), else line by line; ``packed`` is ``None`` when it declines."""
    numbers, lines, end, block = typed_block(piece, first)
    if not (block or lines):
        return numbers, lines, end, Packed(b"", b"")
    packed = typed.encode(block or lines)
    return numbers, lines, end, None if packed is None else Packed(*packed)


def typed_block(piece: bytes, first: int
                ) -> tuple[Sequence[int], list[str] | None, int, RecordLines | None]:
    """``(line numbers, lines, next line number, block)`` of a piece whose first line is
    ``first``, as the typed parse takes it: one :class:`RecordLines` block when the piece is
    one record a line and nothing else (``lines`` then ``None``), else its non-blank lines
    (``block`` then ``None``)."""
    block = record_lines(piece)
    if block is None:
        return (*_nonblank_lines(piece.decode("utf-8"), first), None)
    return range(first, first + block.count), None, first + block.count, block


def _nonblank_lines(text: str, first: int) -> tuple[Sequence[int], list[str], int]:
    """``(line numbers, lines, next line number)`` of the lines of ``text`` (whose first is
    line ``first``) that are not blank."""
    lines = text.split("\n")
    if lines[-1] == "":  # the text's final line break ends its last line
        lines.pop()
    end = first + len(lines)
    numbers: Sequence[int] = range(first, end)
    if not all(map(str.strip, lines, itertools.repeat(_JSON_BLANKS))):  # drop blank lines
        numbers = [n for n, line in zip(numbers, lines) if line.strip(_JSON_BLANKS)]
        lines = [line for line in lines if line.strip(_JSON_BLANKS)]
    return numbers, lines, end


#: What ``json.loads`` skips around a value: a line of nothing else is blank.
_JSON_BLANKS = " \t\r"


def _parse_joined(lines: list[str]) -> list | None:
    """The value of each line, parsed as the array ``[line,\\n line,\\n …]``; ``None``
    unless that is exactly one value per line.

    Having as many values as lines is not enough: a record split over two lines and a line
    holding two values also make as many. What is enough is that every separating comma is
    one of the outer array (depth 1): then each line holds whole values, at least one, so
    exactly one. :func:`_outer_commas_only` checks that."""
    joined = "[" + ",\n".join(lines) + "]"
    try:
        parsed = _DECODER.decode(joined)
    except (ValueError, RecursionError):  # bad JSON, a too long integer, too deep nesting
        return None
    if len(parsed) != len(lines) or not _outer_commas_only(joined):
        return None
    return parsed


_STRUCTURE = b'"[]{}\n'
_NOT_STRUCTURE = bytes(set(range(256)) - set(_STRUCTURE))


@functools.cache
def _depth_steps() -> np.ndarray:
    """+1 for each opening bracket's code, -1 for each closing one's (built on first use:
    importing this module imports no numpy)."""
    steps = np.zeros(256, dtype=np.int32)
    steps[list(b"[{")] = 1
    steps[list(b"]}")] = -1
    return steps


def _outer_commas_only(joined: str) -> bool:
    """Whether every line break of ``joined``, a valid JSON array, is at depth 1.

    Valid JSON has no line break inside a string, and once escaped backslashes and quotes
    are dropped every ``"`` opens or closes one, so the brackets outside strings give the
    depth at each line break. Done in C-speed passes: ``bytes.translate`` keeps the quotes,
    brackets and line breaks, numpy counts them."""
    if "\\" in joined:
        joined = joined.replace("\\\\", "").replace('\\"', "")
    codes = np.frombuffer(joined.encode().translate(None, _NOT_STRUCTURE), dtype=np.uint8)
    outside = (np.cumsum(codes == ord('"'), dtype=np.int32) & 1) == 0
    depth = np.cumsum(_depth_steps()[codes] * outside, dtype=np.int32)
    return bool((depth[codes == ord("\n")] == 1).all())


def _json_float(text: str) -> float | str:
    """A JSON number with a fraction or exponent; one beyond a double's range (``1e400``)
    is kept as text, which the codec reports, instead of becoming infinity."""
    number = float(text)
    return text if math.isinf(number) else number


_DECODER = json.JSONDecoder(parse_float=_json_float)


def _decode_json(text: str, source: str, line: int | None = None):
    """The value of ``text``, which starts at ``line`` of ``source`` (``None``: the whole
    file); bad JSON is an :class:`InputError` naming its line."""
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"invalid JSON: {exc.msg} (column {exc.colno})",
                          obj=f"{source}:{(line or 1) + exc.lineno - 1}") from None
    except RecursionError:  # json's C scanner recurses per nesting level
        raise InputError("invalid JSON: nested deeper than the JSON reader allows (about "
                         f"{sys.getrecursionlimit()} levels)",
                         obj=source if line is None else f"{source}:{line}") from None
    except ValueError:  # int() refuses the digits (sys.get_int_max_str_digits); where is unsaid
        raise InputError(f"invalid JSON: an integer of more than {sys.get_int_max_str_digits()} "
                         "digits", obj=source if line is None else f"{source}:{line}") from None


class _JsonArray:
    """Elements of a top-level JSON array, each with the line it starts on; the line numbers
    are computed only when asked for (an error), by re-reading the text."""

    def __init__(self, text: str, source: str):
        self.text, self.source = text, source
        self.entries = _decode_json(text, source)
        if not isinstance(self.entries, list):
            raise FormatError("expected a JSON array of entries", obj=f"{source}:1")

    def chunks(self) -> Iterator[Chunk]:
        """The elements in chunks, without their lines (:meth:`line_of` finds them). They
        are handed over, not kept: :meth:`line_of` needs only the text."""
        entries, self.entries = self.entries, None
        for start in range(0, len(entries), _CHUNK):
            yield None, entries[start:start + _CHUNK]

    def line_of(self, index: int) -> int:
        """The line element ``index`` starts on (the text is known to be valid JSON)."""
        decoder = json.JSONDecoder()
        pos, line = _skip_space(self.text, self.text.index("[") + 1, 1)
        for _ in range(index):
            _, end = decoder.raw_decode(self.text, pos)
            line += self.text.count("\n", pos, end)
            pos, line = _skip_space(self.text, end, line)
            pos, line = _skip_space(self.text, pos + 1, line)  # the comma
        return line


def _skip_space(text: str, pos: int, line: int) -> tuple[int, int]:
    while pos < len(text) and text[pos] in " \t\r\n":
        line += text[pos] == "\n"
        pos += 1
    return pos, line


# -- CSV -----------------------------------------------------------------------------------


def _csv_chunks(text: str, source: str, key_codec: Codec, value_codec: Codec) -> Iterator[Chunk]:
    rows = _csv_entries(text, source, key_codec, value_codec)
    while chunk := list(itertools.islice(rows, _CHUNK)):
        numbers, entries = zip(*chunk)
        yield numbers, list(entries)


def _csv_entries(text: str, source: str, key_codec: Codec,
                 value_codec: Codec) -> Iterator[tuple[int, dict]]:
    """Rows → ``{"key": …, "value": …}``; per-CPU rows of one key (``cpu`` 0, 1, …) are
    gathered into ``"values"``."""
    reader = _CheckedRows(csv.reader(io.StringIO(text)), source)
    header = next(reader, None)
    if header is None:
        return
    for column in header:
        if column != "cpu" and column.split(".")[0] not in ("key", "value"):
            raise FormatError(f"unknown column {column!r} (expected key…, value…, cpu)",
                              obj=f"{source}:1")
    percpu = isinstance(value_codec, PerCpuCodec)
    if percpu and "cpu" not in header:
        raise InputError("a per-CPU map needs a 'cpu' column", obj=f"{source}:1")
    if not percpu and "cpu" in header:
        raise PerCpuGiven("'cpu' column given for a map that is not per-CPU", obj=f"{source}:1")
    parsers = _column_parsers(header, key_codec, value_codec, f"{source}:1")
    pending: tuple[int, object, list] | None = None  # per-CPU: (line, key, values so far)
    for row in reader:
        line = reader.line
        if not row:
            continue
        if len(row) != len(header):
            raise InputError(f"{len(row)} cells for {len(header)} columns", obj=f"{source}:{line}")
        record: dict = {}
        cpu = None
        for column, parse, cell in zip(header, parsers, row):
            if column == "cpu":
                cpu = _cpu_cell(cell, f"{source}:{line}")
                continue
            _assign(record, column.split("."), parse(cell))
        if not percpu:
            yield line, record
            continue
        if cpu == 0:
            if pending is not None:
                yield pending[0], {"key": pending[1], "values": pending[2]}
            pending = (line, record["key"], [])
        elif pending is None or cpu != len(pending[2]) or record["key"] != pending[1]:
            raise InputError(f"cpu {cpu} row does not follow cpu {cpu - 1} of the same key",
                             obj=f"{source}:{line}")
        pending[2].append({"cpu": cpu, "value": record["value"]})
    if pending is not None:
        yield pending[0], {"key": pending[1], "values": pending[2]}


class _CheckedRows:
    """A CSV reader whose errors (a cell beyond the field size limit, a stray quote) are
    InputErrors naming the line; ``line`` is the current row's last line."""

    def __init__(self, reader, source: str):
        self.reader, self.source = reader, source

    @property
    def line(self) -> int:
        return self.reader.line_num

    def __iter__(self):
        return self

    def __next__(self) -> list[str]:
        try:
            return next(self.reader)
        except csv.Error as exc:
            raise FormatError(f"bad CSV: {exc}",
                              obj=f"{self.source}:{self.reader.line_num}") from None


def _cpu_cell(cell: str, where: str) -> int:
    try:
        return int(cell)
    except ValueError:
        raise InputError(f"cpu must be a number, got {cell!r}", obj=where) from None


def _assign(record: dict, path: list[str], value) -> None:
    for name in path[:-1]:
        record = record.setdefault(name, {})
    record[path[-1]] = value


def _column_parsers(header: list[str], key_codec: Codec, value_codec: Codec,
                    where: str) -> list[Callable[[str], object]]:
    """How each column's cells are read: by the BTF node the CSV renderer flattened into that
    column (a raw side's cells stay hex text)."""
    from ..records.decoding import undecoded

    leaves, shown = {}, {}
    for side, codec in (("key", key_codec), ("value", value_codec)):
        base = codec.base if isinstance(codec, PerCpuCodec) else codec
        # A decoded field's column, or the columns of the field as stored (--decode none)
        shown[side] = list(dict(leaf_columns(base.node, side))) \
            if isinstance(base, BtfCodec) else None
        leaves[side] = {**dict(leaf_columns(undecoded(base.node), side)),
                        **dict(leaf_columns(base.node, side))} \
            if isinstance(base, BtfCodec) else None
    parsers = []
    for column in header:
        side = column.split(".")[0]
        if column == "cpu" or leaves[side] is None:
            parsers.append(str)
        elif column in leaves[side]:
            parsers.append(_cell_parser(leaves[side][column]))
        else:
            raise FormatError(f"unknown column {column!r} (the {side} has "
                              f"{', '.join(shown[side])})", obj=where)
    return parsers


def _cell_parser(node: Node) -> Callable[[str], object]:
    """The reader of a cell of ``node``: the inverse of the CSV renderer's cell. A cell that
    does not read as its type is passed on as text, for the codec to name the field."""
    kind = leaf_kind(node)
    if kind is LeafKind.TEXT:
        return functools.partial(_char_array_cell, len(node.elems))
    return _CELL_PARSERS.get(kind, _json_cell)  # arrays, data sections: JSON


def _char_array_cell(nelems: int, text: str):
    """A ``char[N]`` is text, shorter than N (a NUL ends it); or, when it is not printable
    text, the JSON list of its N characters, which is never that short."""
    return _json_cell(text) if len(text) >= nelems else text


def _int_cell(text: str):
    try:
        return int(text)
    except ValueError:
        return text


_BOOLS = {"true": True, "false": False, "1": 1, "0": 0}  # as JSON's true, false, 1, 0


def _bool_cell(text: str):
    return _BOOLS.get(text, text)


def _float_cell(text: str):
    """The number as JSON reads it: an integer, a float (also ``nan``, ``inf`` as the
    renderer writes them), or the text when beyond a double's range, which the codec names."""
    with contextlib.suppress(ValueError):
        return int(text)
    if overflows_double(text):
        return text
    try:
        return float(text)
    except ValueError:
        return text


def _unsupported_cell(text: str):
    return None if text == "" else text


def _json_cell(text: str):
    try:
        return _DECODER.decode(text)
    except ValueError:
        return text


_CELL_PARSERS = {
    LeafKind.DISPLAY: str,  # its decoder reads the display text
    LeafKind.CHAR: str,
    LeafKind.INTEGER: _int_cell,
    LeafKind.ENUM: _int_cell,  # a number, or an enumerator's name
    LeafKind.BOOL: _bool_cell,
    LeafKind.FLOAT: _float_cell,
    LeafKind.UNSUPPORTED: _unsupported_cell,
}
