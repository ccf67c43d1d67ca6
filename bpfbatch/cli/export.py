"""``bpfbatch export``: serve BPF maps as Prometheus metrics (:mod:`bpfbatch.export`)."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

commands = typer.Typer()


@commands.command("export")
def export(
    config: Annotated[str, typer.Option("--config", help="The metrics, as a TOML file.")],
    listen: Annotated[Optional[str], typer.Option(
        "--listen", help="HOST:PORT to serve /metrics on (overrides the file's listen).")] = None,
    check: Annotated[bool, typer.Option(
        "--check", help="Check the configuration against the live maps and exit; nothing is "
                        "served, read or drained.")] = False,
) -> None:
    """Serve BPF maps as Prometheus metrics, each map read in batches once per scrape."""
    from ..export import config as export_config
    from ..export import server

    conf = export_config.load(config, listen=listen)
    if check:
        for line in server.check(conf):
            print(line)
        print(f"{config}: ok, {len(conf.metrics)} metrics")
        return
    server.serve(conf, announce=lambda url: print(f"bpfbatch export: serving {url}",
                                                   file=sys.stderr, flush=True))
