"""The typer app and its lazy command registry.

A command's module is imported only when that command runs (or its own ``--help`` is
asked): ``bpfbatch tc`` never imports the map side, and so works on a machine without
libbpf.so.1, and no command pays for the others' imports. ``bpfbatch --help`` lists the
commands from :data:`COMMANDS` without importing any of them.

Each command module defines its commands on its own ``commands = typer.Typer()``; the
registry names the module and the one-line help shown in the list (a unit test keeps it
equal to the command's own).
"""

from __future__ import annotations

import importlib
import sys

import typer
from typer.core import TyperGroup

#: command name → (module under bpfbatch.cli, one-line help for ``bpfbatch --help``).
COMMANDS: dict[str, tuple[str, str]] = {
    "list": ("maps", "List the maps on the system, like bpftool map show."),
    "dump": ("maps", "Print a map's elements, typed from its BTF, read with batched lookups."),
    "count": ("maps", "Count a map's elements with one batched pass (bpftool has no count)."),
    "load": ("write", "Write records from FILE into the map in batches."),
    "delete": ("write", "Delete the keys of FILE's records."),
    "clear": ("write", "Remove every element (arrays: set every element to zero)."),
    "drain": ("write", "Print and delete every element (LOOKUP_AND_DELETE)."),
    "lookup": ("elements", "Print the element of KEY (like bpftool map lookup); a missing key "
                           "is an error."),
    "update": ("elements", "Write one element (like bpftool map update); a per-CPU VALUE is "
                           "one value for every CPU or a list of one per CPU."),
    "getnext": ("elements", "Print the key after KEY, or the first key (like bpftool map "
                            "getnext)."),
    "pin": ("elements", "Pin the map at PATH on bpffs (like bpftool map pin)."),
    "freeze": ("elements", "Make the map read-only for user space, for good (like bpftool map "
                           "freeze)."),
    "peek": ("elements", "Print the next value of a queue or stack without taking it (bpftool "
                         "map peek)."),
    "push": ("elements", "Add VALUE to a queue or stack (bpftool map push)."),
    "pop": ("elements", "Take the next value out of a queue or stack and print it (bpftool map "
                        "pop)."),
    "exec": ("exec", "Run a predicate over every element of a map, in the kernel or emulated "
                     "in user space, and count, dump or delete what it selects."),
    "prune": ("exec", "Delete flow-table elements idle for longer than --older-than."),
    "prune-demo": ("exec", "A real flow table kept trimmed."),
    "top": ("top", "bcc-style top tools over batched, loss-free interval read-outs."),
    "tc": ("tc", "Send a tc batch file: the kernel ends as tc -b leaves it, many messages "
                 "per sendmsg."),
    "tcp-mmap": ("tcp_mmap", "TCP receive zero-copy (mmap + TCP_ZEROCOPY_RECEIVE) and its "
                             "sender, after the kernel selftest tcp_mmap."),
    "export": ("export", "Serve BPF maps as Prometheus metrics, each map read in batches once "
                         "per scrape."),
    "demo": ("demo", "Build a BTF-typed flow table, dump it, and time batched vs per-key "
                     "reading."),
    "bench": ("bench", "Time lookup, lookup_and_delete and delete of a hash map per key and "
                       "in batches of 10, 1000 and all."),
}


#: What every command's context gets: ``-h`` beside ``--help``.
CONTEXT = {"help_option_names": ["-h", "--help"]}

#: bpftool's ``MAP`` keywords → the option each one stands for (``dump id 42``).
MAP_KEYWORDS = {"id": "--map-id", "pinned": "--pinned", "name": "--name"}


class LazyCommands(TyperGroup):
    """A click group whose commands are the modules in :data:`COMMANDS`, imported on use.

    Every command also takes ``-v``/``-q`` after its name, not only before it, and, when it
    addresses a map, bpftool's ``id N | pinned PATH | name NAME`` right after its name."""

    _listing = False

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        if command is None:
            return name, command, rest
        rest = _take_global_flags(ctx, command, rest)
        if _takes_map(command) and len(rest) >= 2 and rest[0] in MAP_KEYWORDS:
            rest = [MAP_KEYWORDS[rest[0]], *rest[1:]]
        return name, command, rest

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, name: str):
        if name not in COMMANDS:
            return None
        module_name, short_help = COMMANDS[name]
        if self._listing and f"{__package__}.{module_name}" not in sys.modules:
            return typer.core.TyperCommand(name, help=short_help)  # for the list only
        module = importlib.import_module(f".{module_name}", __package__)
        return _plain_help(typer.main.get_group(module.commands).get_command(ctx, name))

    def format_help(self, ctx, formatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


def _plain_help(command):
    """``command`` (and its subcommands) with help as plain terminal text, like the app's:
    click's paragraphs re-flowed to the terminal, no rich boxes or markup."""
    command.rich_markup_mode = None
    for param in command.params:
        if getattr(param, "metavar", True) is None and not getattr(param, "is_flag", True):
            param.metavar = param.name.upper()  # WHERE, not <str>
        if param.param_type_name == "argument":
            param.metavar = param.metavar or param.name.upper()
            param.display_type_rich = lambda ctx: ""  # FILE, not file <str>
    for sub in getattr(command, "commands", {}).values():
        _plain_help(sub)
    return command


def _takes_map(command) -> bool:
    return any(param.name == "map_id" for param in command.params)


def _set_verbose(ctx, param, value: bool) -> None:
    if value:
        from .._sys import libbpf

        libbpf.set_log_sink(lambda line: sys.stderr.write(line))


def _set_quiet(ctx, param, value: bool) -> None:
    if value:
        from . import options

        options.QUIET = True


def _show_version(ctx, param, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        print(version_text())
        ctx.exit()


def version_text() -> str:
    """``bpfbatch 0.1.0 (libbpf 1.1.2, Linux 6.18.0)``: what a bug report needs."""
    import ctypes
    import os

    from .. import __version__

    try:
        call = ctypes.CDLL("libbpf.so.1").libbpf_version_string
        call.restype = ctypes.c_char_p
        libbpf = "libbpf " + call().decode().lstrip("v")
    except (OSError, AttributeError):
        libbpf = "libbpf.so.1 not found"
    return f"bpfbatch {__version__} ({libbpf}, Linux {os.uname().release})"


#: The global flags and what setting them does; accepted after the command too.
_GLOBAL_FLAGS = {"-v": _set_verbose, "--verbose": _set_verbose,
                 "-q": _set_quiet, "--quiet": _set_quiet}


def _take_global_flags(ctx, command, args: list[str]) -> list[str]:
    """``args`` without the global flags given after the command (each applied), skipping
    the values of the command's own options and everything after ``--``."""
    if hasattr(command, "commands") and args and args[0] in command.commands:
        return [args[0], *_take_global_flags(ctx, command.commands[args[0]], args[1:])]
    takes_value = {opt for param in command.params if not getattr(param, "is_flag", True)
                   for opt in getattr(param, "opts", ())}
    kept, previous = [], None
    for i, arg in enumerate(args):
        if arg == "--":
            return kept + args[i:]
        if arg in _GLOBAL_FLAGS and previous not in takes_value:
            _GLOBAL_FLAGS[arg](ctx, None, True)
        else:
            kept.append(arg)
        previous = arg
    return kept


app = typer.Typer(
    name="bpfbatch",
    cls=LazyCommands,
    help="Move data across the user/kernel boundary in batches: BPF maps and tc rules. "
         "MAP is bpftool's: id N, pinned PATH or name NAME (or --map-id, --pinned, --name).",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings=CONTEXT,
)


@app.callback()
def _global_options(
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Show libbpf's log on stderr.",
                                 callback=_set_verbose, is_eager=True),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress and no summary "
                               "line on stderr.", callback=_set_quiet, is_eager=True),
    version: bool = typer.Option(False, "--version", help="Print the versions of bpfbatch, "
                                 "libbpf and the kernel, and exit.", callback=_show_version,
                                 is_eager=True),
) -> None:
    """Global flags (also accepted after the command)."""

