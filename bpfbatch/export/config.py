"""The exporter's TOML configuration (stdlib ``tomllib``), checked whole before anything runs.

::

    listen = "127.0.0.1:9435"          # HOST:PORT; --listen overrides
    scrape_budget = "5s"               # a scrape reads no map after this much time
    batch_size = 8192                  # elements per batch syscall; --batch-size overrides
    journal = "/run/bpfbatch/x.journal"  # drain mode: drained, not yet delivered (.journal)

    [[metric]]
    name = "flow_bytes_total"          # Prometheus metric name
    help = "Bytes per flow"
    type = "counter"                   # counter | gauge | histogram
    map = { pinned = "/sys/fs/bpf/flows" }   # or { id = N } / { name = "..." }
    value = "bytes"                    # a value field; omit for a scalar value
    aggregate = "sum"                  # sum (of value) | count (of entries)
    mode = "read"                      # read | drain | record (counters and histograms)
    event = "struct event"             # record: the events' type (a ringbuf/perf map)
    btf = "prog.bpf.o"                 # record: where it is, if not in the programs' BTF
    max_series = 10000                 # series beyond it are counted, not exported
    labels = [
      { name = "saddr", field = "key.saddr", decoder = "ipv4" },
      { name = "proto", field = "key.proto", values = { 6 = "tcp", 17 = "udp" } },
    ]
    bucket = { field = "key.slot", type = "log2", max = 26, multiplier = 1e-9 }  # histograms

This module knows TOML and Prometheus naming only; whether the fields exist in a map's BTF is
:mod:`.fields`'s job (at start-up and by ``--check``). Every error is one line naming
``file:line`` and the key (``labels[1].decoder``): ``tomllib`` keeps no positions, so
:class:`_Lines` finds the line of a key in the text of its ``[[metric]]`` block.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib

from ..errors import InputError

DEFAULT_LISTEN = "127.0.0.1:9435"
DEFAULT_BUDGET_S = 10.0
DEFAULT_MAX_SERIES = 10_000
TYPES = ("counter", "gauge", "histogram")
MODES = ("read", "drain", "record")
AGGREGATES = ("sum", "count")
BUCKET_TYPES = ("log2", "linear")
#: Prometheus' metric and label name grammar (data model); ``__`` label names are reserved.
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
#: Largest log2 slot whose bound ``2**slot - 1`` still means something for a u64 value.
_MAX_LOG2_SLOT = 64


class ConfigError(InputError):
    """A configuration error, named ``file:line`` with the key in the message."""


@dataclasses.dataclass(frozen=True)
class MapRef:
    """The map a metric reads, as bpftool names it: exactly one of id, pinned path, name."""

    id: int | None = None
    pinned: str | None = None
    name: str | None = None

    def __str__(self) -> str:
        """The ``map`` label of the self-metrics: the pin path, the name, or ``id:N``."""
        return self.pinned or self.name or f"id:{self.id}"


@dataclasses.dataclass(frozen=True)
class Label:
    name: str
    field: str
    decoder: str | None = None
    values: tuple[tuple[int, str], ...] = ()  # a static value map: number → label text
    line: int = 0


@dataclasses.dataclass(frozen=True)
class Bucket:
    """A histogram's bucket index field. Slot ``i`` holds, for ``log2`` (bcc's
    ``bpf_log2l``), the values ``2**(i-1) .. 2**i - 1`` (slot 0: the value 0); for
    ``linear``, ``i*width .. (i+1)*width - 1``. Its upper bound, times ``multiplier``, is the
    bucket's ``le``; slots past ``max`` are counted in ``+Inf`` only."""

    field: str
    type: str
    max: int
    width: int = 1
    multiplier: float = 1.0

    def upper_bound(self, slot: int) -> float:
        top = (1 << slot) - 1 if self.type == "log2" else (slot + 1) * self.width - 1
        return top * self.multiplier


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str
    help: str
    type: str
    map: MapRef
    value: str | None
    aggregate: str
    mode: str
    labels: tuple[Label, ...]
    bucket: Bucket | None
    max_series: int
    places: tuple[tuple[str, str], ...]  # key → "file:line", for errors found later
    event: str | None = None  # record mode: the events' C type (``struct event``)
    btf: str | None = None    # record mode: an object file whose BTF has it

    def place(self, key: str) -> str:
        """``file:line`` of ``key`` (``value``, ``bucket``, ``labels[1]``, ...) in the file."""
        places = dict(self.places)
        return places.get(key, places["name"])

    @property
    def where(self) -> str:
        return self.place("name")


@dataclasses.dataclass(frozen=True)
class Config:
    path: str
    listen: tuple[str, int]
    budget_s: float
    batch_size: int
    metrics: tuple[Metric, ...]
    journal: str | None = None  # the drain journal (default: journal.default_path)
    inventory: object = None  # the [inventory] table (export.inventory.Inventory), if any


def load(path: str, *, listen: str | None = None, batch_size: int | None = None) -> Config:
    """The configuration in ``path``; ``listen`` (``--listen``) and ``batch_size``
    (``--batch-size``) override the file's. A pipe
    or a device is read up to ``load``'s bound (:data:`~bpfbatch.formats.read.
    MAX_STREAM_BYTES`), so ``--config /dev/zero`` is refused instead of filling memory."""
    from ..formats.read import read_bytes

    try:
        text = read_bytes(path, path).decode()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read the configuration: {exc}", obj=path) from None
    except InputError as exc:
        what = exc.message.removeprefix("cannot read: ")  # not "cannot read" twice
        raise ConfigError(f"cannot read the configuration: {what}", obj=path,
                          errno=exc.errno) from None
    return parse(text, path, listen=listen, batch_size=batch_size)


def parse(text: str, path: str = "<config>", *, listen: str | None = None,
          batch_size: int | None = None) -> Config:
    """:func:`load` on the text of a file (``path`` names it in errors)."""
    try:
        doc = tomllib.loads(text)
    except RecursionError:  # tomllib recurses per nesting level of arrays and inline tables
        raise ConfigError("not valid TOML: arrays or tables nested too deeply",
                          obj=path) from None
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        line = m.group(1) if m else len(text.splitlines()) or 1  # "(at end of document)"
        raise ConfigError(f"not valid TOML: {re.sub(r' [(]at .*[)]$', '', str(exc))}",
                          obj=f"{path}:{line}") from None
    lines = _Lines(text, path)
    top = _Table(doc, lines, None, "")
    top.only("listen", "scrape_budget", "batch_size", "journal", "metric", "inventory")
    address = _address(listen, "--listen") if listen is not None else \
        _address(top.get("listen", str, DEFAULT_LISTEN), top.where("listen"))
    budget = top.get("scrape_budget", str, None)
    budget_s = DEFAULT_BUDGET_S if budget is None else _duration_s(budget, top, "scrape_budget")
    batch_size = top.get("batch_size", int, 8192) if batch_size is None else batch_size
    if batch_size <= 0:
        top.fail("batch_size", f"must be a positive number, got {batch_size}")
    journal = top.get("journal", str, None)
    raw_metrics = top.get("metric", list, None) or []
    inventory = None
    if top.has("inventory"):
        from .inventory import parse as inventory_table

        inventory = inventory_table(top.sub("inventory", required=True), _duration_s)
    if not raw_metrics and inventory is None:
        raise ConfigError("no [[metric]] tables: nothing to export", obj=path)
    metrics = tuple(_metric(_Table(raw, lines, i, f"metric {i}"), i)
                    for i, raw in enumerate(raw_metrics))
    _check_across(metrics, lines)
    return Config(path, address, budget_s, batch_size, metrics, journal, inventory)


def _metric(t: _Table, index: int) -> Metric:
    t.only("name", "help", "type", "map", "value", "aggregate", "mode", "labels", "bucket",
           "max_series", "event", "btf")
    name = t.require("name", str)
    if not _METRIC_NAME.fullmatch(name):
        t.fail("name", f"{name!r} is not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)")
    t.context = f"metric '{name}'"
    kind = t.choice("type", TYPES, None)
    mode = t.choice("mode", MODES, "read")
    # an event has no value of its own: a record-mode metric without one counts events
    aggregate = t.choice("aggregate", AGGREGATES,
                         "count" if mode == "record" and not t.has("value") else "sum")
    if mode in ("drain", "record") and kind == "gauge":
        t.fail("mode", f"{mode} adds what each scrape takes into a counter; a gauge cannot "
                       "accumulate (use type = \"counter\")")
    event = t.get("event", str, None)
    if mode == "record" and event is None:
        t.fail("mode", "record counts the events of a ringbuf or perf_event_array map by "
                       "their fields: name their type (event = \"struct event\")")
    for key in ("event", "btf"):
        if mode != "record" and t.has(key):
            t.fail(key, "only mode = \"record\" reads events")
    if aggregate == "count" and t.has("value"):
        t.fail("value", "aggregate = \"count\" counts entries; it reads no value field")
    max_series = t.get("max_series", int, DEFAULT_MAX_SERIES)
    if max_series <= 0:
        t.fail("max_series", f"must be a positive number, got {max_series}")
    labels = tuple(_label(t, i, raw) for i, raw in enumerate(t.get("labels", list, [])))
    bucket = None
    if kind == "histogram":
        bucket = _bucket(t.sub("bucket", required=True))
    elif t.has("bucket"):
        t.fail("bucket", f"only a histogram has buckets (type is {kind})")
    seen: set[str] = set()
    for label in labels:
        if label.name in seen:
            raise ConfigError(f"metric '{name}': labels: '{label.name}' appears twice",
                              obj=t.lines.at(index, label.line))
        seen.add(label.name)
    return Metric(name=name, help=t.get("help", str, ""), type=kind, map=_map_ref(t),
                  value=t.get("value", str, None), aggregate=aggregate, mode=mode,
                  labels=labels, bucket=bucket, max_series=max_series, event=event,
                  btf=t.get("btf", str, None),
                  places=tuple({**{k: t.lines.at(index, k) for k in _PLACED},
                                **{f"labels[{i}]": t.lines.at(index, label.line or "labels")
                                   for i, label in enumerate(labels)}}.items()))


def _label(t: _Table, i: int, raw) -> Label:
    key = f"labels[{i}]"
    line = 0
    if isinstance(raw, dict):  # the line of its name, counting earlier labels of that name
        name = str(raw.get("name", ""))
        nth = sum(isinstance(r, dict) and r.get("name") == name for r in t.raw["labels"][:i])
        line = t.lines.line_of(t.index, "labels", rf'name\s*=\s*"{re.escape(name)}"', nth)
    if not isinstance(raw, dict):
        raise ConfigError(f"{t.context}: {key}: expected a table {{ name = ..., field = ... }}",
                          obj=t.lines.at(t.index, line))
    lt = _Table(raw, t.lines, t.index, t.context, prefix=key + ".", line=line)
    lt.only("name", "field", "decoder", "values")
    name = lt.require("name", str)
    if not _LABEL_NAME.fullmatch(name) or name.startswith("__"):
        lt.fail("name", f"{name!r} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, "
                        "not starting with __)")
    if name == "le" and t.raw.get("type") == "histogram":
        lt.fail("name", "'le' is the bucket label of a histogram")
    values = lt.get("values", dict, {})
    static = []
    for number, text in values.items():
        try:
            static.append((int(number, 0), str(text)))
        except ValueError:
            lt.fail("values", f"key {number!r} is not an integer")
    if static and lt.has("decoder"):
        lt.fail("values", "give either a decoder or a static value map, not both")
    decoder = lt.get("decoder", str, None)
    if decoder is not None:
        _label_decoder(lt, decoder)
    return Label(name=name, field=lt.require("field", str), decoder=decoder,
                 values=tuple(static), line=line)


def _label_decoder(t: _Table, kind: str) -> None:
    """A label's decoder must exist and print the same text for the same bytes at every
    scrape: a clocked one (``age``) would start new series each time."""
    from ..records import decoders

    try:
        decoder = decoders.get(kind)
    except InputError as exc:
        t.fail("decoder", exc.message)
    if decoder.clocked:
        t.fail("decoder", f"'{kind}' prints {decoder.summary}, a different text at every "
                          "scrape: each would start new series (export the field as a "
                          "gauge's value instead)")


def _bucket(t: _Table) -> Bucket:
    t.only("field", "type", "max", "width", "multiplier")
    kind = t.choice("type", BUCKET_TYPES, None)
    top = t.require("max", int)
    limit = _MAX_LOG2_SLOT if kind == "log2" else 100_000
    if not 0 <= top <= limit:
        t.fail("max", f"must be a slot number from 0 to {limit}, got {top}")
    width = t.get("width", int, 1)
    if width <= 0:
        t.fail("width", f"must be a positive number, got {width}")
    if kind == "log2" and t.has("width"):
        t.fail("width", "a log2 histogram has no width (its slots double)")
    multiplier = t.get("multiplier", (int, float), 1.0)
    if not (math.isfinite(multiplier) and multiplier > 0):
        t.fail("multiplier", f"must be a positive number, got {multiplier}")
    return Bucket(field=t.require("field", str), type=kind, max=top, width=width,
                  multiplier=float(multiplier))


def _map_ref(t: _Table) -> MapRef:
    mt = t.sub("map", required=True)
    mt.only("id", "pinned", "name")
    given = [k for k in ("id", "pinned", "name") if mt.has(k)]
    if len(given) != 1:
        t.fail("map", "name the map with exactly one of id, pinned, name"
                      + (f" (got {' and '.join(given)})" if given else ""))
    if given == ["id"]:
        map_id = mt.require("id", int)
        if map_id <= 0:
            mt.fail("id", f"must be a positive map id, got {map_id}")
        return MapRef(id=map_id)
    return MapRef(**{given[0]: mt.require(given[0], str)})


#: The exporter's own metrics (:mod:`.server`) are named under this prefix.
SELF_PREFIX = "bpfbatch_export_"


def exposed_names(m: Metric) -> tuple[str, ...]:
    """The names ``m`` takes in the exposition: its family's (``# TYPE``) and its samples'.
    A counter ``x`` or ``x_total`` is the family ``x`` with samples ``x_total``; a histogram
    ``h`` has ``h_bucket`` and ``h_count``, and ``h_sum`` is kept for it too (Prometheus gives
    a histogram the three)."""
    if m.type == "counter":
        family = m.name.removesuffix("_total")
        return family, f"{family}_total"
    if m.type == "histogram":
        return m.name, f"{m.name}_bucket", f"{m.name}_count", f"{m.name}_sum"
    return (m.name,)


def _check_across(metrics: tuple[Metric, ...], lines: _Lines) -> None:
    """Rules that involve several metrics: no two metrics (nor a metric and the self-metrics)
    share a name in the exposition, and a map is drained or read."""
    names: dict[str, Metric] = {}
    modes: dict[MapRef, Metric] = {}
    for index, m in enumerate(metrics):
        if m.name.startswith(SELF_PREFIX):
            raise ConfigError(f"metric '{m.name}': name: {SELF_PREFIX}* names the exporter's "
                              "own metrics", obj=lines.at(index, "name"))
        for name in exposed_names(m):
            if name in names:
                other = names[name]
                raise ConfigError(
                    f"metric '{m.name}': name: '{name}' is already a name of the {other.type} "
                    f"'{other.name}' at {other.where}", obj=lines.at(index, "name"))
        names.update(dict.fromkeys(exposed_names(m), m))
        other = modes.setdefault(m.map, m)
        if other.mode != m.mode:
            raise ConfigError(
                f"metric '{m.name}': mode: map {m.map} is {_DOING[m.mode]} by '{m.name}' and "
                f"{_DOING[other.mode]} by '{other.name}' (at {other.where}); a map has one "
                "mode", obj=lines.at(index, "mode"))
        if (m.event, m.btf) != (other.event, other.btf):
            raise ConfigError(
                f"metric '{m.name}': event: map {m.map} has the events of one type; "
                f"'{other.name}' (at {other.where}) names {other.event!r}",
                obj=lines.at(index, "event"))


def _address(text: str, where: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"expected HOST:PORT (port 0 picks a free one), got {text!r}",
                          obj=where)
    return host.strip("[]") or "0.0.0.0", int(port)


def _duration_s(text: str, t: _Table, key: str) -> float:
    from ..exec.predicate import parse_duration

    try:
        return parse_duration(text, key) / 1e9
    except InputError as exc:
        t.fail(key, exc.message)


class _Lines:
    """Where keys are in the text: ``tomllib`` returns plain dicts, so the line of the
    ``n``-th ``[[metric]]`` block's key is found by scanning that block's lines."""

    _HEADER = re.compile(r"^\s*\[\[\s*metric\s*\]\]")
    _TABLE = re.compile(r"^\s*\[")

    def __init__(self, text: str, path: str):
        self.path = path
        self.lines = text.splitlines()
        self.headers = [i for i, line in enumerate(self.lines) if self._HEADER.match(line)]

    def _block(self, index: int | None) -> range:
        if index is None or index >= len(self.headers):
            end = self.headers[0] if self.headers else len(self.lines)
            return range(0, end)
        start = self.headers[index]
        end = next((i for i in range(start + 1, len(self.lines))
                    if self._TABLE.match(self.lines[i])), len(self.lines))
        return range(start, end)

    def line_of(self, index: int | None, key: str | None, needle: str | None = None,
                nth: int = 0) -> int:
        """1-based line of the ``nth`` match of ``needle`` (a regex), or else of the first
        ``key =``, in the block of metric ``index`` (``None``: the top level); the block's
        header when neither is found."""
        block = self._block(index)
        by_key = rf"(^|[{{,\s]){re.escape(key)}\s*=" if key else None
        for pattern, skip in ((needle, nth), (by_key, 0)):
            if pattern:
                found = [i for i in block if re.search(pattern, self.lines[i].split("#", 1)[0])]
                if len(found) > skip:
                    return found[skip] + 1
        return block.start + 1 if index is not None and block else 0

    def at(self, index: int | None, key: str | int | None) -> str:
        line = key if isinstance(key, int) else self.line_of(index, key)
        return f"{self.path}:{line}" if line else self.path


class _Table:
    """One TOML table with typed getters whose errors name ``file:line`` and the key."""

    def __init__(self, raw, lines: _Lines, index: int | None, context: str, *,
                 prefix: str = "", line: int = 0):
        if not isinstance(raw, dict):
            raise ConfigError(f"{context}: expected a table", obj=lines.at(index, None))
        self.raw, self.lines, self.index = raw, lines, index
        self.context, self.prefix, self.line = context, prefix, line

    def where(self, key: str) -> str:
        if self.line:
            return f"{self.lines.path}:{self.line}"
        return self.lines.at(self.index, self.prefix.split(".")[0].split("[")[0] or key)

    def fail(self, key: str, message: str):
        context = f"{self.context}: " if self.context else ""
        raise ConfigError(f"{context}{self.prefix}{key}: {message}", obj=self.where(key))

    def has(self, key: str) -> bool:
        return key in self.raw

    def only(self, *keys: str) -> None:
        for key in self.raw:
            if key not in keys:
                self.fail(key, f"unknown key (keys: {', '.join(keys)})")

    def get(self, key: str, kind, default):
        if key not in self.raw:
            return default
        value = self.raw[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) or not isinstance(value, kinds):
            names = " or ".join(_TOML_KIND[k] for k in kinds)
            self.fail(key, f"expected {names}, got {value!r}")
        return value

    def require(self, key: str, kind):
        if key not in self.raw:
            self.fail(key, "missing")
        return self.get(key, kind, None)

    def choice(self, key: str, choices: tuple[str, ...], default: str | None) -> str:
        value = self.require(key, str) if default is None else self.get(key, str, default)
        if value not in choices:
            self.fail(key, f"{value!r} is not one of {', '.join(choices)}")
        return value

    def sub(self, key: str, *, required: bool) -> _Table:
        value = self.require(key, dict) if required else self.get(key, dict, {})
        return _Table(value, self.lines, self.index, self.context,
                      prefix=f"{self.prefix}{key}.", line=self.line)


#: Keys whose line a metric keeps for the errors :mod:`.fields` finds against a live map.
_PLACED = ("name", "map", "value", "bucket", "mode", "type", "event")
#: How a mode's error says what a metric does with its map.
_DOING = {"read": "read", "drain": "drained", "record": "recorded"}

_TOML_KIND = {str: "a string", int: "an integer", float: "a number", list: "an array",
              dict: "a table"}
