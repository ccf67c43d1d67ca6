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
    batch_size: Annotated[Optional[int], typer.Option(
        "--batch-size", min=1, help="Elements per batch syscall (overrides the file's "
                                    "batch_size); bounds what SIGKILL can lose in drain mode.")
    ] = None,
    check: Annotated[bool, typer.Option(
        "--check", help="Check the configuration against the live maps and exit; nothing is "
                        "served, read or drained.")] = False,
) -> None:
    """Serve BPF maps as Prometheus metrics, each map read in batches once per scrape.

    An error in the file itself is a usage error (exit 2); one found against the live maps
    (a missing field, a map that is not there) exits 1, at --check as at start-up: the
    exporter binds every metric before it listens."""
    from ..export import config as export_config
    from ..export import server

    try:
        conf = export_config.load(config, listen=listen, batch_size=batch_size)
    except export_config.ConfigError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--config'") from None
    if check:
        for line in server.check(conf):
            print(line)
        print(f"{config}: ok, {len(conf.metrics)} metrics")
        return
    server.serve(conf, announce=lambda url: print(f"bpfbatch export: serving {url}",
                                                   file=sys.stderr, flush=True))
