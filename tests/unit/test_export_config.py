"""The exporter's configuration: what it accepts, and one line naming file:line and the key for
everything it refuses."""

from __future__ import annotations

import pytest

from bpfbatch.export import config
from bpfbatch.export.config import Bucket, ConfigError, MapRef

GOOD = """\
listen = "127.0.0.1:9500"
scrape_budget = "2s"

[[metric]]
name = "flow_bytes_total"
help = "Bytes per flow"
type = "counter"
map = { pinned = "/sys/fs/bpf/flows" }
value = "bytes"
labels = [
  { name = "saddr", field = "key.saddr", decoder = "ipv4" },
  { name = "proto", field = "key.proto", values = { 6 = "tcp", 17 = "udp" } },
]

[[metric]]
name = "latency_seconds"
type = "histogram"
map = { name = "lat" }
bucket = { field = "key.slot", type = "log2", max = 20, multiplier = 1e-9 }
"""


def test_a_full_configuration_reads_back_as_written():
    c = config.parse(GOOD, "x.toml")
    assert c.listen == ("127.0.0.1", 9500) and c.budget_s == 2.0
    flows, lat = c.metrics
    assert flows.map == MapRef(pinned="/sys/fs/bpf/flows") and flows.value == "bytes"
    assert [(la.name, la.field, la.decoder) for la in flows.labels] == \
        [("saddr", "key.saddr", "ipv4"), ("proto", "key.proto", None)]
    assert dict(flows.labels[1].values) == {6: "tcp", 17: "udp"}
    assert flows.mode == "read" and flows.aggregate == "sum" and flows.max_series == 10_000
    assert lat.bucket == Bucket("key.slot", "log2", 20, 1, 1e-9)
    assert flows.where == "x.toml:5" and lat.place("bucket") == "x.toml:19"
    assert flows.place("labels[1]") == "x.toml:12"


def test_listen_flag_overrides_the_file():
    assert config.parse(GOOD, listen="[::1]:0").listen == ("::1", 0)
    assert config.parse(GOOD, listen="0.0.0.0:9999").listen == ("0.0.0.0", 9999)


@pytest.mark.parametrize("bounds, expected", [
    (Bucket("s", "log2", 4), [0, 1, 3, 7, 15]),
    (Bucket("s", "linear", 3, width=10), [9, 19, 29, 39]),
    (Bucket("s", "log2", 2, multiplier=0.5), [0, 0.5, 1.5]),
])
def test_bucket_upper_bounds_follow_the_slot_rule(bounds, expected):
    assert [bounds.upper_bound(i) for i in range(bounds.max + 1)] == expected


def _replace(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


@pytest.mark.parametrize("text, where, words", [
    (_replace('type = "counter"', 'type = "countr"'), "x.toml:7", ["type", "counter, gauge"]),
    (_replace('decoder = "ipv4"', 'decoder = "ipv5"'), "x.toml:11",
     ["labels[0].decoder", "unknown kind 'ipv5'"]),
    (_replace('decoder = "ipv4"', 'decoder = "age"'), "x.toml:11",
     ["labels[0].decoder", "'age'", "new series"]),
    (GOOD + '\n[[metric]]\nname = "flow_bytes_total"\ntype = "gauge"\nmap = { id = 2 }\n',
     "x.toml:22", ["'flow_bytes_total' is already a name of the counter 'flow_bytes_total'"]),
    (_replace('name = "latency_seconds"', 'name = "lat"') + (
        '\n[[metric]]\nname = "lat_sum"\ntype = "gauge"\nmap = { id = 2 }\n'),
     "x.toml:22", ["'lat_sum' is already a name of the histogram 'lat'"]),
    (_replace('name = "latency_seconds"', 'name = "bpfbatch_export_scrape_seconds"'),
     "x.toml:16", ["bpfbatch_export_* names the exporter's own metrics"]),
    ("a = " + "[" * 5000 + "]" * 5000, "x.toml", ["nested too deeply"]),
    (_replace('value = "bytes"', 'value = 3'), "x.toml:9", ["value", "expected a string"]),
    (_replace('{ name = "proto", field', '{ name = "proto", feild'), "x.toml:12",
     ["labels[1].feild", "unknown key"]),
    (_replace('decoder = "ipv4"', 'decoder = "ipv4", colour = 1'), "x.toml:11",
     ["labels[0].colour"]),
    (_replace('name = "saddr"', 'name = "s-addr"'), "x.toml:11", ["labels[0].name", "label name"]),
    (_replace('name = "proto", field = "key.proto"', 'name = "saddr", field = "key.proto"'),
     "x.toml:12", ["'saddr' appears twice"]),
    (_replace('{ pinned = "/sys/fs/bpf/flows" }', '{ pinned = "/p", id = 3 }'), "x.toml:8",
     ["map", "exactly one of id, pinned, name", "id and pinned"]),
    (_replace('{ pinned = "/sys/fs/bpf/flows" }', '{ id = -1 }'), "x.toml:8", ["map.id"]),
    (_replace('name = "flow_bytes_total"', 'name = "flow-bytes"'), "x.toml:5", ["metric name"]),
    (_replace('scrape_budget = "2s"', 'scrape_budget = "2 parsecs"'), "x.toml:2",
     ["scrape_budget", "duration"]),
    (_replace('listen = "127.0.0.1:9500"', 'listen = "localhost"'), "x.toml:1", ["HOST:PORT"]),
    (_replace('type = "log2", max = 20', 'type = "log2", max = 99'), "x.toml:19",
     ["bucket.max", "0 to 64"]),
    (_replace('type = "log2", max = 20', 'type = "log2", width = 2, max = 20'), "x.toml:19",
     ["bucket.width", "no width"]),
    (_replace('bucket = {', 'bucket_ = {'), "x.toml:19", ["bucket_", "unknown key"]),
    (_replace('type = "counter"', 'type = "gauge"\nmode = "drain"'), "x.toml:8",
     ["flow_bytes_total", "mode", "a gauge cannot accumulate"]),
    (_replace('type = "counter"', 'type = "gauge"\naggregate = "count"'), "x.toml:10",
     ["value", "counts entries"]),
    (_replace('values = { 6 = "tcp"', 'values = { six = "tcp"'), "x.toml:12",
     ["labels[1].values", "'six' is not an integer"]),
    (GOOD + '\n[[metric]]\nname = "flow_bytes"\ntype = "counter"\nmap = { id = 1 }\n',
     "x.toml:22", ["already a name of the counter 'flow_bytes_total' at x.toml:5"]),
    (GOOD + '\n[[metric]]\nname = "dr_total"\ntype = "counter"\nmode = "drain"\n'
            'map = { name = "lat" }\n', "x.toml:24", ["map lat is drained by 'dr_total' and read "
                                                      "by 'latency_seconds'"]),
    ("listen = [", "x.toml:1", ["not valid TOML"]),
    ('listen = "127.0.0.1:1"\n', "x.toml", ["no [[metric]]"]),
])
def test_errors_name_file_line_and_key(text, where, words):
    with pytest.raises(ConfigError) as info:
        config.parse(text, "x.toml")
    line = str(info.value)
    assert "\n" not in line
    assert info.value.obj == where, line
    for word in words:
        assert word in line, line


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the configuration") as missing:
        config.load(str(tmp_path / "nope.toml"))
    assert str(missing.value).endswith(
        "nope.toml: cannot read the configuration: No such file or directory (ENOENT)")
