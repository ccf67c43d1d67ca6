"""typer's view of the declared options and commands (:mod:`.options`).

:func:`annotation` turns an :class:`~.options.Option` into the ``Annotated[...,
typer.Option(...)]`` a typer function's parameter carries, and :func:`typer_app` turns a
module's declared :class:`~.options.Commands` into a ``typer.Typer`` whose commands call the
same bodies the thin entry point calls: typer builds its parser, help and completion from a
signature made of the declarations, exactly as if each body had been written as a typer
function. The aliases below are those annotations for the commands still written as typer
functions (``map_id: MapId = None``).
"""

from __future__ import annotations

import inspect
from typing import Annotated, Optional

import typer

from .options import (
    BATCH_SIZE,
    DECODE,
    INPUT_FILE,
    INPUT_FORMAT,
    MAP_ID,
    NAME,
    OUTPUT,
    PINNED,
    REQUIRED,
    Command,
    Commands,
    Option,
)

#: An option's kind → the type typer reads (``None``: ``default=None`` makes it Optional).
_TYPES = {int: int, str: str, bool: bool, list: list[str]}


def annotation(option: Option):
    """``Annotated[type, typer.Option(*flags, help=..., metavar=..., min=...)]`` for
    ``option``; ``typer.Argument(help=...)`` for an argument (no flags)."""
    kind = _TYPES[option.kind]
    if not option.flags:
        return Annotated[kind, typer.Argument(help=option.help)]
    extra = {"metavar": option.metavar} if option.metavar else {}
    if option.minimum is not None:
        extra["min"] = option.minimum
    if option.complete is not None:
        from . import complete

        extra["autocompletion"] = getattr(complete, option.complete)
    info = typer.Option(*option.flags, help=option.help, **extra)
    optional = option.default is None or option.default is REQUIRED  # typer: None if absent
    return Annotated[Optional[kind] if optional else kind, info]


def typer_app(commands: Commands) -> typer.Typer:
    """A ``typer.Typer`` with one command per declaration in ``commands``."""
    app = typer.Typer()
    for command in commands.values():
        app.command(command.name)(_signed(command))
    return app


def _signed(command: Command):
    """A function typer can read: the declared options as its keyword parameters, the body's
    docstring as its help; calling it calls ``command.body`` with what typer parsed."""
    def run(**values) -> None:
        command.body(**values)

    run.__name__ = run.__qualname__ = command.body.__name__
    run.__doc__ = command.body.__doc__
    run.__signature__ = inspect.Signature(_parameters(command, required=True))
    return run


def group_callback(command: Command, run):
    """``run(ctx, **values)`` as the callback of a typer group that is also ``command`` when
    no subcommand is named (``tc -b FILE`` beside ``tc apply``): ``command``'s declared
    options as its parameters, after the click context. An option that must be given is
    optional to typer there (a subcommand may run instead): ``run`` says when it is missing."""
    run.__signature__ = inspect.Signature([
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                          annotation=typer.Context),
        *_parameters(command, required=False)])
    return run


def _parameters(command: Command, *, required: bool) -> list[inspect.Parameter]:
    """The declared options as keyword parameters (``required``: REQUIRED ones without a
    default, else ``None``)."""
    return [inspect.Parameter(option.param, inspect.Parameter.KEYWORD_ONLY,
                              default=None if option.default is REQUIRED and not required
                              else inspect.Parameter.empty if option.default is REQUIRED
                              else option.default, annotation=annotation(option))
            for option in command.options]


MapId = annotation(MAP_ID)
Pinned = annotation(PINNED)
Name = annotation(NAME)
BatchSize = annotation(BATCH_SIZE)
Output = annotation(OUTPUT)
Decode = annotation(DECODE)
InputFile = annotation(INPUT_FILE)
InputFormat = annotation(INPUT_FORMAT)
