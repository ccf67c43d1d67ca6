"""``bpfbatch filter build``: compile your own ``exec --filter-obj`` filter from C, with the
headers the package installs (see :mod:`bpfbatch.exec.build`)."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

commands = typer.Typer()

group = typer.Typer(help="Your own exec filters, written in C.", no_args_is_help=True,
                    context_settings={"help_option_names": ["-h", "--help"]})
commands.add_typer(group, name="filter")


@group.command("build")
def build(
    source: Annotated[str, typer.Argument(help="The filter's C source, e.g. f.bpf.c.")],
    output: Annotated[Optional[str], typer.Option(
        "-o", "--output", help="The object to write (default: SOURCE with .o for .c).")] = None,
    include: Annotated[Optional[list[str]], typer.Option(
        "-I", help="Also search this folder for headers (before the package's); repeatable.")] = None,
    clang: Annotated[Optional[str], typer.Option(
        "--clang", help="The compiler (default: $CLANG, clang, or the newest clang-NN on "
                        "PATH).")] = None,
) -> None:
    """Compile a filter for exec --filter-obj: clang -g -O2 -target bpf against the package's
    bpfbatch_filter.h, flowtable.h and libbpf's bpf/bpf_helpers.h, with a vmlinux.h generated
    from the running kernel's BTF when the source's folder has none.

    Then: bpfbatch exec MAP --filter-obj f.bpf.o --filter-prog NAME.
    """
    from ..exec import build as builder
    from . import options

    out = builder.build(source, output, clang=clang, includes=tuple(include or ()))
    if not options.QUIET:
        print(f"built {out}", file=sys.stderr)
