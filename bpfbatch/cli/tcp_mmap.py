"""``bpfbatch tcp-mmap``: TCP receive zero-copy and its sender, with the option letters and
defaults of the kernel selftest ``tcp_mmap`` (``tools/tcp_mmap.py`` runs this command).

Every mistake on the command line ends as the rest of the CLI's errors do, in one line naming
the option (``bpfbatch: error: -C: not a size: 'lots' ...``) and status 1, the selftest's
``error(1, ...)``: click's usage errors (an unknown option, a non-integer port) are turned
into :class:`~bpfbatch.errors.InputError` before they become a usage screen.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Sequence
from typing import Optional

import typer

from ..errors import BpfBatchError, InputError
from ..tcp_mmap.config import DEFAULT_CHUNK, DEFAULT_PORT, DEFAULT_SIZE, Config, parse_size

commands = typer.Typer()

#: click's usage error (typer re-exports only its subclass BadParameter; newer typer releases
#: vendor click, so the class is reached through that public name).
_UsageError = next(cls for cls in typer.BadParameter.__mro__ if cls.__name__ == "UsageError")


def _as_input_error(exc: Exception) -> InputError:
    """A click usage error as one line naming the option it is about."""
    param = getattr(exc, "param", None)
    if param is not None and getattr(param, "opts", None):
        text, obj = exc.message, param.opts[0]
    else:
        text, obj = exc.format_message(), None
    text = text.rstrip(".")
    return InputError(text[:1].lower() + text[1:], obj=obj)


class _OneLineUsage(typer.core.TyperCommand):
    """A command whose usage errors are :class:`InputError`, printed by ``cli.main`` in one
    line, instead of click's usage screen."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except _UsageError as exc:
            raise _as_input_error(exc) from None


def _config(params: dict) -> Config:
    """The command's parameters → a validated :class:`Config` (raises :class:`InputError`
    naming the option). Sizes left out keep the selftest's defaults."""
    if params["ipv4"] and params["ipv6"]:
        raise InputError("-4 and -6 are mutually exclusive", obj="-4/-6")
    if params["connections"] is not None and not params["server"]:
        raise InputError("only a server (-s) takes it", obj="--connections")
    sizes = {field: parse_size(params[field], option)
             for field, option in (("chunk_size", "-C"), ("align", "-a"),
                                   ("pacing_rate", "-P"), ("size", "-n"))
             if params[field] is not None}
    return Config(server=params["server"], host=params["host"], port=params["port"],
                  family=socket.AF_INET if params["ipv4"] else socket.AF_INET6,
                  zerocopy=params["zerocopy"], mss=params["mss"], hash=params["hash"],
                  connections=params["connections"], **sizes).validate()


@commands.command("tcp-mmap", cls=_OneLineUsage,
                  context_settings={"help_option_names": ["-h", "--help"]})
def tcp_mmap(
    ctx: typer.Context,
    server: bool = typer.Option(False, "-s", "--server",
                                help="Receive: listen and serve each connection in its own "
                                     "thread."),
    host: Optional[str] = typer.Option(None, "-H", "--host", metavar="HOST",
                                       help="Send to HOST (with -s: the address to listen on)."),
    ipv4: bool = typer.Option(False, "-4", help="IPv4."),
    ipv6: bool = typer.Option(False, "-6", help="IPv6 (the default)."),
    port: int = typer.Option(DEFAULT_PORT, "-p", "--port",
                             help="TCP port (a server may say 0)."),
    zerocopy: bool = typer.Option(False, "-z", "--zerocopy",
                                  help="Zero-copy: MSG_ZEROCOPY when sending, mmap + "
                                       "TCP_ZEROCOPY_RECEIVE when receiving."),
    chunk_size: Optional[str] = typer.Option(None, "-C", "--chunk-size", metavar="SIZE",
                                             help="Bytes per send / per receive (and "
                                                  f"SO_RCVLOWAT); default {DEFAULT_CHUNK >> 10}K."),
    align: Optional[str] = typer.Option(None, "-a", "--align", metavar="SIZE",
                                        help="Alignment of each receiver's mapping (default: "
                                             "the huge page size from /proc/meminfo, else 2M)."),
    mss: int = typer.Option(0, "-M", "--mss", help="TCP_MAXSEG (0: the kernel's)."),
    hash: bool = typer.Option(False, "-x", "--hash",
                              help="SHA-256 the data on both ends; the client checks they "
                                   "match."),
    pacing_rate: Optional[str] = typer.Option(None, "-P", "--pacing-rate", metavar="RATE",
                                              help="SO_MAX_PACING_RATE in bytes per second "
                                                   "(sender)."),
    size: Optional[str] = typer.Option(None, "-n", "--size", metavar="SIZE",
                                       help=f"Bytes to send (client; default "
                                            f"{DEFAULT_SIZE >> 30}G)."),
    connections: Optional[int] = typer.Option(None, "--connections", metavar="N",
                                              help="Server: exit after N connections "
                                                   "(default: serve until ^C)."),
) -> None:
    """TCP receive zero-copy (mmap + TCP_ZEROCOPY_RECEIVE) and its sender, after the kernel
    selftest tcp_mmap. Loopback recipe: '-s -z -M 4108' and '-H ::1 -z -M 4108'."""
    config = _config(ctx.params)
    if config.server:
        _serve(config)  # until --connections, or ^C (typer exits 130)
    else:
        from ..tcp_mmap.sender import send

        print(send(config).format(), flush=True)


def parse_args(argv: Sequence[str]) -> Config:
    """``bpfbatch tcp-mmap ARGV``'s :class:`Config`, or the :class:`InputError` it would
    print: the command's own parsing, without running it."""
    command = typer.main.get_group(commands).commands["tcp-mmap"]
    with command.make_context("tcp-mmap", list(argv)) as ctx:
        return _config(ctx.params)


def _serve(config: Config) -> None:
    """Serve until ``--connections`` or ^C, printing each connection's report on stdout or
    its error in one line on stderr; exit 1 when any failed or ended without a report."""
    from ..tcp_mmap.server import Result, Server
    from ..tcp_mmap.sockets import describe

    failed = threading.Event()

    def show(result: Result) -> None:
        if isinstance(result, BpfBatchError):
            failed.set()
            print(f"bpfbatch: error: {result}", file=sys.stderr, flush=True)
        else:
            print(result.format(), flush=True)

    with Server(config) as server:
        print(f"listening on {describe(server.address)}", file=sys.stderr, flush=True)
        results = server.serve(config.connections, on_result=show)
        missing = server.accepted - len(results)
    if missing:
        raise BpfBatchError(f"{missing} of {server.accepted} connections ended without a report")
    if failed.is_set():
        raise typer.Exit(1)
