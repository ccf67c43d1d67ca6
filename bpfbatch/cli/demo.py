"""``bpfbatch demo``: the README's main job on a map it makes itself."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..errors import InputError

commands = typer.Typer()


@commands.command("demo")
def demo(
    entries: Annotated[int, typer.Option("--entries", help="Flows to create.")] = 1_000_000,
    pin: Annotated[Optional[str], typer.Option(
        "--pin", help="Keep the map pinned at this bpffs path to explore it afterwards.")] = None,
) -> None:
    """Build a BTF-typed flow table, dump it, and time batched vs per-key reading."""
    if entries <= 0:
        raise InputError(f"must be positive, got {entries}", obj="--entries")
    from ..labs import demo as demo_lib

    demo_lib.run(entries, pin=pin)
