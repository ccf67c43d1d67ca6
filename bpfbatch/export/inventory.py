"""The exporter's ``[inventory]`` table: every map on the node as metrics, each scrape.

::

    [inventory]
    budget = "1s"          # the pin walk and the counting stop after this much of each
                           # scrape (default 1s)
    match = "flow*"        # only maps whose name matches this shell pattern (default: all)

Served per map, labelled ``id``, ``name``, ``type``, ``pinned`` (its paths on bpffs,
comma-separated, empty when not pinned) and ``programs`` (the names of the programs using
it, comma-separated in program id order, as ``list --count`` shows them)::

    bpf_map_entries          elements one batched pass counted (maps not counted are left
                             out: the budget ran out, or the type cannot be counted)
    bpf_map_max_entries      max_entries
    bpf_map_memlock_bytes    memory the map pins (bpftool's bytes_memlock)

and ``bpfbatch_export_inventory_seconds`` (what the last inventory cost) and
``bpfbatch_export_inventory_uncounted`` (maps left out of ``bpf_map_entries``). The counts
are ``list --count``'s (:mod:`bpfbatch.map.inventory`): cheapest maps first, so a huge map
spends the budget last.

The kernel does not say where a map is pinned: each scrape walks the bpffs mounts once
first (:func:`~bpfbatch.map.inventory.bpffs_pins`: one ``BPF_OBJ_GET`` and one fdinfo read
per pin, 60–70 µs each here: 1000 pins cost ~65 ms), within the same budget; a walk the budget cuts short leaves
the ``pinned`` label of the maps it did not reach empty, and the counting then has no
budget left.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import time

from prometheus_client.core import GaugeMetricFamily

from ..map.handle import iter_infos
from ..map.inventory import bpffs_pins, inventory

DEFAULT_BUDGET_S = 1.0
LABELS = ["id", "name", "type", "pinned", "programs"]


@dataclasses.dataclass(frozen=True)
class Inventory:
    """The ``[inventory]`` table."""

    budget_s: float = DEFAULT_BUDGET_S
    match: str | None = None


def parse(table, duration_s) -> Inventory:
    """The ``[inventory]`` table from the configuration's table reader (``only``, ``get``;
    errors name ``file:line``); ``duration_s(text, table, key)`` reads a duration."""
    table.only("budget", "match")
    budget = table.get("budget", str, None)
    return Inventory(DEFAULT_BUDGET_S if budget is None else duration_s(budget, table, "budget"),
                     table.get("match", str, None))


def families(config: Inventory) -> list[GaugeMetricFamily]:
    """One inventory of the node as metric families."""
    start = time.monotonic()
    pins = bpffs_pins(start + config.budget_s)
    rows = inventory(_selected(config),
                     budget_s=max(0.0, config.budget_s - (time.monotonic() - start)))
    entries = GaugeMetricFamily("bpf_map_entries", "Elements of the map, counted with one "
                                "batched pass.", labels=LABELS)
    max_entries = GaugeMetricFamily("bpf_map_max_entries", "The map's max_entries.",
                                    labels=LABELS)
    memlock = GaugeMetricFamily("bpf_map_memlock_bytes", "Memory the map pins "
                                "(bytes_memlock).", labels=LABELS)
    for row in rows:
        labels = [str(row.info.id), row.info.name, row.info.type_name,
                  ",".join(sorted(pins.get(row.info.id, []))),
                  ",".join(p.name for p in row.programs)]
        if row.entries is not None:
            entries.add_metric(labels, row.entries)
        max_entries.add_metric(labels, row.info.max_entries)
        memlock.add_metric(labels, row.info.memlock)
    uncounted = GaugeMetricFamily("bpfbatch_export_inventory_uncounted",
                                  "Maps of the inventory left out of bpf_map_entries (budget "
                                  "spent, or a type that cannot be counted).",
                                  value=sum(row.entries is None for row in rows))
    seconds = GaugeMetricFamily("bpfbatch_export_inventory_seconds",
                                "Time the last inventory of the maps took.",
                                value=time.monotonic() - start)
    return [entries, max_entries, memlock, uncounted, seconds]


def _selected(config: Inventory) -> list:
    return [info for info in iter_infos()
            if config.match is None or fnmatch.fnmatchcase(info.name, config.match)]


def describe(config: Inventory) -> str:
    """``export --check``'s line for the table: what it serves, for which maps now."""
    which = "every map" if config.match is None else f"maps matching '{config.match}'"
    return (f"[inventory]: bpf_map_entries, bpf_map_max_entries, bpf_map_memlock_bytes for "
            f"{which} ({len(_selected(config))} now), labels {', '.join(LABELS)}; "
            f"budget {config.budget_s:g}s per scrape")
