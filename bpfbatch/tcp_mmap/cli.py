"""Command line of ``tools/tcp_mmap.py``: the selftest's option letters, one-line errors.

Usage errors and every :class:`~bpfbatch.errors.BpfBatchError` end the same way: one line
``tcp_mmap: error: ...`` on stderr and a non-zero status (2 for bad input, 1 otherwise).
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
from collections.abc import Sequence

from ..errors import BpfBatchError, InputError
from .config import DEFAULT_CHUNK, DEFAULT_PORT, DEFAULT_SIZE, Config, parse_size
from .sender import send
from .server import Result, Server
from .sockets import describe

PROG = "tcp_mmap"


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so errors stay one line."""

    def error(self, message: str):
        raise InputError(message)


def _size(option: str):
    return lambda text: parse_size(text, option)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="TCP receive zero-copy (mmap + TCP_ZEROCOPY_RECEIVE) and its sender, "
                    "after the kernel selftest tcp_mmap. Loopback recipe: "
                    "'-s -z -M 4108' and '-H ::1 -z -M 4108'.")
    mode = parser.add_argument_group("mode")
    mode.add_argument("-s", "--server", action="store_true",
                      help="receive: listen and serve each connection in its own thread")
    mode.add_argument("-H", "--host", metavar="HOST",
                      help="send to HOST (with -s: the address to listen on)")
    family = parser.add_mutually_exclusive_group()
    family.add_argument("-4", dest="family", action="store_const", const=socket.AF_INET,
                        help="IPv4")
    family.add_argument("-6", dest="family", action="store_const", const=socket.AF_INET6,
                        help="IPv6 (the default)")
    parser.add_argument("-p", "--port", type=int, default=DEFAULT_PORT,
                        help=f"TCP port (default {DEFAULT_PORT}; a server may say 0)")
    parser.add_argument("-z", "--zerocopy", action="store_true",
                        help="zero-copy: MSG_ZEROCOPY when sending, mmap + TCP_ZEROCOPY_RECEIVE "
                             "when receiving")
    parser.add_argument("-C", "--chunk-size", type=_size("-C"), default=DEFAULT_CHUNK,
                        metavar="SIZE", help="bytes per send / per receive (and SO_RCVLOWAT); "
                                             "default 512K")
    parser.add_argument("-a", "--align", type=_size("-a"), default=0, metavar="SIZE",
                        help="alignment of each receiver's mapping (default: the huge page "
                             "size from /proc/meminfo, else 2M)")
    parser.add_argument("-M", "--mss", type=int, default=0, help="TCP_MAXSEG")
    parser.add_argument("-x", "--hash", action="store_true",
                        help="SHA-256 the data on both ends; the client checks they match")
    parser.add_argument("-P", "--pacing-rate", type=_size("-P"), default=0, metavar="RATE",
                        help="SO_MAX_PACING_RATE in bytes per second (sender)")
    parser.add_argument("-n", "--size", type=_size("-n"), default=DEFAULT_SIZE, metavar="SIZE",
                        help="bytes to send (client; default 1G)")
    parser.add_argument("--connections", type=int, metavar="N",
                        help="server: exit after N connections (default: serve until ^C)")
    return parser


def parse_args(argv: Sequence[str]) -> Config:
    """argv → a validated :class:`Config`; raises :class:`InputError` naming the option."""
    args = build_parser().parse_args(list(argv))
    if args.connections is not None and not args.server:
        raise InputError("only a server (-s) takes it", obj="--connections")
    return Config(server=args.server, host=args.host, port=args.port,
                  family=args.family or socket.AF_INET6, zerocopy=args.zerocopy,
                  chunk_size=args.chunk_size, align=args.align, mss=args.mss, hash=args.hash,
                  pacing_rate=args.pacing_rate, size=args.size,
                  connections=args.connections).validate()


def _serve(config: Config) -> int:
    failed = threading.Event()

    def show(result: Result) -> None:
        if isinstance(result, BpfBatchError):
            failed.set()
            print(f"{PROG}: error: {result}", file=sys.stderr, flush=True)
        else:
            print(result.format(), flush=True)

    with Server(config) as server:
        print(f"listening on {describe(server.address)}", file=sys.stderr, flush=True)
        results = server.serve(config.connections, on_result=show)
        missing = server.accepted - len(results)
    if missing:
        print(f"{PROG}: error: {missing} of {server.accepted} connections ended without a "
              f"report", file=sys.stderr, flush=True)
    return 1 if failed.is_set() or missing else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool; return the exit status."""
    try:
        config = parse_args(sys.argv[1:] if argv is None else argv)
        if config.server:
            return _serve(config)
        print(send(config).format(), flush=True)
        return 0
    except InputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except BpfBatchError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
