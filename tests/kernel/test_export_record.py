"""``export`` with ``mode = "record"``: events of a perf event array and of a ring buffer
counted by their fields, against the producer's own counters (sequence numbers, failed
outputs): every event counted in exactly one delivered scrape, a scrape not delivered
counted again by the next, and what the kernel dropped reported as lost, so that counted +
lost = produced."""

from __future__ import annotations

import signal
import subprocess
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_export import exporter_for, scrape

from bpfbatch.errors import InputError
from bpfbatch.export import server
from bpfbatch.export.config import ConfigError
from bpfbatch.labs.events import PERF, RINGBUF, EventProducer
from fault_helpers import bpfbatch_argv, communicate

CONFIG = """
[[metric]]
name = "events_total"
help = "Events per CPU"
type = "counter"
mode = "record"
event = "struct event"
map = {{ pinned = "{pin}" }}
labels = [{{ name = "cpu", field = "cpu" }}]

[[metric]]
name = "event_bytes_total"
help = "Bytes per syscall id"
type = "counter"
mode = "record"
event = "struct event"
map = {{ pinned = "{pin}" }}
value = "size"
"""


@pytest.fixture
def producer():
    with EventProducer(ring_bytes=1 << 20) as p:
        yield p


def counted(samples) -> dict[int, float]:
    return {int(dict(labels)["cpu"]): v for labels, v in samples["events_total"].items()}


def run_each_cpu(p: EventProducer, outputs: int, n: int) -> None:
    p.configure(outputs=outputs, per_run=n)
    for cpu in (0, 1):
        p.run(cpu)


def test_perf_events_counted_once_and_loss_reported_exactly(producer, pins):
    ex = exporter_for(CONFIG.format(pin=pins(producer.perf, "exrec")))
    assert counted(scrape(ex)) == {}  # the first scrape stores the rings: from now on
    run_each_cpu(producer, PERF, 300)
    samples = scrape(ex)
    assert counted(samples) == {0: 300, 1: 300}
    assert samples["event_bytes_total"][()] == 600 * 32
    run_each_cpu(producer, PERF, 100)
    list(ex.collect())
    ex.settle(False)  # not delivered: counted again, once
    assert counted(scrape(ex)) == {0: 400, 1: 400}
    run_each_cpu(producer, PERF, 20_000)  # far more than a 64-page ring holds
    scrape(ex)
    run_each_cpu(producer, PERF, 1)  # carries each CPU's lost record
    samples = scrape(ex)
    lost = samples["bpfbatch_export_events_lost_total"]
    produced = producer.counters()
    assert sum(lost.values()) == produced["perf_failures"] > 0
    assert sum(counted(samples).values()) + sum(lost.values()) == produced["next_seq"]
    where = (("map", ex.sources[0].ref.pinned),)
    assert samples["bpfbatch_export_events_fill_high_water"][where] > 0.9  # it overflowed
    assert where in samples["bpfbatch_export_events_lag_bytes"]


def test_ring_buffer_events_not_delivered_stay_for_the_next_exporter(producer, pins):
    text = CONFIG.format(pin=pins(producer.ring, "exring"))
    run_each_cpu(producer, RINGBUF, 250)
    first = exporter_for(text)
    list(first.collect())  # counted, never settled: the exporter dies here
    first.sources[0]._close()
    second = exporter_for(text)
    assert counted(scrape(second)) == {0: 250, 1: 250}
    run_each_cpu(producer, RINGBUF, 10)
    assert counted(scrape(second)) == {0: 260, 1: 260}
    assert producer.counters()["ringbuf_failures"] == 0


def test_record_refusals(producer, pins, maps):
    pin = pins(producer.perf, "exref")
    with pytest.raises(ConfigError, match=r"test.toml:\d+: metric 'events_total': mode: record "
                                          r"counts the events .*\(event = \"struct event\"\)"):
        exporter_for(CONFIG.format(pin=pin).replace('event = "struct event"\n', "", 1))
    with pytest.raises(ConfigError, match="a gauge cannot accumulate"):
        exporter_for(CONFIG.format(pin=pin).replace('"counter"', '"gauge"', 1))
    with pytest.raises(ConfigError, match=r"mode: map .* is read by 'event_bytes_total' and "
                                          r"recorded by 'events_total'"):
        record_lines = 'mode = "record"\nevent = "struct event"\n'
        exporter_for("".join(CONFIG.format(pin=pin).rsplit(record_lines, 1)))  # 2nd: read
    cfg = exporter_for(CONFIG.format(pin=pin)).config
    lines = server.check(cfg)
    assert lines[0].startswith("events_total: counter, record map ") and "labels cpu" in lines[0]
    hashmap = maps(name="bb_not_events")
    text = CONFIG.format(pin=pins(hashmap, "exhash"))
    with pytest.raises(InputError, match=r"mode: record reads ringbuf and perf_event_array maps "
                                         r"\(map \d+ 'bb_not_events' is hash\)"):
        server.check(exporter_for(text).config)
    with pytest.raises(InputError, match=r"event: .*no 'struct nope'"):
        server.check(exporter_for(CONFIG.format(pin=pin).replace("struct event", "struct nope"))
                     .config)


def test_served_exporter_holds_the_rings_from_its_start_and_stops_on_sigterm(producer, pins,
                                                                            tmp_path):
    """``bpfbatch export`` stores the perf rings before it listens, so the events of its first
    scrape are there; SIGTERM ends it with its one line and 143."""
    config_path = tmp_path / "rec.toml"
    config_path.write_text(CONFIG.format(pin=pins(producer.perf, "exsrv")))
    proc = subprocess.Popen(bpfbatch_argv("export", "--config", config_path, "--listen",
                                          "127.0.0.1:0"), stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert "serving http://" in line, line + proc.stderr.read()
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        run_each_cpu(producer, PERF, 500)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            text = r.read().decode()
        samples = {(s.name, s.labels.get("cpu")): s.value
                   for fam in text_string_to_metric_families(text) for s in fam.samples}
        assert samples[("events_total", "0")] == samples[("events_total", "1")] == 500
    finally:
        proc.send_signal(signal.SIGTERM)
        err = communicate(proc, 60)[1]
    assert proc.returncode == 143 and "interrupted (SIGTERM) after 1 scrapes" in err, err
