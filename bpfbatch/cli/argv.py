"""The command line's conventions as data, shared by the typer app and the thin entry point.

Which commands exist and in which module (:data:`COMMANDS`), the global flags that also work
after the command (:func:`take_global_flags`), and bpftool's ``MAP`` keywords right after the
command (:func:`bpftool_map_form`). Both parsers apply exactly these functions to the same
argv, so the two cannot disagree about them. Imports nothing but sys: the thin entry point
reads this before it knows whether typer is needed.
"""

from __future__ import annotations

import sys

#: command name → (module under bpfbatch.cli, one-line help for ``bpfbatch --help``).
COMMANDS: dict[str, tuple[str, str]] = {
    "list": ("maps", "List the maps on the system, like bpftool map show."),
    "dump": ("maps", "Print a map's elements, typed from its BTF, read with batched lookups."),
    "count": ("maps", "Count a map's elements with one batched pass (bpftool has no count)."),
    "load": ("load", "Write records from FILE into the map in batches."),
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
    "filter": ("filter", "Your own exec filters, written in C."),
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

#: bpftool's ``MAP`` keywords → the option each one stands for (``dump id 42``).
MAP_KEYWORDS = {"id": "--map-id", "pinned": "--pinned", "name": "--name"}

#: The global flags, before or after the command, and what each one sets.
GLOBAL_FLAGS = {"-v": "verbose", "--verbose": "verbose", "-q": "quiet", "--quiet": "quiet"}


def set_global_flag(which: str) -> None:
    """Apply a global flag (a :data:`GLOBAL_FLAGS` value): ``verbose`` sends libbpf's log to
    stderr, ``quiet`` silences progress and summary lines."""
    if which == "verbose":
        from .._sys import libbpf

        libbpf.set_log_sink(lambda line: sys.stderr.write(line))
    elif which == "quiet":
        from . import options

        options.QUIET = True


def take_global_flags(args: list[str], value_flags: set[str]) -> tuple[list[str], list[str]]:
    """``args`` (a command's, after its name) without the global flags given there, and those
    flags' :data:`GLOBAL_FLAGS` values in order. The token after one of ``value_flags`` (the
    command's options that take a value) is that option's, and ``--`` ends the search."""
    kept, taken, previous = [], [], None
    for i, arg in enumerate(args):
        if arg == "--":
            return kept + args[i:], taken
        if arg in GLOBAL_FLAGS and previous not in value_flags:
            taken.append(GLOBAL_FLAGS[arg])
        else:
            kept.append(arg)
        previous = arg
    return kept, taken


def bpftool_map_form(args: list[str]) -> list[str]:
    """``args`` with bpftool's ``id N | pinned PATH | name NAME`` at their head spelled as
    the option it stands for (``--map-id N``)."""
    if len(args) >= 2 and args[0] in MAP_KEYWORDS:
        return [MAP_KEYWORDS[args[0]], *args[1:]]
    return args
