"""``bpfbatch tc -b FILE``: send an iproute2 ``tc -batch`` file over rtnetlink, many messages
per sendmsg. Failed commands print as tc prints them (kernel text, then ``Command failed
FILE:LINE``); the closing one-line error says what was applied, and exit status is 1."""

from __future__ import annotations

import sys

import typer

from ..errors import InputError

commands = typer.Typer()


def _print_failure(failure) -> None:
    """As tc: the kernel's explanation (or errno text), then ``Command failed FILE:LINE``."""
    if failure.extack:
        print(f"Error: {failure.extack}.", file=sys.stderr)
    elif failure.errno is not None:
        print(f"RTNETLINK answers: {failure.text}", file=sys.stderr)
    else:
        print(failure.text, file=sys.stderr)
    print(f"Command failed {failure.where}", file=sys.stderr)


@commands.command("tc")
def tc_batch(
    batch: str = typer.Option(..., "-b", "--batch", metavar="FILE",
                              help="tc batch file (iproute2 `tc -batch` syntax); '-' reads stdin."),
    force: bool = typer.Option(False, "-f", "--force",
                               help="Keep going after a failed command (exit status stays 1)."),
    netns: str = typer.Option(None, "-n", "--netns", metavar="NAME",
                              help="Network namespace (`ip netns` name) to configure."),
    batch_bytes: int = typer.Option(None, "--batch-bytes", metavar="N", min=1024,
                                    help="Bytes per sendmsg (default 256 KiB; capped by the "
                                         "socket's send limit)."),
    coalesce: bool = typer.Option(False, "--coalesce",
                                  help="Pack consecutive `actions add` lines up to 32 per message."),
) -> None:
    """Send a tc batch file: qdisc/filter/actions lines, many rtnetlink messages per sendmsg."""
    from ..tc import DEFAULT_BATCH_BYTES, Session, raise_for

    if batch == "-":
        stream, name = sys.stdin, "-"
    else:
        try:
            stream, name = open(batch, encoding="utf-8", errors="surrogateescape"), batch
        except OSError as exc:
            raise InputError(f"cannot open batch file: {exc.strerror}", obj=batch) from None
    with stream, Session(netns=netns, force=force, coalesce=coalesce, on_failure=_print_failure,
                         batch_bytes=batch_bytes or DEFAULT_BATCH_BYTES) as session:
        report = session.send_batch(stream, name)
    raise_for(report)
