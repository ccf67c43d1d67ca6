"""Options every map command shares, and the CLI's wording of library errors.

``MAP := --map-id N | --pinned PATH | --name NAME`` (bpftool's ``id | pinned | name``; the
name is an exact match and must be unambiguous). ``--batch-size`` and ``-o/--output`` are
checked here, before any map is opened, so a typo never half-runs a command (``exec
--action delete`` deletes nothing when ``-o`` is wrong).

The library names its parameters in errors (``batch_size: must be a positive number``);
:data:`FLAGS` says which flag each one is on the command line, and :func:`as_flags` (applied
by :func:`bpfbatch.cli.main` to every error) rewords an error with it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from ..errors import BpfBatchError, InputError

if TYPE_CHECKING:
    from ..map.handle import Map

MapId = Annotated[Optional[int], typer.Option(
    "--map-id", help="Map id (as bpftool map show lists); or, right after the command, "
                     "bpftool's id N, pinned PATH, name NAME.")]
Pinned = Annotated[Optional[str], typer.Option("--pinned", help="Path of a map pinned on bpffs.")]
Name = Annotated[Optional[str], typer.Option("--name", help="Exact map name; must match one map.")]
BatchSize = Annotated[int, typer.Option("--batch-size", help="Elements per batch syscall.")]
#: The renderers' names (records.render.RENDERERS, spelled out so that starting a command does
#: not import the codecs; tests/unit check the two agree).
OUTPUT_FORMATS = "table, json, jsonl, csv, bpftool-json, parquet or arrow"
Output = Annotated[str, typer.Option("-o", "--output", help=OUTPUT_FORMATS)]

#: The decoders' kinds (records.decoders.DECODERS, spelled out for the same reason).
DECODE_KINDS = "ipv4, ipv6, mac, be16, be32, be64, hex, str, ksym, ifname, errno, age"
Decode = Annotated[Optional[list[str]], typer.Option(
    "--decode", metavar="FIELD=KIND",
    help=f"Show FIELD (key.x, or a value field) as KIND: {DECODE_KINDS}. Repeatable. "
         "__be16/__be32 fields and struct in6_addr are decoded without asking; "
         "--decode none turns that off.")]

#: Elements per batch syscall by default (``bpfbatch.map.handle.DEFAULT_BATCH``, spelled out
#: so that options import nothing native; tests/unit check the two agree).
DEFAULT_BATCH = 8192

#: Library parameter → the flag that sets it.
FLAGS = {
    "batch_size": "--batch-size", "fmt": "--format", "limit": "--limit", "where": "--where",
    "field": "--field", "older_than_ns": "--older-than", "action": "--action",
    "max_selected": "--max", "mode": "--mode", "pid": "-p", "plot": "--plot",
}


#: Set by ``-q``: no progress and no summary lines on stderr.
QUIET = False


def say(text: str) -> None:
    """A summary line on stderr (``map 42 'flows': 10 entries loaded``), unless ``-q``."""
    if not QUIET:
        print(text, file=sys.stderr, flush=True)


def as_flags(exc: BpfBatchError) -> BpfBatchError:
    """``exc`` with the parameter it names (``where column 3 'x'`` included) spelled as the
    flag (``--where column 3 'x'``)."""
    obj = exc.obj or ""
    param = obj.split(" ", 1)[0]
    if param in FLAGS:
        exc.obj = FLAGS[param] + obj[len(param):]
    return exc


def open_map(map_id: int | None, pinned: str | None, name: str | None, *,
             read_only: bool) -> Map:
    """The map the user named with exactly one of ``--map-id``, ``--pinned``, ``--name``."""
    given = [flag for flag, value in (("--map-id", map_id), ("--pinned", pinned), ("--name", name))
             if value is not None]
    if len(given) != 1:
        raise InputError("name the map with exactly one of --map-id, --pinned, --name"
                         + (f" (got {' and '.join(given)})" if given else ""), obj="MAP")
    from ..map.handle import Map

    return Map.open(id=map_id, pinned=pinned, name=name, read_only=read_only)


def record_codecs(info, decode: list[str] | None, *, default_zero: bool = False):
    """A map's ``(key, value)`` codecs as the ``--decode`` options (the automatic choice
    included) shape them: they print what ``dump`` prints and read back what it wrote.
    ``default_zero`` lets records leave struct fields out (``load --default-zero``)."""
    from ..records.codec import map_codecs
    from ..records.decoding import decoded_codecs

    return decoded_codecs(*map_codecs(info, default_zero=default_zero), decode or [])


def check_output(fmt: str) -> str:
    """``fmt`` if it is a renderer's name, else one line naming ``--output``."""
    from ..records.render import check_format

    return check_format(fmt, "--output")
