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
    "exec": ("exec", "Run a predicate over every element of a map, in the kernel or emulated "
                     "in user space, and count, dump or delete what it selects."),
    "prune": ("exec", "Delete flow-table elements idle for longer than --older-than."),
    "prune-demo": ("exec", "A real flow table kept trimmed."),
    "top": ("top", "bcc-style top tools over batched, loss-free interval read-outs."),
    "tc": ("tc", "Send a tc batch file: qdisc/filter/actions lines, many rtnetlink "
                 "messages per sendmsg."),
    "tcp-mmap": ("tcp_mmap", "TCP receive zero-copy (mmap + TCP_ZEROCOPY_RECEIVE) and its "
                             "sender, after the kernel selftest tcp_mmap."),
    "demo": ("demo", "Build a BTF-typed flow table, dump it, and time batched vs per-key "
                     "reading."),
    "bench": ("bench", "Time lookup, lookup_and_delete and delete of a hash map per key and "
                       "in batches of 10, 1000 and all."),
}


class LazyCommands(TyperGroup):
    """A click group whose commands are the modules in :data:`COMMANDS`, imported on use."""

    _listing = False

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, name: str):
        if name not in COMMANDS:
            return None
        module_name, short_help = COMMANDS[name]
        if self._listing and f"{__package__}.{module_name}" not in sys.modules:
            return typer.core.TyperCommand(name, help=short_help)  # for the list only
        module = importlib.import_module(f".{module_name}", __package__)
        return typer.main.get_group(module.commands).get_command(ctx, name)

    def format_help(self, ctx, formatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="bpfbatch",
    cls=LazyCommands,
    help="Move data across the user/kernel boundary in batches: BPF maps and tc rules.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _global_options(
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Show libbpf's log on stderr."),
) -> None:
    if verbose:
        from .._sys import libbpf

        libbpf.set_log_sink(lambda line: sys.stderr.write(line))

