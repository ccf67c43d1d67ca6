"""``bpfbatch top maps``: ``list --count`` refreshed every interval, with each map's net change
of entries per second since the previous refresh.

Each refresh is one :func:`~bpfbatch.map.inventory.inventory` (one batched pass per map,
cheapest first, within a budget), so a huge map not counted in time shows ``-`` and never
holds the screen back. The rate is the difference of two counts over the time between them:
what the kernel keeps per map is no add or delete counter user space can read for every map
type, so a map whose adds and deletes (or LRU evictions) balance between two refreshes shows
0, and a rate is shown only for a map counted at both refreshes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from ..map.handle import MapInfo, iter_infos
from ..map.inventory import Row, inventory
from ..formats.table import simple

COLUMNS = ("id", "type", "name", "entries", "max_entries", "fill%", "+/s", "memlock",
           "programs", "reason")


@dataclasses.dataclass
class Refresh:
    """One refresh: the inventory's rows (fullest first) and, per map id, the net change of
    its entries since the previous refresh (``None`` when either count is missing), over
    ``seconds``."""

    rows: list[Row]
    change: dict[int, int | None]
    seconds: float | None

    def rate(self, map_id: int) -> float | None:
        """Net entries per second of map ``map_id`` since the previous refresh."""
        change = self.change.get(map_id)
        if change is None or not self.seconds:
            return None
        return change / self.seconds


class MapsTop:
    """Counts the maps ``select`` keeps (every map by default) at each :meth:`refresh`,
    within ``budget_s`` seconds, and remembers the counts for the next one."""

    def __init__(self, budget_s: float | None,
                 select: Callable[[MapInfo], bool] = lambda info: True):
        self.budget_s = budget_s
        self.select = select
        self._last: dict[int, int | None] = {}
        self._when: float | None = None

    def refresh(self) -> Refresh:
        """Count the maps now; the change is against the previous refresh."""
        rows = inventory([info for info in iter_infos() if self.select(info)],
                         budget_s=self.budget_s)
        now = time.monotonic()
        change = {row.info.id: _difference(row.entries, self._last.get(row.info.id))
                  for row in rows}
        refresh = Refresh(rows, change, None if self._when is None else now - self._when)
        self._last = {row.info.id: row.entries for row in rows}
        self._when = now
        return refresh


def _difference(now: int | None, before: int | None) -> int | None:
    return None if now is None or before is None else now - before


def table(refresh: Refresh, rows: int) -> str:
    """The first ``rows`` maps of ``refresh`` as ``list --count``'s table plus ``+/s``."""
    lines = []
    for row in refresh.rows[:rows]:
        rate = refresh.rate(row.info.id)
        lines.append([row.info.id, row.info.type_name, row.info.name,
                      "-" if row.entries is None else row.entries, row.info.max_entries,
                      "-" if row.fill is None else f"{row.fill:.1f}",
                      "-" if rate is None else f"{rate:+.1f}" if rate else "0",
                      row.info.memlock,
                      " ".join(f"{p.name}({p.id})" for p in row.programs), row.reason or ""])
    return simple(lines, list(COLUMNS), [name not in ("type", "name", "programs", "reason")
                                         for name in COLUMNS])
