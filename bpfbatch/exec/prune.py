"""Pruning: delete the elements of a flow table whose timestamp field is older than a cutoff,
once or every interval, on top of :mod:`bpfbatch.exec.walker`.

The predicate is ``FIELD < now - OLDER_THAN`` (``and (WHERE)`` when an extra condition is
given), evaluated against ``now`` taken at the start of each round. Plain and LRU hashes and
their per-CPU variants are supported; for per-CPU maps the newest timestamp across CPUs counts
(:mod:`bpfbatch.exec.predicate`). In the kernel path one program is loaded for the whole loop and run
once per round.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator

from ..api import Map
from ..errors import InputError
from ..records.codec import map_codecs
from . import walker
from .predicate import Predicate, compile_predicate


@dataclasses.dataclass(frozen=True)
class Round:
    number: int
    result: walker.ExecResult
    dry_run: bool


def prune_predicate(m: Map, field: str, older_than_ns: int, where: str | None = None
                    ) -> Predicate:
    """``field < now - older_than`` [``and (where)``], compiled for ``m``.

    The field is checked on its own first, so an error points into ``--field``, not into
    text the user did not write.
    """
    if older_than_ns <= 0:
        raise InputError(f"must be positive, got {older_than_ns} ns", obj="older_than_ns")
    key, value = map_codecs(m.info)
    compile_predicate(f"{field} < now", value, key=key, source="field")
    text = f"{field} < now - {older_than_ns}ns"
    if where and where.strip():
        compile_predicate(where, value, key=key, source="where")  # errors point into where
        text = f"{text} and ({where})"
    return compile_predicate(text, value, key=key, source="prune predicate")


def prune_rounds(m: Map, predicate: Predicate, *, every_ns: int | None = None,
                 max_deleted: int = 0, dry_run: bool = False, mode: str = "auto",
                 stop: threading.Event | None = None) -> Iterator[Round]:
    """Prune once, or every ``every_ns`` until ``stop`` is set; yield each round.

    ``dry_run`` counts what would go and deletes nothing; ``max_deleted`` caps one round.
    The wait between rounds starts when a round ends.
    """
    stop = stop or threading.Event()
    action = "count" if dry_run else "delete"
    number = 0
    kernel = walker.open_walker(m, mode, records=False, predicate=predicate, action=action)
    fast = walker.choose_mode(m, mode) == "kernel-fast"
    try:
        while not stop.is_set():
            number += 1
            if kernel:
                result = kernel.run(predicate, action, max_selected=max_deleted, fast=fast)
            else:
                result = walker.user_exec(m, predicate, action, max_selected=max_deleted)
            yield Round(number, result, dry_run)
            if every_ns is None or stop.wait(every_ns / 1e9):
                return
    finally:
        if kernel:
            kernel.close()
