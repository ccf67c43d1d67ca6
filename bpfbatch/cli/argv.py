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
    "migrate": ("migrate", "Move a map's records into a map of a new layout, field by field "
                           "by name, and catch up with what changes meanwhile."),
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
    "record": ("record", "Write a ring buffer's or perf event array's events as they come, "
                         "typed from BTF, "
                         "each batch committed once written."),
    "diff": ("diff", "Compare two maps or files by key: added, removed, changed fields (exit "
                     "0 same, 1 differ, 2 trouble, like diff(1))."),
    "demo": ("demo", "Build a BTF-typed flow table, dump it, and time batched vs per-key "
                     "reading."),
    "bench": ("bench", "Time lookup, lookup_and_delete and delete of a hash map per key and "
                       "in batches of 10, 1000 and all."),
}

#: Options whose value may be left out, per command: the option alone means this value
#: (``migrate --catch-up`` is ``--catch-up=10``), which click's parser cannot say itself.
OPTIONAL_VALUES = {"migrate": {"--catch-up": "10"}}

#: bpftool's ``MAP`` keywords → the option each one stands for (``dump id 42``).
MAP_KEYWORDS = {"id": "--map-id", "pinned": "--pinned", "name": "--name"}
#: The commands whose arguments are maps in those words, read by the command itself
#: (``diff id 4 id 5``, ``migrate FROM TO``): there a keyword stands for no option.
MAP_WORD_ARGUMENTS = frozenset({"diff", "migrate"})

#: The global flags, before or after the command, and what each one sets. ``-j`` and ``-p``
#: are bpftool's: JSON output (``-o bpftool-json``: what ``bpftool -j`` prints; ``list``:
#: ``-o json``, bpftool's ``map show`` fields), ``-p`` the same pretty-printed as ``bpftool
#: -p`` prints it. A command that has a flag of its own spelled the same keeps it: ``tc
#: -j`` (tc's own JSON switch), ``top -p PID`` (bcc's), ``tcp-mmap -p PORT`` (the
#: selftest's), so those drop-ins read as the tools they replace.
GLOBAL_FLAGS = {"-v": "verbose", "--verbose": "verbose", "-q": "quiet", "--quiet": "quiet",
                "-j": "json", "--json": "json", "-p": "pretty", "--pretty": "pretty"}

#: The global options that take a value, before or after the command: the types of a map
#: without BTF (see :mod:`bpfbatch.records.typespec`). Each sets ``name=value``.
GLOBAL_OPTIONS = {"--key-type": "key_type", "--value-type": "value_type", "--btf": "btf"}

#: The format ``-j``/``-p`` stand for, per command (others: :data:`JSON_FORMAT`).
JSON_FORMATS = {"list": "json", "diff": "json"}
JSON_FORMAT = "bpftool-json"


#: iproute2's single-dash options of ``tc`` (``matches()``: any prefix) → ``bpfbatch tc``'s.
IPROUTE2_OPTIONS = (("-force", "--force"), ("-batch", "--batch"), ("-netns", "--netns"),
                    ("-json", "--json"))


def iproute2_form(args: list[str]) -> list[str]:
    """``args`` with tc's spelling of ``bpfbatch tc``'s options (``-force``, ``-ba``,
    ``-netns``) rewritten to the double-dash form when the command is ``tc`` (its first
    word); anything else unchanged."""
    return args if args[:1] != ["tc"] else ["tc", *iproute2_argv(args[1:])]


def iproute2_argv(argv: list[str]) -> list[str]:
    """``tc``'s spelling of ``bpfbatch tc``'s options (``-force``, ``-batch``, ``-netns``,
    ``-json``, any prefix tc accepts) rewritten to the double-dash form; everything else
    unchanged."""
    out = []
    for arg in argv:
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
            arg = next((long for short, long in IPROUTE2_OPTIONS if short.startswith(arg)), arg)
        out.append(arg)
    return out


def set_global_flag(which: str) -> None:
    """Apply a global flag (a :data:`GLOBAL_FLAGS` value, or ``name=value`` of a
    :data:`GLOBAL_OPTIONS` one): ``verbose`` sends libbpf's log to stderr, ``quiet``
    silences progress and summary lines, ``pretty`` pretty-prints bpftool's JSON (``json``
    alone changes only the format, by :func:`json_output`); ``key_type=``, ``value_type=``,
    ``btf=`` type a map without BTF when a command opens it."""
    from . import options

    if which == "verbose":
        from .._sys import libbpf

        options.VERBOSE = True
        libbpf.set_log_sink(lambda line: sys.stderr.write(line))
    elif which == "quiet":
        options.QUIET = True
    elif which == "pretty":
        options.PRETTY = True
    elif "=" in which:
        name, _, value = which.partition("=")
        options.TYPES[name] = value


def reset_global_flags() -> None:
    """Every global flag and option back to its default: each command line starts from
    these, also when one process runs several (tests, ``python -c``)."""
    from . import options

    options.QUIET = options.PRETTY = options.VERBOSE = False
    options.RUNTIME_STATUS = 1
    options.TYPES.clear()


def leading_global_flags(args: list[str]) -> tuple[list[str], int]:
    """The global flags and options at the head of ``args`` (before the command), as
    :func:`set_global_flag` takes them, and where the command starts. An option missing its
    value stops the search (the parser that reads the rest says so)."""
    taken, at = [], 0
    while at < len(args):
        arg = args[at]
        if arg in GLOBAL_FLAGS:
            taken.append(GLOBAL_FLAGS[arg])
        elif arg in GLOBAL_OPTIONS and at + 1 < len(args):
            at += 1
            taken.append(f"{GLOBAL_OPTIONS[arg]}={args[at]}")
        else:
            break
        at += 1
    return taken, at


def take_global_flags(args: list[str], value_flags: set[str], own_flags: set[str] = frozenset()
                      ) -> tuple[list[str], list[str]]:
    """``args`` (a command's, after its name) without the global flags and options given
    there, and what they set, in order (:func:`set_global_flag`'s forms). The token after
    one of ``value_flags`` (the command's options that take a value) is that option's, a flag
    in ``own_flags`` (the command's own spellings) stays the command's, and ``--`` ends the
    search."""
    kept, taken, previous = [], [], None
    tokens = iter(enumerate(args))
    for i, arg in tokens:
        if arg == "--":
            return kept + args[i:], taken
        name, eq, attached = arg.partition("=")
        if previous in value_flags or arg in own_flags:
            kept.append(arg)
        elif arg in GLOBAL_FLAGS:
            taken.append(GLOBAL_FLAGS[arg])
        elif name in GLOBAL_OPTIONS and name not in own_flags and (eq or i + 1 < len(args)):
            taken.append(f"{GLOBAL_OPTIONS[name]}={attached if eq else next(tokens)[1]}")
            arg = None
        else:
            kept.append(arg)
        previous = arg
    return kept, taken


def json_output(command: str, args: list[str], flags: list[str], output_flags: set[str]
                ) -> list[str]:
    """``args`` with ``--output FORMAT`` added when the global ``flags`` ask for JSON (``-j``,
    ``-p``), the command has an output option (its spellings: ``output_flags``) and ``args``
    do not already give one (an explicit ``-o`` wins)."""
    if not output_flags or not {"json", "pretty"} & set(flags):
        return args
    for arg in args:
        if arg == "--":
            break
        if arg in output_flags or arg.partition("=")[0] in output_flags or any(
                f[1] != "-" and arg.startswith(f) for f in output_flags):
            return args
    return [*args, "--output", JSON_FORMATS.get(command, JSON_FORMAT)]


def optional_values(command: str, args: list[str]) -> list[str]:
    """``args`` with each option of :data:`OPTIONAL_VALUES` given without a value spelled
    with its implied one (``--catch-up`` → ``--catch-up=10``; ``--catch-up 3`` keeps its
    number); nothing after ``--``."""
    implied = OPTIONAL_VALUES.get(command)
    if not implied:
        return args
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "--":
            break
        if arg in implied and not (i + 1 < len(out) and out[i + 1].isdigit()):
            out[i] = f"{arg}={implied[arg]}"
    return out


def bpftool_map_form(args: list[str]) -> list[str]:
    """``args`` with bpftool's ``id N | pinned PATH | name NAME`` at their head spelled as
    the option it stands for (``--map-id N``); a keyword alone too (``dump id`` then lacks
    the option's value, and a shell's <TAB> there completes it)."""
    if args and args[0] in MAP_KEYWORDS:
        return [MAP_KEYWORDS[args[0]], *args[1:]]
    return args
