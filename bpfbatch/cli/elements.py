"""bpftool's element commands: ``lookup``, ``update``, ``getnext``, ``pin``, ``freeze``,
``peek``, ``push``, ``pop`` — typed from the map's BTF like ``dump``.

KEY and VALUE are what ``dump -o jsonl`` prints for them, as JSON text (``5``,
``'{"saddr": "10.0.0.1", "dport": 443}'``); a word that is not JSON is a string
(``10.0.0.1`` for a whole-key ``--decode key=ipv4``). A side without BTF takes hex text
(``0a000001``) or a list of bytes. Records print through the one output pipeline, so
``-o``, ``--decode`` and the formats behave as in ``dump``.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from .._sys import abi
from ..errors import InputError, NotFoundError
from .options import check_output, open_map, record_codecs, say
from .typed import Decode, MapId, Name, Pinned

commands = typer.Typer()

Key = Annotated[str, typer.Argument(help="The key, as dump -o jsonl prints it (JSON text).")]
Value = Annotated[str, typer.Argument(help="The value, as dump -o jsonl prints it (JSON text).")]
RecordFormat = Annotated[str, typer.Option("-o", "--output", help="jsonl, json, table, csv "
                                                                  "or bpftool-json")]


def _json_arg(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text  # a bare word: a string (an address, an enumerator, hex bytes)


def _print_one(m, key: bytes, value: bytes, output: str, decode: list[str] | None) -> None:
    from ..map.cursor import Batch
    from ..records import pipeline

    out = pipeline.Output(output, m.info, sys.stdout.buffer, decode=decode or [])
    out.write(Batch(1, memoryview(key), memoryview(value)))
    out.close()


@commands.command("lookup")
def lookup(key: Key, map_id: MapId = None, pinned: Pinned = None, name: Name = None,
           output: RecordFormat = "jsonl", decode: Decode = None) -> None:
    """Print the element of KEY (like bpftool map lookup); a missing key is an error."""
    check_output(output)
    with open_map(map_id, pinned, name, read_only=True) as m:
        raw_key = record_codecs(m.info, decode)[0].encode(_json_arg(key), "KEY")
        value = m.lookup(raw_key)
        if value is None:
            raise NotFoundError("no such key (ENOENT)", obj=f"{m.info.label} key {key}")
        _print_one(m, raw_key, value, output, decode)


@commands.command("update")
def update(
    key: Key, value: Value,
    map_id: MapId = None, pinned: Pinned = None, name: Name = None,
    if_absent: Annotated[bool, typer.Option("--if-absent", help="Only when KEY is not in "
                                            "the map (BPF_NOEXIST).")] = False,
    if_present: Annotated[bool, typer.Option("--if-present", help="Only when KEY is in the "
                                             "map (BPF_EXIST).")] = False,
    decode: Decode = None,
) -> None:
    """Write one element (like bpftool map update); a per-CPU VALUE is one value for every
    CPU or a list of one per CPU."""
    if if_absent and if_present:
        raise InputError("choose one of --if-absent and --if-present", obj="--if-absent")
    flags = abi.BPF_NOEXIST if if_absent else abi.BPF_EXIST if if_present else abi.BPF_ANY
    with open_map(map_id, pinned, name, read_only=False) as m:
        key_codec, value_codec = record_codecs(m.info, decode)
        m.update(key_codec.encode(_json_arg(key), "KEY"),
                 value_codec.encode(_json_arg(value), "VALUE"), flags)
        say(f"{m.info.label}: 1 entry updated")


@commands.command("getnext")
def getnext(key: Annotated[Optional[str], typer.Argument(
                help="The key to start after (default: the first key).")] = None,
            map_id: MapId = None, pinned: Pinned = None, name: Name = None,
            decode: Decode = None) -> None:
    """Print the key after KEY, or the first key (like bpftool map getnext)."""
    with open_map(map_id, pinned, name, read_only=True) as m:
        key_codec = record_codecs(m.info, decode)[0]
        raw = None if key is None else key_codec.encode(_json_arg(key), "KEY")
        following = m.next_key(raw)
        if following is None:
            raise NotFoundError("no next key: the map is empty or KEY is its last (ENOENT)",
                                obj=m.info.label)
        shown = None if raw is None else key_codec.decode(raw)
        print(json.dumps({"key": shown, "next_key": key_codec.decode(following)},
                         default=bytes.hex))


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
    from ..records import pipeline

    with interrupts.stopping(lambda: "0 entries delivered (nothing was taken)"):
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
                exc.message = f"after {delivery.delivered} entries delivered" + (
                    f", {delivery.returned}" if delivery.returned else "")
                raise


@commands.command("push")
def push(value: Value, map_id: MapId = None, pinned: Pinned = None, name: Name = None,
         decode: Decode = None) -> None:
    """Add VALUE to a queue or stack (bpftool map push)."""
    with open_map(map_id, pinned, name, read_only=False) as m:
        if m.info.key_size:
            raise InputError(f"{m.info.type_name} maps have keys: use update",
                             obj=m.info.label)
        m.update(b"", record_codecs(m.info, decode)[1].encode(_json_arg(value), "VALUE"))
