"""The thin entry point's parser: the quick commands without typer.

Why it exists: ``count``, ``list`` and ``dump`` of a small map must finish in under 0.75× the
time the interpreter takes to ``import numpy`` (README, "Start-up"): ~60 ms here, of which
the bare interpreter takes ~21. Importing typer and the click it carries took ~25 ms of CPU
time (26 ms by ``python -X importtime``), and the commands themselves need ~35, so no command
that goes through typer can keep that budget; through this parser ``count`` starts in ~40 ms
and ``dump`` in ~56 (65 and 83 ms before this parser and the other start-up work).

The contract: :func:`parse` returns a :class:`Call` only for an argv it understands
completely, and that call is the one typer would make — the same body
(:class:`~.options.Command`, declared once, from which typer's command is built too), the
same keyword values, the same global flags. For anything else it returns ``None`` and
:func:`bpfbatch.cli.main` hands the argv to typer unchanged, so every help text, usage error
and completion is typer's. What it understands is what click accepts, read the way click
reads it:

- the global flags (``-v``, ``-q``, ``-j``, ``-p`` and their long forms) and options
  (``--key-type T``, ``--value-type T``, ``--btf FILE``) before the command, each a token
  (or two) of its own;
- a command whose module declares it as data (:mod:`.maps`: ``count``, ``list``, ``dump``;
  :mod:`.load`: ``load``; :mod:`.tcbatch`: ``tc -b FILE``, after iproute2's spellings are
  rewritten as for typer), with exactly its positional arguments (``load``'s FILE, ``-``
  included), anywhere among the options as click takes them;
- after the name, the global flags and bpftool's ``id N | pinned PATH | name NAME`` through
  the same functions typer's group applies (:mod:`.argv`);
- ``--opt value``, ``--opt=value``, ``--flag``, ``-o value``, ``-ovalue``, runs of short
  flags (``-ff``); an option's value is the next token whatever it looks like (``--pinned
  -v`` names a pin called ``-v``), as click takes it;
- an option given twice keeps its last value, a repeatable one (``--decode``) all of them;
  an integer is converted as click converts it, by ``int(text)``.

Declined, so typer answers: no command, another command, more or fewer positional tokens
than the command's arguments (``tc apply FILE``), an option that must be given missing (``tc``
without ``-b``), ``--``, an option the command does not have (``-h``, ``--help``, an
abbreviation, a global flag run together with another), ``--flag=value``, an option missing
its value, an integer that does not convert or is below its minimum.
``tests/unit/test_fastpath.py`` checks the contract against typer with generated argv lists.
"""

from __future__ import annotations

import importlib

from . import argv
from .argv import COMMANDS
from .options import REQUIRED, Command, Commands, Option


class Call:
    """A parsed command line: ``command.body(**values)`` after setting the global ``flags``
    (as :func:`.argv.set_global_flag` takes them)."""

    __slots__ = ("command", "values", "flags")

    def __init__(self, command: Command, values: dict, flags: list[str]) -> None:
        self.command, self.values, self.flags = command, values, flags

    def __call__(self) -> int | None:
        """Run it: the body's exit status (``tc -b``'s; ``None``, 0, for the others)."""
        for flag in self.flags:
            argv.set_global_flag(flag)
        return self.command.body(**self.values)


def parse(args: list[str]) -> Call | None:
    """The call ``bpfbatch ARGS`` makes, or ``None`` when typer is to read ``args``."""
    args = argv.iproute2_form(args)
    flags, at = argv.leading_global_flags(args)
    command = declared(args[at]) if at < len(args) else None
    if command is None:
        return None
    rest, late_flags = argv.take_global_flags(args[at + 1:], command.value_flags,
                                              command.own_flags)
    flags += late_flags
    if command.takes_map:
        rest = argv.bpftool_map_form(rest)
    rest = argv.json_output(command.name, rest, flags, command.output_flags)
    values = parse_options(command, rest)
    return None if values is None else Call(command, values, flags)


#: Commands whose typer module is not typer-free: the module that declares their fast form
#: (``tc -b FILE``; ``tc apply`` and ``tc dump`` stay typer's).
FAST_FORMS = {"tc": "tcbatch"}


def declared(name: str) -> Command | None:
    """The command ``name`` if its module declares it as data."""
    if name not in COMMANDS:
        return None
    module = importlib.import_module(f".{FAST_FORMS.get(name, COMMANDS[name][0])}", __package__)
    commands = getattr(module, "commands", None)
    return commands.get(name) if isinstance(commands, Commands) else None


def parse_options(command: Command, args: list[str]) -> dict | None:
    """``command``'s keyword values from its options in ``args`` (defaults for the rest), or
    ``None`` if click would not accept ``args`` or would read them otherwise."""
    long = {flag: o for o in command.options for flag in o.flags if flag[:2] == "--"}
    short = {flag: o for o in command.options for flag in o.flags if flag[:2] != "--"}
    given: dict[str, list[str]] = {}
    positional: list[str] = []
    tokens = list(args)
    while tokens:
        arg = tokens.pop(0)
        if arg == "--":
            return None
        if arg[:1] != "-" or len(arg) == 1:  # "-" too: a file that is stdin
            positional.append(arg)
            continue
        name, eq, attached = arg.partition("=")
        if name in long:  # click tries the part before "=" as a long option first
            option = long[name]
            if option.takes_value:
                found = [(option, attached if eq else _next(tokens))]
            else:
                found = [(option, None if eq else "")]  # "--sum=1": takes no value
        elif arg[:2] == "--":
            return None
        else:
            found = _short_options(arg, tokens, short)
        for option, value in found:
            if value is None:
                return None
            given.setdefault(option.param, []).append(value)
    arguments = command.arguments
    if len(positional) != len(arguments):
        return None  # click's usage error: missing or extra arguments
    if any(option.default is REQUIRED and option.flags and option.param not in given
           for option in command.options):
        return None  # an option that must be given is missing (tc without -b): typer says so
    values = {option.param: option.default for option in command.options}
    values.update((option.param, text) for option, text in zip(arguments, positional))
    for option in command.options:
        if option.param not in given:
            continue
        texts = given[option.param]
        if option.kind is list:
            values[option.param] = texts
        elif option.kind is bool:
            values[option.param] = True
        elif option.kind is int:
            try:
                values[option.param] = int(texts[-1])
            except ValueError:
                return None
            if option.minimum is not None and values[option.param] < option.minimum:
                return None
        else:
            values[option.param] = texts[-1]
    return values


def _short_options(arg: str, tokens: list[str], short: dict[str, Option]
                   ) -> list[tuple[Option | None, str | None]]:
    """``-abc`` as click reads it: flags in turn, until an option that takes a value takes
    the rest of the token, or the next token. A value ``None`` (or an unknown option) means
    click would not accept it."""
    found = []
    for at in range(1, len(arg)):
        option = short.get("-" + arg[at])
        if option is None:
            return [(None, None)]
        if not option.takes_value:
            found.append((option, ""))
            continue
        found.append((option, arg[at + 1:] or _next(tokens)))
        break
    return found


def _next(tokens: list[str]) -> str | None:
    """The next token, taken as an option's value; ``None`` when there is none."""
    return tokens.pop(0) if tokens else None
