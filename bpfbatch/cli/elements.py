"""bpftool's element commands: ``lookup``, ``update``, ``getnext``, ``pin``, ``freeze``,
``peek``, ``push``, ``pop`` — typed from the map's BTF like ``dump``.

A key or value is given in bpftool's words, ``key [hex] BYTES`` / ``value [hex] BYTES``
(:mod:`.bpftool`), or as one word of JSON text as ``dump -o jsonl`` prints it (``5``,
``'{"saddr": "10.0.0.1", "dport": 443}'``); a word that is not JSON is a string
(``10.0.0.1`` for a whole-key ``--decode key=ipv4``). A side without BTF takes hex text
(``0a000001``) or a list of bytes. Records print through the one output pipeline, so
``-o``, ``--decode`` and the formats behave as in ``dump``; ``-o bpftool-json`` (``-j``)
prints what ``bpftool -j map lookup`` prints, ``-p`` as ``bpftool -p`` does.
"""

from __future__ import annotations

import io
import json
import sys
from typing import Annotated, Optional

import typer

from .._sys import abi
from ..errors import InputError, NotFoundError
from . import bpftool, options
from .bpftool import GrammarError
from .complete import choices
from .options import check_output, open_map, record_codecs, say
from .typed import Decode, MapId, Name, Pinned

commands = typer.Typer()

_WORDS = ("bpftool's key [hex] BYTES, or the key as dump -o jsonl prints it (one word of "
          "JSON text).")
KeyWords = Annotated[list[str], typer.Argument(help=_WORDS, metavar="KEY")]
UpdateWords = Annotated[list[str], typer.Argument(
    help="bpftool's key [hex] BYTES value [hex] BYTES [any|exist|noexist], or KEY VALUE as "
         "dump -o jsonl prints them (JSON text).", metavar="KEY VALUE [FLAG]")]
ValueWords = Annotated[list[str], typer.Argument(
    help="bpftool's value [hex] BYTES, or the value as dump -o jsonl prints it (JSON text).",
    metavar="VALUE")]
RecordFormat = Annotated[str, typer.Option("-o", "--output", help="jsonl, json, table, csv "
                                           "or bpftool-json", autocompletion=choices(
                                               "jsonl, json, table, csv or bpftool-json"))]


#: Map types whose values are written as file descriptors (bpftool's ``value id N |
#: pinned PATH``): bytes would name whatever file this process has open at that number.
_FD_VALUES = abi.MAP_IN_MAP_TYPES | {abi.MapType.PROG_ARRAY}


def element(m, words: list[str], sides: tuple[str, ...], decode: list[str] | None, *,
            flags: bool = False) -> tuple[dict[str, bytes], int | None]:
    """The stored bytes of each of ``sides`` (``"key"``, ``"value"``) that ``words`` give,
    in bpftool's words or as JSON words, and the update flag given (``None``: none; only
    with ``flags``). Words that do not read as either form are a usage error naming the
    mistake."""
    from .app import usage_error

    info = m.info
    sizes = {"key": info.key_size, "value": info.value_size}
    try:
        if any(bpftool.uses_keywords(words, side) for side in sides):
            if "value" in sides and info.type in _FD_VALUES:  # bpftool: value id N, not bytes
                raise GrammarError(f"{info.type_name} values are file descriptors of maps "
                                   "or programs, not bytes")
            raw, flag = bpftool.parse_element(words, {side: sizes[side] for side in sides},
                                              flags=flags)
            if "value" in raw and info.percpu:  # bpftool's fill_per_cpu_value: every CPU
                raw["value"] = raw["value"].ljust(info.cpu_stride, b"\0") * (
                    info.value_stride // info.cpu_stride)
            return raw, flag
        flag = None
        if flags and len(words) == len(sides) + 1 and words[-1] in bpftool.FLAGS:
            flag, words = bpftool.FLAGS[words[-1]], words[:-1]
        if len(words) != len(sides):
            raise GrammarError(_count_hint(words, sides))
        codecs = dict(zip(("key", "value"), record_codecs(info, decode)))
        parsed = [bpftool.json_word(word, side) for word, side in zip(words, sides)]
        try:
            return {side: codecs[side].encode(obj, side.upper())
                    for side, obj in zip(sides, parsed)}, flag
        except RecursionError:
            raise GrammarError("JSON nested deeper than the map's type") from None
    except GrammarError as exc:
        raise usage_error(str(exc)) from None


def _count_hint(words: list[str], sides: tuple[str, ...]) -> str:
    """What a wrong number of JSON words most likely meant."""
    wanted = " ".join(side.upper() for side in sides)
    if len(words) > len(sides) and all(bpftool.strtoul(w, 0) is not None for w in words):
        return (f"expected {wanted} (one JSON word each), got {len(words)} numbers: bytes "
                f"are given as bpftool takes them, {sides[0]} {' '.join(words)}")
    return f"expected {wanted} (one JSON word each, or bpftool's {sides[0]} [hex] BYTES), " \
           f"got {len(words)} word{'s' if len(words) != 1 else ''}"


def _print_one(m, key: bytes, value: bytes, output: str, decode: list[str] | None) -> None:
    """One element in ``output``; bpftool-json as ``bpftool -j map lookup`` prints one (an
    object, not dump's array of one), pretty with ``-p``."""
    from ..map.cursor import Batch
    from ..formats import pipeline

    buffer = io.BytesIO()
    out = pipeline.Output(output, m.info, buffer, decode=decode or [], element=True)
    out.write(Batch(1, memoryview(key), memoryview(value)))
    out.close()
    data = buffer.getvalue()
    sys.stdout.buffer.write(_bpftool_text(data) if output == "bpftool-json" else data)
    sys.stdout.buffer.flush()


def _bpftool_text(compact: bytes) -> bytes:
    """bpftool's compact JSON text as bpftool prints it: as is, or with ``-p`` pretty."""
    return bpftool.pretty_text(compact) if options.PRETTY else compact


@commands.command("lookup")
def lookup(key: KeyWords, map_id: MapId = None, pinned: Pinned = None, name: Name = None,
           output: RecordFormat = "jsonl", decode: Decode = None) -> None:
    """Print the element of KEY (like bpftool map lookup); a missing key is an error."""
    check_output(output)
    with open_map(map_id, pinned, name, read_only=True) as m:
        raw_key = element(m, key, ("key",), decode)[0]["key"]
        value = m.lookup(raw_key)
        if value is None:
            raise NotFoundError("no such key (ENOENT)", obj=_key_label(m, key))
        _print_one(m, raw_key, value, output, decode)


@commands.command("update")
def update(
    words: UpdateWords,
    map_id: MapId = None, pinned: Pinned = None, name: Name = None,
    if_absent: Annotated[bool, typer.Option("--if-absent", help="Only when KEY is not in "
                                            "the map (BPF_NOEXIST, bpftool's noexist).")
                         ] = False,
    if_present: Annotated[bool, typer.Option("--if-present", help="Only when KEY is in the "
                                             "map (BPF_EXIST, bpftool's exist).")] = False,
    decode: Decode = None,
) -> None:
    """Write one element (like bpftool map update); a per-CPU VALUE is one value for every
    CPU or a list of one per CPU."""
    if if_absent and if_present:
        raise InputError("choose one of --if-absent and --if-present", obj="--if-absent")
    with open_map(map_id, pinned, name, read_only=False) as m:
        raw, flag = element(m, words, ("key", "value"), decode, flags=True)
        if flag is not None and (if_absent or if_present):
            raise InputError("give the flag once: a word or an option", obj="--if-absent"
                             if if_absent else "--if-present")
        if flag is None:
            flag = abi.BPF_NOEXIST if if_absent else abi.BPF_EXIST if if_present else abi.BPF_ANY
        m.update(raw["key"], raw["value"], flag)
        say(f"{m.info.label}: 1 entry updated")


@commands.command("getnext")
def getnext(key: Annotated[Optional[list[str]], typer.Argument(
                help="The key to start after (default: the first key): " + _WORDS,
                metavar="[KEY]")] = None,
            map_id: MapId = None, pinned: Pinned = None, name: Name = None,
            output: Annotated[str, typer.Option(
                "-o", "--output", help="jsonl, json or bpftool-json",
                autocompletion=choices("jsonl, json or bpftool-json"))] = "jsonl",
            decode: Decode = None) -> None:
    """Print the key after KEY, or the first key (like bpftool map getnext):
    {"key": KEY, "next_key": NEXT}, each as dump prints keys (null: no KEY given); with
    -o bpftool-json (-j) bpftool's byte lists."""
    if output not in ("jsonl", "json", "bpftool-json"):
        raise InputError(f"unknown format '{output}' (use jsonl, json or bpftool-json)",
                         obj="--output")
    with open_map(map_id, pinned, name, read_only=True) as m:
        raw = element(m, key, ("key",), decode)[0]["key"] if key else None
        following = m.next_key(raw)
        if following is None:
            raise NotFoundError("no next key: the map is empty or KEY is its last (ENOENT)",
                                obj=m.info.label)
        if output == "bpftool-json":
            step = {"key": None if raw is None else _byte_list(raw),
                    "next_key": _byte_list(following)}
            sys.stdout.buffer.write(_bpftool_text(
                (json.dumps(step, separators=(",", ":")) + "\n").encode()))
            return
        shown = None if raw is None else _key_text(m, raw, decode)
        print(json.dumps({"key": shown, "next_key": _key_text(m, following, decode)},
                         separators=(",", ":")))


def _byte_list(raw: bytes) -> list[str]:
    """bpftool's ``print_hex_data_json``."""
    return [f"0x{byte:02x}" for byte in raw]


def _key_text(m, raw: bytes, decode: list[str] | None):
    """``raw`` as ``dump -o jsonl`` prints a key (decoders applied)."""
    from ..map.cursor import Batch
    from ..formats import pipeline

    buffer = io.BytesIO()
    out = pipeline.Output("jsonl", m.info, buffer, decode=decode or [])
    out.write(Batch(1, memoryview(raw), memoryview(bytes(m.info.value_stride))))
    out.close()
    return json.loads(buffer.getvalue())["key"]


def delete_element(words: list[str], map_id: int | None, pinned: str | None,
                   name: str | None) -> None:
    """``delete MAP key [hex] BYTES``: one key, as bpftool map delete (missing: an error)."""
    from ..map.handle import require

    with open_map(map_id, pinned, name, read_only=False) as m:
        require(m.info, "delete")  # an array's reason, as the file form says it
        raw = element(m, words, ("key",), None)[0]["key"]
        if not m.delete(raw):
            raise NotFoundError("no such key (ENOENT)", obj=_key_label(m, words))
        say(f"{m.info.label}: 1 entry deleted")


@commands.command("pin")
def pin(path: Annotated[str, typer.Argument(help="Where to pin it, on bpffs.")],
        map_id: MapId = None, pinned: Pinned = None, name: Name = None) -> None:
    """Pin the map at PATH on bpffs (like bpftool map pin)."""
    with open_map(map_id, pinned, name, read_only=True) as m:
        m.pin(path)


@commands.command("freeze")
def freeze(map_id: MapId = None, pinned: Pinned = None, name: Name = None) -> None:
    """Make the map read-only for user space, for good (like bpftool map freeze)."""
    with open_map(map_id, pinned, name, read_only=False) as m:
        m.freeze()


def _key_label(m, words: list[str]) -> str:
    """``map 5 'flows' key 1 0 0 0``: the map and the key as the command line gave it (its
    ``key`` keyword once)."""
    shown = words[1:] if words[:1] == ["key"] else words
    return f"{m.info.label} key {' '.join(shown)}"


def _keyless(m, instead: str) -> None:
    if m.info.key_size:
        raise InputError(f"{m.info.type_name} maps have keys: use {instead}", obj=m.info.label)


@commands.command("peek")
def peek(map_id: MapId = None, pinned: Pinned = None, name: Name = None,
         output: RecordFormat = "jsonl", decode: Decode = None) -> None:
    """Print the next value of a queue or stack without taking it (bpftool map peek)."""
    check_output(output)
    with open_map(map_id, pinned, name, read_only=True) as m:
        _keyless(m, "lookup/delete")
        value = m.lookup(b"")
        if value is None:
            raise NotFoundError("empty (ENOENT)", obj=m.info.label)
        _print_one(m, b"", value, output, decode)


@commands.command("pop")
def pop(map_id: MapId = None, pinned: Pinned = None, name: Name = None,
        output: RecordFormat = "jsonl", decode: Decode = None) -> None:
    """Take the next value out of a queue or stack and print it (bpftool map pop). Nothing is
    lost: the value is taken and written in one critical section, as drain's batches are; if
    the output does not take all of it, it goes back into the map (a stack's on top again, a
    queue's behind the values still queued) and the command fails saying so. A signal stops
    it once the value is delivered or back."""
    check_output(output)
    from .. import interrupts
    from ..errors import Interrupted
    from ..map import whole
    from ..map.cursor import Batch
    from ..formats import pipeline

    delivery = None

    def done() -> str:
        """What was done, wherever the signal lands: also after the critical section, where
        the signal it held back is raised (past the ``except`` below)."""
        if delivery is None:
            return "0 entries delivered (nothing was taken)"
        return f"{delivery.delivered} entries delivered" + (
            f", {delivery.returned}" if delivery.returned else "")

    with interrupts.stopping(done):
        out = pipeline.stdout()
        with open_map(map_id, pinned, name, read_only=False) as m:
            _keyless(m, "lookup/delete")
            delivery = pipeline.delivery(output, m.info, whole.restorer(m), out,
                                         decode=decode or [], whole=True)
            try:
                with interrupts.deferred():
                    value = m.pop()
                    if value is None:
                        raise NotFoundError("empty (ENOENT)", obj=m.info.label)
                    delivery.take(Batch(1, memoryview(b""), memoryview(value)))
            except Interrupted as exc:
                exc.obj = m.info.label
                exc.message = f"after {done()}"
                raise


@commands.command("push")
def push(value: ValueWords, map_id: MapId = None, pinned: Pinned = None, name: Name = None,
         decode: Decode = None) -> None:
    """Add VALUE to a queue or stack (bpftool map push)."""
    with open_map(map_id, pinned, name, read_only=False) as m:
        _keyless(m, "update")
        m.update(b"", element(m, value, ("value",), decode)[0]["value"])
