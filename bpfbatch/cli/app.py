"""The typer app and its lazy command registry.

A command's module is imported only when that command runs (or its own ``--help`` is
asked): ``bpfbatch tc`` never imports the map side, and so works on a machine without
libbpf.so.1, and no command pays for the others' imports. ``bpfbatch --help`` lists the
commands from :data:`COMMANDS` without importing any of them.

Each command module defines its commands on its own ``commands``: a ``typer.Typer()``, or
declarations (:class:`~.options.Commands`) that :func:`.typed.typer_app` turns into one. The
registry (:data:`.argv.COMMANDS`) names the module and the one-line help shown in the list (a
unit test keeps it equal to the command's own). Options given after the command's name pass
through :mod:`.argv`'s conventions, the ones the thin entry point applies too.
"""

from __future__ import annotations

import errno
import importlib
import sys

import typer
from typer.core import TyperGroup

from ..errors import OutputError
from . import argv, complete
from .argv import COMMANDS
from .options import Commands

try:  # typer ≥ 0.20 carries its own click
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
    from typer._click.globals import get_current_context
except ImportError:  # pragma: no cover - older typer over click
    from click import get_current_context
    from click.exceptions import NoArgsIsHelpError, UsageError

__all__ = ["CONTEXT", "LazyCommands", "NoArgsIsHelpError", "UsageError", "app", "usage_error",
           "version_text"]


def usage_error(message: str) -> UsageError:
    """A usage error of the command running now (one line naming it, exit 2): what a
    command's body raises for arguments click could not check (bpftool's element words)."""
    return UsageError(message, ctx=get_current_context(silent=True))

#: What every command's context gets: ``-h`` beside ``--help``.
CONTEXT = {"help_option_names": ["-h", "--help"]}


class LazyCommands(TyperGroup):
    """A click group whose commands are the modules in :data:`COMMANDS`, imported on use.

    A closed pipe (EPIPE) leaves as an :class:`~bpfbatch.errors.OutputError`, which the entry
    point reports, not as the silent exit 1 of click's main. Every command also takes
    ``-v``/``-q`` after its name, not only before it, and, when it addresses a map, bpftool's
    ``id N | pinned PATH | name NAME`` right after its name."""

    _listing = False

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        if command is None:
            return name, command, rest
        rest, late = _take_global_flags(command, rest)
        rest = argv.optional_values(name, rest)
        if _takes_map(command):
            rest = argv.bpftool_map_form(rest)
        early = [flag for flag in ("json", "pretty") if ctx.params.get(flag)]
        output = {opt for param in command.params if param.name == "output"
                  for opt in param.opts}
        rest = argv.json_output(name, rest, early + late, output)
        return name, command, rest

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except OSError as exc:  # click's main would end a closed pipe with exit 1, no word
            if exc.errno != errno.EPIPE:
                raise
            raise OutputError(exc.strerror or "broken pipe", written=0, obj="stdout",
                              errno=exc.errno) from None

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, name: str):
        if name not in COMMANDS:
            return None
        module_name, short_help = COMMANDS[name]
        if self._listing and f"{__package__}.{module_name}" not in sys.modules:
            return typer.core.TyperCommand(name, help=short_help)  # for the list only
        commands = importlib.import_module(f".{module_name}", __package__).commands
        if isinstance(commands, Commands):
            from .typed import typer_app

            commands = typer_app(commands)
        return _plain_help(typer.main.get_group(commands).get_command(ctx, name))

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


def _set_flag(ctx, param, value):
    """A global flag's or option's callback: :func:`.argv.set_global_flag` of what it sets.
    Returns ``value``, which click keeps in ``ctx.params`` (``-j`` is read there)."""
    if value and param.name in ("verbose", "quiet", "json", "pretty"):
        argv.set_global_flag(param.name)
    elif value:
        argv.set_global_flag(f"{param.name}={value}")
    return value


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


def _take_global_flags(command, args: list[str]) -> tuple[list[str], list[str]]:
    """``args`` without the global flags given after the command (each applied), skipping
    the values of the command's own options and everything after ``--``; and those flags."""
    if hasattr(command, "commands") and args and args[0] in command.commands:
        kept, flags = _take_global_flags(command.commands[args[0]], args[1:])
        return [args[0], *kept], flags
    value_flags = {opt for param in command.params if not getattr(param, "is_flag", True)
                   for opt in getattr(param, "opts", ())}
    own_flags = {opt for param in command.params for opt in getattr(param, "opts", ())}
    kept, flags = argv.take_global_flags(args, value_flags, own_flags)
    for flag in flags:
        argv.set_global_flag(flag)
    return kept, flags


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
                                 callback=_set_flag, is_eager=True),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress and no summary "
                               "line on stderr.", callback=_set_flag, is_eager=True),
    json: bool = typer.Option(False, "-j", "--json", help="bpftool's JSON: -o bpftool-json "
                              "(list: -o json) where the command has -o (tc: its own -j).",
                              callback=_set_flag, is_eager=True),
    pretty: bool = typer.Option(False, "-p", "--pretty", help="-j, pretty-printed as bpftool "
                                "-p prints it (top, tcp-mmap: their own -p).",
                                callback=_set_flag, is_eager=True),
    key_type: str = typer.Option(None, "--key-type", metavar="TYPE", help="Type a map "
                                 "without BTF: its key is TYPE (u32, s64, __be32, char[16], "
                                 "u8[6], or a struct/union/enum of --btf).",
                                 callback=_set_flag, is_eager=True,
                                 autocompletion=complete.c_types),
    value_type: str = typer.Option(None, "--value-type", metavar="TYPE", help="Its value "
                                   "is TYPE (as --key-type).", callback=_set_flag,
                                   is_eager=True, autocompletion=complete.c_types),
    btf: str = typer.Option(None, "--btf", metavar="FILE", help="An object file (.o) whose "
                            "BTF names the types of --key-type/--value-type "
                            "('struct flow_val').", callback=_set_flag, is_eager=True),
    version: bool = typer.Option(False, "--version", help="Print the versions of bpfbatch, "
                                 "libbpf and the kernel, and exit.", callback=_show_version,
                                 is_eager=True),
) -> None:
    """Global flags (also accepted after the command)."""

