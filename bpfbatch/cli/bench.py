"""``bpfbatch bench``: the 2019 map-batch cover letter's table, measured on this kernel
(see :mod:`bpfbatch.labs.covertable`)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..errors import InputError

commands = typer.Typer()


@commands.command("bench")
def bench(
    entries: Annotated[int, typer.Option("--entries", help="Elements in the hash map.")] = 1_000_000,
    rounds: Annotated[int, typer.Option("--rounds", help="Rounds per cell; the median is shown.")] = 1,
    plot_file: Annotated[Optional[str], typer.Option("--plot", help="Also draw the table as a PNG chart.")] = None,
) -> None:
    """Time lookup, lookup_and_delete and delete of a hash map per key and in batches of 10,
    1000 and all (the 2019 batch-ops cover letter's table)."""
    if entries < 1:
        raise InputError(f"must be a positive number, got {entries}", obj="--entries")
    if rounds < 1:
        raise InputError(f"must be a positive number, got {rounds}", obj="--rounds")
    from ..labs.covertable import check_plot, measure, plot, render

    if plot_file:
        check_plot(plot_file)  # before minutes of measuring
    results = measure(entries, rounds)
    print(f"{entries:,}-entry hash map (u32 key, u64 value), median of {rounds} round(s); "
          "(N×) = speed-up over no batching\n")
    print(render(results, entries))
    if plot_file:
        plot(results, entries, plot_file)
        print(f"\nchart written to {plot_file}")
