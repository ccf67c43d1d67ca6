"""Run a block inside a named network namespace (``ip netns`` names, /run/netns/NAME).

Sockets keep the namespace they were created in, so the sender only needs the namespace while
it opens its sockets; afterwards the thread returns to where it was and the process as a whole
never moves.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

from ..errors import NotFoundError, from_errno

CLONE_NEWNET = 0x40000000
NETNS_RUN_DIR = "/run/netns"

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int, obj: str) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        raise from_errno("enter network namespace", ctypes.get_errno(), obj=obj)


def path_of(name: str) -> str:
    """The file of netns ``name``: an ``ip netns`` name, or a path (with a ``/``)."""
    return name if "/" in name else os.path.join(NETNS_RUN_DIR, name)


@contextlib.contextmanager
def entered(name: str | None) -> Iterator[None]:
    """Within the block this thread is in netns ``name`` (no-op for None)."""
    if name is None:
        yield
        return
    path = path_of(name)
    try:
        target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise NotFoundError("no such network namespace", obj=f"netns '{name}'",
                            errno=exc.errno) from None
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(target, f"netns '{name}'")
        try:
            yield
        finally:
            _setns(home, "original network namespace")
    finally:
        os.close(target)
        os.close(home)
