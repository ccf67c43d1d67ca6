"""The swap: TO's pin renamed over FROM's path in one step, so the next program version that
opens that path opens TO.

bpffs supports ``rename(2)``, which replaces the old pin atomically: a reader opening the path
gets the old map or the new one, never nothing. Programs already holding the old map keep it
(a pin is a name, not the map); what the swap changes is what the path names from then on.
TO need not be pinned: it is pinned next to ``path`` under a temporary name first.
"""

from __future__ import annotations

import errno
import os

from ..errors import InputError, from_errno

__all__ = ["swap"]


def swap(target, path: str, pinned: str | None) -> None:
    """Make ``path`` name ``target`` (a map; ``pinned``: where it is pinned now, if it is).
    An error names ``path``; nothing is renamed then."""
    if not os.path.exists(path):
        raise InputError("no pin to swap (--swap-pin names the path the old map is pinned "
                         "at)", obj=path)
    temporary = pinned is None or os.stat(pinned).st_dev != os.stat(path).st_dev
    if temporary:  # a name on the same bpffs, which rename(2) can move
        pinned = os.path.join(os.path.dirname(os.path.abspath(path)),
                              f".{os.path.basename(path)}.bpfbatch-{os.getpid()}")
        target.pin(pinned)
    try:
        os.rename(pinned, path)
    except OSError as exc:
        if temporary:
            os.unlink(pinned)
        raise from_errno("swap pins", exc.errno or errno.EIO, obj=path,
                         detail=f"rename {pinned} over it") from None
