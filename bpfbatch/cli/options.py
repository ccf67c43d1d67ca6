"""Options every map command shares, declared as data, and the CLI's wording of library errors.

``MAP := --map-id N | --pinned PATH | --name NAME`` (bpftool's ``id | pinned | name``; the
name is an exact match and must be unambiguous). ``--batch-size`` and ``-o/--output`` are
checked here, before any map is opened, so a typo never half-runs a command (``exec
--action delete`` deletes nothing when ``-o`` is wrong).

An option is an :class:`Option`, a command declared this way a :class:`Command`: the one
declaration that both the typer commands (:mod:`.typed` builds their signatures from it) and
the thin entry point's parser (:mod:`.fastpath`) read, so the two cannot drift apart. This
module imports neither typer nor the library (the thin entry point imports it).

The library names its parameters in errors (``batch_size: must be a positive number``);
:data:`FLAGS` says which flag each one is on the command line, and :func:`as_flags` (applied
by :func:`bpfbatch.cli.main` to every error) rewords an error with it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from ..errors import BpfBatchError, InputError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..api import Map


#: The default of an argument or option that must be given (``load``'s FILE, ``tc``'s -b).
REQUIRED = object()


class Option:
    """One option: the keyword its command's body takes (``param``), its flags as click
    spells them (``-o`` or ``--output``), its ``kind`` — ``int``, ``str``, ``bool`` (a flag:
    present means True) or ``list`` (a repeatable ``str``, ``None`` when not given) — its
    default and help. ``default=None`` makes the value optional; ``minimum`` is the least an
    ``int`` may be (click's ``IntRange(min=...)``). Without flags it is a positional
    argument, in the order the command declares its arguments (``default=REQUIRED``: it
    must be given; an option with it: the thin entry point leaves a line without it to
    typer)."""

    __slots__ = ("param", "flags", "kind", "default", "help", "metavar", "minimum", "complete")

    def __init__(self, param: str, *flags: str, kind: type = str, default: object = None,
                 help: str = "", metavar: str | None = None, minimum: int | None = None,
                 complete: str | None = None) -> None:
        for flag in flags:
            if not (len(flag) == 2 and flag[0] == "-" and flag[1] != "-"
                    or flag[:2] == "--" and len(flag) > 2):
                raise ValueError(f"{flag}: an option is spelled -X or --name")
        self.param, self.flags, self.kind = param, flags, kind
        self.default, self.help, self.metavar, self.minimum = default, help, metavar, minimum
        self.complete = complete  # the name of its values' completion in .complete

    @property
    def takes_value(self) -> bool:
        return self.kind is not bool


class Command:
    """A command declared as data: ``body(**values)`` gets one keyword per option, the
    option's default where it was not given."""

    __slots__ = ("name", "body", "options")

    def __init__(self, name: str, body: Callable[..., None], options: tuple[Option, ...]) -> None:
        self.name, self.body, self.options = name, body, options

    @property
    def arguments(self) -> tuple[Option, ...]:
        """The positional arguments, in order."""
        return tuple(option for option in self.options if not option.flags)

    @property
    def value_flags(self) -> set[str]:
        """The flags whose option takes a value: the token after one is that value."""
        return {flag for option in self.options if option.takes_value for flag in option.flags}

    @property
    def own_flags(self) -> set[str]:
        """Every spelling of the command's options: a global flag spelled the same is the
        command's own there (:func:`.argv.take_global_flags`)."""
        return {flag for option in self.options for flag in option.flags}

    @property
    def output_flags(self) -> set[str]:
        """The spellings of the command's ``-o/--output`` (none: it has no output format)."""
        return {flag for option in self.options if option.param == "output"
                for flag in option.flags}

    @property
    def takes_map(self) -> bool:
        """Whether bpftool's ``id N | pinned PATH | name NAME`` may follow the name."""
        return any(option.param == "map_id" for option in self.options)


class Commands(dict):
    """A command module's declared commands, name → :class:`Command`; :meth:`command`
    declares one over its body."""

    def command(self, name: str, *options: Option) -> Callable:
        def declare(body: Callable[..., None]) -> Callable[..., None]:
            self[name] = Command(name, body, options)
            return body
        return declare


MAP_ID = Option("map_id", "--map-id", kind=int, complete="map_ids",
                help="Map id (as bpftool map show lists); or, right after the command, "
                     "bpftool's id N, pinned PATH, name NAME.")
PINNED = Option("pinned", "--pinned", help="Path of a map pinned on bpffs.",
                complete="pinned_paths")
NAME = Option("name", "--name", help="Exact map name; must match one map.",
              complete="map_names")
#: ``MAP``: the three ways to name a map, one of which :func:`open_map` wants.
MAP = (MAP_ID, PINNED, NAME)

#: The renderers' names (formats.render.RENDERERS, spelled out so that starting a command does
#: not import the codecs; tests/unit check the two agree).
OUTPUT_FORMATS = "table, json, jsonl, csv, bpftool-json, parquet or arrow"
OUTPUT = Option("output", "-o", "--output", default="json", help=OUTPUT_FORMATS,
                complete="output_formats")

#: The decoders' kinds (records.decoders.DECODERS, spelled out for the same reason).
DECODE_KINDS = "ipv4, ipv6, mac, be16, be32, be64, hex, str, ksym, ifname, errno, age"
DECODE = Option("decode", "--decode", kind=list, metavar="FIELD=KIND", complete="decoders",
                help=f"Show FIELD (key.x, or a value field) as KIND: {DECODE_KINDS}. "
                     "Repeatable. __be16/__be32 fields and struct in6_addr are decoded "
                     "without asking; --decode none turns that off.")

#: The formats records are read in (formats.read.READ_FORMATS), ``list``'s and ``diff``'s
#: outputs (cli.maps.LIST_FORMATS, compare.render.FORMATS), spelled out for the same reason
#: (and completed from these words).
INPUT_FORMATS = "jsonl, json, csv, bpftool-json, parquet or arrow"
LIST_FORMATS = "table, json, jsonl or csv"
DIFF_FORMATS = "table, jsonl or json"

#: What ``load`` and ``delete`` read.
INPUT_FILE = Option("file", default=REQUIRED, help="Input file; '-' reads stdin.")
INPUT_FORMAT = Option("fmt", "--format", help=f"{INPUT_FORMATS} (default: from the file "
                                              "name, else jsonl).", complete="input_formats")

#: Elements per batch syscall by default (``bpfbatch.map.handle.DEFAULT_BATCH``, spelled out
#: so that options import nothing native; tests/unit check the two agree).
DEFAULT_BATCH = 8192
BATCH_SIZE = Option("batch_size", "--batch-size", kind=int, default=DEFAULT_BATCH,
                    help="Elements per batch syscall.")

#: Library parameter → the flag that sets it.
FLAGS = {
    "batch_size": "--batch-size", "fmt": "--format", "limit": "--limit", "where": "--where",
    "field": "--field", "older_than_ns": "--older-than", "action": "--action",
    "max_selected": "--max", "mode": "--mode", "pid": "-p", "plot": "--plot",
    "key_type": "--key-type", "value_type": "--value-type", "btf": "--btf",
}


#: Set by ``-q``: no progress and no summary lines on stderr.
QUIET = False
#: Set by ``-v``: libbpf's log on stderr, and the commands' own progress details.
VERBOSE = False
#: Set by ``-p``: bpftool's JSON pretty-printed as ``bpftool -p`` prints it.
PRETTY = False
#: The exit status of a runtime error: 1, but 2 for ``diff``, whose 1 means "they differ"
#: (diff(1)'s contract); the command sets it as it starts.
RUNTIME_STATUS = 1
#: Set by ``--key-type``, ``--value-type``, ``--btf``: the types :func:`open_map` gives a
#: map (``key_type`` → ``u32``).
TYPES: dict[str, str] = {}


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


def is_usage_error(exc: BpfBatchError) -> bool:
    """Whether ``exc`` (as :func:`as_flags` words it) is about the command line itself — an
    :class:`~bpfbatch.errors.InputError` whose object is an option (``--batch-size``, ``-o
    parquet``, ``-4/-6``) or an argument named as the help shows it (``MAP``, ``INTERVAL``)
    — or a field of the KEY or VALUE argument (``KEY.dport``, ``VALUE.hist[3]``), and so
    exits 2 like click's own usage errors; errors about a map, a file or the kernel are
    runtime errors (1)."""
    obj = (exc.obj or "").split(" ", 1)[0]
    return isinstance(exc, InputError) and (
        obj[:1] == "-" or obj.isupper() or obj.startswith(_ARGUMENT_FIELDS))


#: How an error names a field of a KEY or VALUE given on the command line.
_ARGUMENT_FIELDS = ("KEY.", "KEY[", "VALUE.", "VALUE[")


def map_selector(map_type: str | None, match: str | None) -> Callable[[object], bool]:
    """Whether a map's info passes ``--type`` and ``--match`` (``list``, ``top maps``). A
    type no map can have is a usage error, not an empty listing: ``--type lru`` for
    ``lru_hash`` would otherwise look like a system without such maps."""
    import fnmatch

    from .._sys.abi import MapType

    if map_type is not None and map_type not in {t.label for t in MapType} \
            and not (map_type.startswith("type_") and map_type[5:].isdigit()):
        raise InputError(f"unknown map type {map_type!r} (types as listed: hash, array, "
                         "lru_hash, percpu_hash, ...)", obj="--type")
    return lambda info: (map_type is None or info.type_name == map_type) and (
        match is None or fnmatch.fnmatchcase(info.name, match))


def open_map(map_id: int | None, pinned: str | None, name: str | None, *,
             read_only: bool) -> Map:
    """The map the user named with exactly one of ``--map-id``, ``--pinned``, ``--name``."""
    given = [flag for flag, value in (("--map-id", map_id), ("--pinned", pinned), ("--name", name))
             if value is not None]
    if len(given) != 1:
        raise InputError("name the map with exactly one of --map-id, --pinned, --name"
                         + (f" (got {' and '.join(given)})" if given else ""), obj="MAP")
    from ..api import Map

    return Map.open(id=map_id, pinned=pinned, name=name, read_only=read_only, **TYPES)


def map_words(tokens: list[str], obj: str) -> list[tuple[str, str]]:
    """A command's arguments where maps are given in bpftool's words (``diff``'s ``A B``,
    ``migrate``'s ``FROM TO``): ``(keyword, value)`` for ``id N``, ``pinned PATH``, ``name
    NAME``, and ``("file", token)`` for any other token. A keyword without its value, or an
    id that is not a number, is a usage error on ``obj`` (the arguments as the help names
    them)."""
    from .argv import MAP_KEYWORDS

    found, rest = [], iter(tokens)
    for word in rest:
        if word not in MAP_KEYWORDS:
            found.append(("file", word))
            continue
        value = next(rest, None)
        if value is None:
            raise InputError(f"{word} needs its value ({word} ...)", obj=obj)
        if word == "id" and not value.isdigit():
            raise InputError(f"a map id is a number, got {value!r}", obj=obj)
        found.append((word, value))
    return found


def map_address(word: tuple[str, str]) -> dict:
    """``Map.open``'s keyword for a map of :func:`map_words` (``{"id": 4}``)."""
    kind, value = word
    return {"id": int(value)} if kind == "id" else {kind: value}


def record_codecs(info, decode: list[str] | None, *, default_zero: bool = False):
    """A map's ``(key, value)`` codecs as the ``--decode`` options (the automatic choice
    included) shape them (:func:`bpfbatch.records.decoding.view`, the one place a view is
    chosen): they print what ``dump`` prints and read back what it wrote, decoded or not.
    ``default_zero`` lets records leave struct fields out (``load --default-zero``)."""
    from ..records.decoding import view

    return view(info, decode, default_zero=default_zero)


def check_output(fmt: str) -> str:
    """``fmt`` if it is a renderer's name, else one line naming ``--output``."""
    from ..formats.render import check_format

    return check_format(fmt, "--output")
