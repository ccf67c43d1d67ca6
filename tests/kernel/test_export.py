"""``bpfbatch export`` against real maps: every number a scrape reports is checked against
bpftool's dump of the same map (an independent reader), or against a writer in its own
process; the exposition is parsed with prometheus-client's parser."""

from __future__ import annotations

import contextlib
import errno
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import time
from collections import Counter, defaultdict

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from bpfbatch import Map
from bpfbatch._sys.abi import BPF_NOEXIST, MapType
from bpfbatch._sys.libbpf import num_possible_cpus
from bpfbatch.btf import BtfBuilder
from bpfbatch.errors import KernelError
from bpfbatch.export import config, response, server
from bpfbatch.labs.demo import create_flow_table, fill_flow_table

TAG = f"{os.getpid()}"


def scrape(exporter: server.Exporter) -> dict[str, dict[tuple, float]]:
    """One scrape, parsed: sample name → {sorted label items: value}; its response counts
    as delivered (what the HTTP server decides for a real client)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    text = generate_latest(registry).decode()
    exporter.settle(True)
    out: dict = defaultdict(dict)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name][tuple(sorted(s.labels.items()))] = s.value
    return out


def bpftool(m: Map) -> list[dict]:
    proc = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m.info.id)],
                          capture_output=True, text=True, check=True)
    return [e["formatted"] for e in json.loads(proc.stdout)]


def exporter_for(text: str) -> server.Exporter:
    return server.Exporter(config.parse(text, "test.toml"), log=lambda line: None)


def test_read_sums_counts_and_labels_equal_bpftools_dump(pins):
    with create_flow_table(4096, name=f"bbexp{TAG}") as m:
        fill_flow_table(m, 3000, seed=7)
        pin = pins(m, "flows")
        ex = exporter_for(f"""
[[metric]]
name = "flow_bytes_total"
type = "counter"
map = {{ pinned = "{pin}" }}
value = "bytes"
labels = [{{ name = "dport", field = "key.dport" }}, {{ name = "proto", field = "key.proto" }}]

[[metric]]
name = "flows"
type = "gauge"
map = {{ pinned = "{pin}" }}
aggregate = "count"
labels = [{{ name = "proto", field = "key.proto", values = {{ 6 = "tcp", 17 = "udp" }} }}]

[[metric]]
name = "packets_total"
type = "counter"
map = {{ pinned = "{pin}" }}
value = "packets"
""")
        got = scrape(ex)
        entries = bpftool(m)
    want_bytes, want_flows = Counter(), Counter()
    names = {6: "tcp", 17: "udp"}
    for e in entries:
        port = int.from_bytes(e["key"]["dport"].to_bytes(2, "little"), "big")  # as dump shows it
        want_bytes[(("dport", str(port)), ("proto", e["key"]["proto"]))] += \
            e["value"]["bytes"]
        number = {"IPPROTO_TCP": 6, "IPPROTO_UDP": 17, "IPPROTO_ICMP": 1}[e["key"]["proto"]]
        want_flows[(("proto", names.get(number, str(number))),)] += 1
    assert got["flow_bytes_total"] == {k: float(v) for k, v in want_bytes.items()}
    assert got["flows"] == {k: float(v) for k, v in want_flows.items()}
    assert got["packets_total"] == {(): float(sum(e["value"]["packets"] for e in entries))}
    assert got["bpfbatch_export_map_entries"] == {(("map", pin),): 3000.0}
    assert got["bpfbatch_export_map_errors_total"] == {(("map", pin),): 0.0}


def _typed_map(map_type: MapType, what: str, key, value, max_entries: int = 256) -> Map:
    """A map whose key and value types ``key(b)`` / ``value(b)`` build with a BtfBuilder."""
    with BtfBuilder() as b:
        key_id, value_id = key(b), value(b)
        return Map.create(map_type, b.layout(key_id)[0], b.layout(value_id)[0], max_entries,
                          name=f"bbexp{what}{TAG}"[:15], btf_fd=b.load(),
                          btf_key_type_id=key_id, btf_value_type_id=value_id)


def _percpu_counts():
    """An LRU per-CPU hash ``__u32 ifindex → __u64``."""
    return _typed_map(MapType.LRU_PERCPU_HASH, "c", lambda b: b.integer("__u32", 4),
                      lambda b: b.integer("__u64", 8), 64)


def test_per_cpu_values_are_summed_and_decoders_label(pins):
    ncpus = num_possible_cpus()
    lo = socket.if_nametoindex("lo")
    with _percpu_counts() as m:
        m.update_items([(lo, [10 * (c + 1) for c in range(ncpus)]),
                        (987654, [2**40 + c for c in range(ncpus)])])
        pin = pins(m, "pcpu")
        got = scrape(exporter_for(f"""
[[metric]]
name = "rx_total"
type = "counter"
map = {{ pinned = "{pin}" }}
labels = [{{ name = "dev", field = "key", decoder = "ifname" }},
          {{ name = "raw", field = "key", decoder = "hex" }}]
"""))
        entries = bpftool(m)
    want = {}
    for e in entries:
        name = "lo" if e["key"] == lo else str(e["key"])
        raw = e["key"].to_bytes(4, "little").hex()
        want[(("dev", name), ("raw", raw))] = float(sum(c["value"] for c in e["values"]))
    assert got["rx_total"] == want and len(want) == 2


def _latency_map():
    """``struct {__u32 disk; __u32 slot;} → __u64`` — a bcc-style log2 histogram."""
    def key(b):
        u32 = b.integer("__u32", 4)
        return b.struct("hist_key", [("disk", u32), ("slot", u32)])
    return _typed_map(MapType.HASH, "h", key, lambda b: b.integer("__u64", 8))


@contextlib.contextmanager
def _latency_exporter(pins):
    """An exporter of a log2 latency histogram over :func:`_latency_map`, filled with
    ``{(disk, slot): count}``: 15 on disk 0 (7 of them past the last slot), 4 on disk 1."""
    counts = {(0, 0): 1, (0, 1): 2, (0, 3): 5, (0, 9): 7, (1, 2): 4}  # slot 9 > max
    with _latency_map() as m:
        m.update_items([({"disk": d, "slot": s}, c) for (d, s), c in counts.items()])
        pin = pins(m, "hist")
        yield exporter_for(f"""
[[metric]]
name = "io_latency_seconds"
type = "histogram"
map = {{ pinned = "{pin}" }}
labels = [{{ name = "disk", field = "key.disk" }}]
bucket = {{ field = "key.slot", type = "log2", max = 4, multiplier = 0.001 }}
""")


def test_log2_histogram_is_cumulative_with_inf_and_count(pins):
    with _latency_exporter(pins) as exporter:
        got = scrape(exporter)
    buckets = got["io_latency_seconds_bucket"]
    le = ["0.0", "0.001", "0.003", "0.007", "0.015", "+Inf"]
    assert [buckets[(("disk", "0"), ("le", b))] for b in le] == [1, 3, 3, 8, 8, 15]
    assert [buckets[(("disk", "1"), ("le", b))] for b in le] == [0, 0, 4, 4, 4, 4]
    assert got["io_latency_seconds_count"] == {(("disk", "0"),): 15, (("disk", "1"),): 4}


def test_a_histogram_in_openmetrics_passes_its_parser(pins):
    """OpenMetrics has a histogram's ``_count`` only with its ``_sum``, and a slot histogram
    knows no sum: what the exporter serves to a client asking for OpenMetrics is accepted by
    prometheus-client's OpenMetrics parser (which refused a ``_count`` alone), with the count
    in ``+Inf``; the text format keeps ``_count``."""
    with _latency_exporter(pins) as exporter:
        families = list(exporter.collect())
        exporter.settle(True)
    body, content_type = response.exposition(
        families, "application/openmetrics-text; version=1.0.0; charset=utf-8")
    assert content_type.startswith("application/openmetrics-text")
    [histogram] = [f for f in openmetrics_families(body.decode())
                   if f.name == "io_latency_seconds"]
    assert histogram.type == "histogram"
    inf = {s.labels["disk"]: s.value for s in histogram.samples if s.labels.get("le") == "+Inf"}
    assert inf == {"0": 15, "1": 4}
    assert {s.name for s in histogram.samples} == {"io_latency_seconds_bucket"}
    text, _ = response.exposition(families, "")
    assert b"io_latency_seconds_count{disk=\"0\"} 15.0" in text


def test_max_series_keeps_the_largest_and_counts_the_rest(pins):
    with _latency_map() as m:
        m.update_items([({"disk": d, "slot": 0}, 100 + d) for d in range(10)])
        pin = pins(m, "top")
        got = scrape(exporter_for(f"""
[[metric]]
name = "per_disk"
type = "gauge"
map = {{ pinned = "{pin}" }}
max_series = 3
labels = [{{ name = "disk", field = "key.disk" }}]
"""))
    assert got["per_disk"] == {(("disk", "9"),): 109, (("disk", "8"),): 108,
                               (("disk", "7"),): 107}
    assert got["bpfbatch_export_series_overflow"] == {(("metric", "per_disk"),): 7}


def _writer(pin: str, start: int, count: int, result) -> None:
    """Insert ``count`` new keys with weights, in its own process; report the total. A full
    map (E2BIG) waits for the exporter's next drain."""
    total = 0
    try:
        m = Map.open(pinned=pin)
        rng = np.random.default_rng(start)
        for key in range(start, start + count):
            weight = int(rng.integers(1, 1000))
            while True:
                try:
                    m.update(key.to_bytes(4, "little") + (key % 3).to_bytes(4, "little"),
                             weight.to_bytes(8, "little"), BPF_NOEXIST)
                    break
                except KernelError as exc:
                    if exc.errno != errno.E2BIG:
                        raise
                    time.sleep(0.001)
            total += weight
    except BaseException as exc:
        result.put(repr(exc))
        raise
    result.put(total)


def test_drain_mode_loses_nothing_under_a_concurrent_writer(pins):
    with _latency_map() as m:
        pin = pins(m, "drain")
        ex = exporter_for(f"""
batch_size = 16

[[metric]]
name = "events_total"
type = "counter"
mode = "drain"
map = {{ pinned = "{pin}" }}
labels = [{{ name = "kind", field = "key.slot" }}]
""")
        ctx = multiprocessing.get_context("spawn")
        result = ctx.Queue()
        writers = [ctx.Process(target=_writer, args=(pin, i * 100_000, 4000, result))
                   for i in range(2)]
        for w in writers:
            w.start()
        scrapes = 0
        while any(w.is_alive() for w in writers) or scrapes < 2:
            scrape(ex)  # each drains what the writers put in so far (the map holds 256)
            scrapes += 1
        for w in writers:
            w.join(60)
        final = scrape(ex)
        assert m.count() == 0
    totals = [result.get(timeout=60) for _ in writers]
    assert all(isinstance(t, int) for t in totals), totals
    written = sum(totals)
    assert sum(final["events_total"].values()) == written
    assert set(final["events_total"]) == {(("kind", str(k)),) for k in range(3)}
    assert scrapes > 2


def test_a_map_recreated_between_scrapes_is_picked_up(pins):
    ex = exporter_for(f"""
[[metric]]
name = "per_disk"
type = "gauge"
map = {{ pinned = "/sys/fs/bpf/bbtest_reload_{TAG}" }}
labels = [{{ name = "disk", field = "key.disk" }}]
""")
    with _latency_map() as m:
        m.update_items([({"disk": 1, "slot": 0}, 5)])
        pins(m, "reload")
        first = scrape(ex)
        first_id = m.info.id
    os.unlink(f"/sys/fs/bpf/bbtest_reload_{TAG}")
    gone = scrape(ex)  # no map: left out of this scrape, counted
    with _latency_map() as m:
        m.update_items([({"disk": 2, "slot": 0}, 9)])
        pins(m, "reload")
        second = scrape(ex)
        second_id = m.info.id
    pin = f"/sys/fs/bpf/bbtest_reload_{TAG}"
    assert first["per_disk"] == {(("disk", "1"),): 5}
    assert "per_disk" not in gone
    assert gone["bpfbatch_export_map_errors_total"] == {(("map", pin),): 1}
    assert second["per_disk"] == {(("disk", "2"),): 9}
    assert first["bpfbatch_export_map_id"] == {(("map", pin),): first_id}
    assert second["bpfbatch_export_map_id"] == {(("map", pin),): second_id} != first_id


def test_a_failing_map_does_not_hide_the_others(pins):
    missing = f"bbexp_none_{TAG}"[:15]
    with _latency_map() as m:
        m.update_items([({"disk": 1, "slot": 0}, 5)])
        pin = pins(m, "ok")
        got = scrape(exporter_for(f"""
[[metric]]
name = "missing"
type = "gauge"
map = {{ name = "{missing}" }}

[[metric]]
name = "present"
type = "gauge"
map = {{ pinned = "{pin}" }}
"""))
    assert got["present"] == {(): 5}
    assert "missing" not in got
    assert got["bpfbatch_export_map_errors_total"][(("map", missing),)] == 1


def test_a_spent_budget_reports_no_partial_sums(pins):
    with _latency_map() as m:
        m.update_items([({"disk": d, "slot": 0}, 1) for d in range(200)])
        pin = pins(m, "budget")
        ex = exporter_for(f"""
scrape_budget = "1ns"

[[metric]]
name = "per_disk"
type = "gauge"
map = {{ pinned = "{pin}" }}
""")
        got = scrape(ex)
    assert "per_disk" not in got
    assert got["bpfbatch_export_budget_exceeded_total"] == {(): 1}


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bpfbatch", "export", *argv],
                          capture_output=True, text=True)


def test_check_binds_against_the_live_map_and_names_file_line(pins, tmp_path):
    with _latency_map() as m:
        pin = pins(m, "check")
        good = tmp_path / "good.toml"
        good.write_text(f'[[metric]]\nname = "lat"\ntype = "histogram"\n'
                        f'map = {{ pinned = "{pin}" }}\n'
                        'bucket = { field = "key.slot", type = "log2", max = 20 }\n')
        bad = tmp_path / "bad.toml"
        bad.write_text(good.read_text().replace("key.slot", "key.slott"))
        wrong_decoder = tmp_path / "dec.toml"
        wrong_decoder.write_text(f'[[metric]]\nname = "x"\ntype = "gauge"\n'
                                 f'map = {{ pinned = "{pin}" }}\n'
                                 'labels = [{ name = "d", field = "key.disk", decoder = "ipv6" }]\n')
        ok, missing, decoder = _cli("--config", str(good), "--check"), \
            _cli("--config", str(bad), "--check"), _cli("--config", str(wrong_decoder), "--check")
        assert m.count() == 0
    assert ok.returncode == 0, ok.stderr
    assert "lat: histogram, read map" in ok.stdout and "ok, 1 metrics" in ok.stdout
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [
        f"bpfbatch: error: {bad}:5: metric 'lat': bucket.field: 'key.slott': no field 'slott' "
        f"(fields: disk, slot) (map {m.info.id} '{m.info.name}')"]
    assert decoder.returncode == 1 and f"{wrong_decoder}:5:" in decoder.stderr
    assert "needs a field of 16 bytes" in decoder.stderr


def test_an_enum_keeps_btfs_signedness_in_static_label_maps(pins):
    """A signed enum (BTF's kind flag; an ENUM64, the kind libbpf sets it on without a
    negative enumerator) still reads -1 as -1, as every output does: its static value map
    matches, and bpftool agrees on the number."""
    with _typed_map(MapType.HASH, "e",
                    lambda b: b.enum("level", {"LOW": 1, "HIGH": 2}, 8, signed=True),
                    lambda b: b.integer("__u64", 8)) as m:
        m.update_items([(-1, 5), (1, 7), (2, 11)])
        pin = pins(m, "enum")
        got = scrape(exporter_for(f"""
[[metric]]
name = "level_total"
type = "counter"
map = {{ pinned = "{pin}" }}
labels = [{{ name = "level", field = "key", values = {{ -1 = "unset", 1 = "low" }} }}]
"""))
        entries = bpftool(m)
    assert sorted(map(str, (e["key"] for e in entries))) == ["-1", "HIGH", "LOW"]
    assert got["level_total"] == {(("level", "unset"),): 5.0, (("level", "low"),): 7.0,
                                  (("level", "2"),): 11.0}
