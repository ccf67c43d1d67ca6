"""The swap: TO's pin renamed over FROM's path in one step, so the next program version that
opens that path opens TO.

bpffs supports ``rename(2)``, which replaces the old pin atomically: a reader opening the path
gets the old map or the new one, never nothing. Programs already holding the old map keep it
(a pin is a name, not the map); what the swap changes is what the path names from then on.

:func:`check` runs before anything is written (``--plan`` too): the path must be a pin of a
map, of FROM itself when FROM is a map — renaming over another map's pin would silently
unpin a map some program relies on. :func:`swap` then moves TO's pin; TO not pinned, or
pinned on another bpffs (a rename cannot cross file systems: EXDEV), is first pinned next to
the path under a temporary name (without a dot: bpffs refuses names that hold one), and the
pin it had on the other bpffs is removed once the rename is done, so that TO ends up pinned
at the path and only there, as a rename on one bpffs leaves it.
"""

from __future__ import annotations

import contextlib
import errno
import os

from ..errors import BpfBatchError, InputError, from_errno
from ..map.handle import MapHandle

__all__ = ["check", "swap"]


def check(path: str, source_id: int | None) -> None:
    """Refuse ``path`` unless it is a pinned map (``source_id``'s, when FROM is a map): the
    errors of opening a pin (no such path, not on bpffs, a program's pin) name the path."""
    try:
        with MapHandle.open_pinned(path, read_only=True) as pinned:
            found = pinned.info
    except BpfBatchError as exc:
        exc.message = f"--swap-pin: {exc.message}"
        raise
    if source_id is not None and found.id != source_id:
        raise InputError(f"--swap-pin: pins {found.label}, not FROM (the path to swap is the "
                         "one the old map is pinned at)", obj=path)


def swap(target, path: str, pinned: str | None) -> None:
    """Make ``path`` name ``target`` (a map; ``pinned``: where it is pinned now, if it is).
    An error names ``path``; nothing is renamed then, and no temporary pin is left. The
    caller holds signals back for the call (:func:`bpfbatch.interrupts.deferred`): the swap
    has happened or not, never half."""
    folder = os.path.dirname(os.path.abspath(path))
    moved = pinned is not None and _device(pinned) == _device(folder)
    source = pinned if moved else os.path.join(
        folder, f"{os.path.basename(path)}_bpfbatch_swap_{os.getpid()}")
    if not moved:
        target.pin(source)
    try:
        os.rename(source, path)
    except OSError as exc:
        if not moved:
            os.unlink(source)
        raise from_errno("swap pins", exc.errno or errno.EIO, obj=path,
                         detail=f"rename {source} over it") from None
    if pinned is not None and not moved:
        with contextlib.suppress(FileNotFoundError):  # unpinned meanwhile: as wanted
            os.unlink(pinned)


def _device(path: str) -> int | None:
    """The file system ``path`` is on (``None``: it is gone, e.g. unpinned meanwhile)."""
    try:
        return os.stat(path).st_dev
    except OSError:
        return None
