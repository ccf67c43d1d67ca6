"""``bpfbatch tc``: send an iproute2 ``tc -batch`` file over rtnetlink, many messages per sendmsg."""

from __future__ import annotations

from . import app


@app.command("tc")
def tc_batch() -> None:
    """Send a tc batch file (not implemented yet)."""
    raise NotImplementedError
