"""The text of a :class:`~bpfbatch.compare.Diff`: ``jsonl``, ``json`` or ``table``, and the
summary line.

Two phrasings of the same changes: a diff says what differs from A to B (``added``,
``removed``, ``changed``); a check against desired contents (``--against``) says what would
have to happen to A to match it (``add``, ``delete``, ``update``).

- ``jsonl``: one line per key, in key order: ``{"op":"added","key":K,"value":V}`` (a per-CPU
  value as ``dump`` prints it, ``"values":[{"cpu":0,"value":V},…]``), ``{"op":"removed",…}``
  with the value A holds, ``{"op":"changed","key":K,"fields":[{"field":"value.packets",
  "old":1,"new":2},…]}`` (a per-CPU field with its ``"cpu"``). Keys and values in the view's
  forms, as ``dump`` prints them (raw bytes as bpftool's ``["0x01",…]``, non-finite floats as
  ``"NaN"``/``"Infinity"``), so ``load`` and ``delete`` read a record back.
- ``json``: one object: the two sides' names, the counts and ``"changes"``, the lines above.
- ``table``: one row per changed field (added and removed keys: one row, their whole value),
  the key's fields first, as ``dump -o table`` names them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

from ..formats.table import simple
from ..records.plain import json_text, plain

#: The op words of each phrasing.
DIFF_WORDS = {"added": "added", "removed": "removed", "changed": "changed", "same": "same"}
AGAINST_WORDS = {"added": "add", "removed": "delete", "changed": "update", "same": "same"}
FORMATS = ("table", "jsonl", "json")


def summary(d, against: bool) -> str:
    """One line: what differs, or what would have to change to match."""
    if against:
        if not d:
            return f"{d.a_name} matches {d.b_name} ({d.same} entries)"
        return (f"{d.a_name} against {d.b_name}: {d.added} to add, {d.removed} to delete, "
                f"{d.changed} to update ({d.same} as desired)")
    return (f"{d.a_name} → {d.b_name}: {d.added} added, {d.removed} removed, {d.changed} "
            f"changed, {d.same} same")


def records(d, against: bool) -> Iterator[dict]:
    """Each change as the object a ``jsonl`` line holds."""
    words = AGAINST_WORDS if against else DIFF_WORDS
    percpu = hasattr(d.value_codec, "ncpus")
    for change in d:
        record = {"op": words[change.op], "key": plain(change.key)}
        if change.op == "changed":
            record["fields"] = [
                {"field": f.path, **({"cpu": f.cpu} if f.cpu is not None else {}),
                 "old": plain(f.old), "new": plain(f.new)} for f in change.fields]
        else:
            value = change.new if change.op == "added" else change.old
            if percpu:
                record["values"] = [{"cpu": cpu, "value": plain(v)} for cpu, v in enumerate(value)]
            else:
                record["value"] = plain(value)
        yield record


def jsonl(d, against: bool) -> Iterator[str]:
    """The ``jsonl`` output, a line at a time."""
    for record in records(d, against):
        yield json.dumps(record, separators=(",", ":")) + "\n"


def json_document(d, against: bool) -> str:
    words = AGAINST_WORDS if against else DIFF_WORDS
    document = {"a": d.a_name, "b": d.b_name,
                **{words[op]: getattr(d, op) for op in ("added", "removed", "changed", "same")},
                "changes": list(records(d, against))}
    return json.dumps(document, separators=(",", ":")) + "\n"


def table(d, against: bool) -> Iterator[str]:
    """The ``table`` output: nothing when nothing differs."""
    words = AGAINST_WORDS if against else DIFF_WORDS
    rows, key_names = [], None
    percpu = hasattr(d.value_codec, "ncpus")
    for change in d:
        key_cells = dict(_flat("key", change.key))
        key_names = key_names or list(key_cells)
        head = [*key_cells.values(), words[change.op]]
        if change.op == "changed":
            rows += [[*head, f.path, *([f.cpu] if percpu else []), _cell(f.old), _cell(f.new)]
                     for f in change.fields]
        else:
            whole = _cell(change.new if change.op == "added" else change.old)
            rows.append([*head, "", *([""] if percpu else []),
                         *(("", whole) if change.op == "added" else (whole, ""))])
    if not rows:
        return
    headers = [*key_names, "op", "field", *(["cpu"] if percpu else []), "old", "new"]
    right = [all(type(row[i]) in (int, float) for row in rows) for i in range(len(headers))]
    yield simple(rows, headers, right) + "\n"


def _flat(prefix: str, value) -> Iterator[tuple[str, object]]:
    """A key's cells: struct fields as ``key.field`` columns, anything else one cell."""
    if isinstance(value, dict):
        for name, member in value.items():
            yield from _flat(f"{prefix}.{name}", member)
    else:
        yield prefix, _cell(value)


def _cell(value):
    """A table cell: numbers and text as they are, anything else as compact JSON."""
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return value if not isinstance(value, float) or math.isfinite(value) else plain(value)
    return json_text(value)
