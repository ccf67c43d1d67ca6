"""``bpfbatch export`` refuses a bad configuration before it serves: the same one line at
``--check`` and at start-up, never first at scrape time. Which metric names may sit together
is checked against ``promtool check metrics`` (an outside parser of the exposition): the
configuration refuses exactly the pairs whose exposition promtool rejects, in either format the
exporter serves (the text format, or OpenMetrics, which Prometheus asks for first)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest as text_format
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.export import config, server

TAG = f"{os.getpid()}"


def _hist_map() -> Map:
    """``struct {__u32 disk; __u32 slot;} → __u64``, a few slots filled."""
    with BtfBuilder() as b:
        u32, u64 = b.integer("__u32", 4), b.integer("__u64", 8)
        key = b.struct("hist_key", [("disk", u32), ("slot", u32)])
        m = Map.create(MapType.HASH, 8, 8, 64, name=f"bbref{TAG}"[:15], btf_fd=b.load(),
                       btf_key_type_id=key, btf_value_type_id=u64)
    m.update_items([({"disk": 0, "slot": s}, s + 1) for s in range(4)])
    return m


def _metric(name: str, kind: str, pin: str) -> str:
    bucket = 'bucket = { field = "key.slot", type = "log2", max = 4 }\n' \
        if kind == "histogram" else ""
    return f'[[metric]]\nname = "{name}"\nhelp = "h"\ntype = "{kind}"\n' \
           f'map = {{ pinned = "{pin}" }}\n{bucket}'


@pytest.mark.skipif(not shutil.which("promtool"), reason="needs promtool (prometheus)")
@pytest.mark.parametrize("first, second", [
    (("lat", "histogram"), ("lat_count", "gauge")),
    (("lat", "histogram"), ("lat_sum", "gauge")),
    (("lat", "histogram"), ("lat_bucket", "counter")),
    (("lat", "histogram"), ("lat_counts", "gauge")),
    (("x", "counter"), ("x_total", "gauge")),
    (("x_total", "counter"), ("x", "gauge")),
    (("x_total", "counter"), ("x_totals", "gauge")),
    (("a", "gauge"), ("bpfbatch_export_scrape_seconds", "gauge")),
    (("a", "gauge"), ("bpfbatch_export_map_entries", "gauge")),
])
def test_names_refused_are_those_promtool_rejects(pins, first, second):
    with _hist_map() as m:
        pin = pins(m, "names")
        text = _metric(*first, pin) + "\n" + _metric(*second, pin)
        try:
            config.parse(text, "n.toml")
            refused = False
        except config.ConfigError as exc:
            refused = True
            line = text.count("\n", 0, text.index(f'name = "{second[0]}"')) + 1
            assert str(exc).startswith(f"n.toml:{line}: metric '{second[0]}': name: "), exc
        # What the exporter would serve had it taken the pair: each metric parsed alone
        # under a name of its own, then given the name of the pair.
        a, b = (config.parse(_metric("m", kind, pin), "n.toml") for _, kind in (first, second))
        both = dataclasses.replace(a, metrics=(
            dataclasses.replace(a.metrics[0], name=first[0]),
            dataclasses.replace(b.metrics[0], name=second[0])))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(server.Exporter(both, log=lambda line: None))
        lints = [subprocess.run(["promtool", "check", "metrics"], input=render(registry),
                                capture_output=True) for render in (text_format, openmetrics)]
    assert refused == any(lint.returncode == 1 for lint in lints), \
        [lint.stdout + lint.stderr for lint in lints]


def _array_map() -> Map:
    with BtfBuilder() as b:
        u32, u64 = b.integer("__u32", 4), b.integer("__u64", 8)
        return Map.create(MapType.ARRAY, 4, 8, 16, name=f"bbrefa{TAG}"[:15], btf_fd=b.load(),
                          btf_key_type_id=u32, btf_value_type_id=u64)


def _export(conf, *more: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bpfbatch", "export", "--config", str(conf),
                           "--listen", "127.0.0.1:0", *more],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("case, status, words", [
    ("field", 1, ["labels[0].field: 'key.nope': no field 'nope' (fields: disk, slot)"]),
    ("size", 1, ["labels[0].decoder: 'key.disk': --decode ipv6 needs a field of 16 bytes"]),
    ("drain", 1, ["mode: drain needs a hash-type map", "is array"]),
    ("decoder", 2, ["labels[0].decoder: unknown kind 'ipv5'"]),
    ("age", 2, ["labels[0].decoder: 'age' prints seconds since", "new series"]),
])
def test_config_errors_stop_check_and_start_up_alike(pins, tmp_path, case, status, words):
    """Without ``--check`` the exporter binds every metric before it listens: it exits with
    the line ``--check`` prints, and never serves (nothing is drained)."""
    with _hist_map() as h, _array_map() as a:
        hist, array = pins(h, "refh"), pins(a, "refa")
        labels = {"field": ("key.nope", ""), "size": ("key.disk", ', decoder = "ipv6"'),
                  "decoder": ("key.disk", ', decoder = "ipv5"'),
                  "age": ("key.disk", ', decoder = "age"')}
        if case == "drain":
            text = f'[[metric]]\nname = "d_total"\ntype = "counter"\nmode = "drain"\n' \
                   f'map = {{ pinned = "{array}" }}\n'
        else:
            field, decoder = labels[case]
            text = f'[[metric]]\nname = "g"\ntype = "gauge"\nmap = {{ pinned = "{hist}" }}\n' \
                   f'labels = [{{ name = "l", field = "{field}"{decoder} }}]\n'
        conf = tmp_path / f"{case}.toml"
        conf.write_text(text)
        checked, started = _export(conf, "--check"), _export(conf)
        assert h.count() == 4
    for run in (checked, started):
        assert run.returncode == status, run.stderr
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("bpfbatch: error: "), run.stderr
        assert f"{conf}:" in lines[0] and all(w in lines[0] for w in words), lines[0]
    assert "serving" not in started.stderr
    assert checked.stderr.split(str(conf), 1)[1] == started.stderr.split(str(conf), 1)[1]


@pytest.mark.parametrize("source, words", [
    ("deep", "nested too deeply"),
    ("/dev/zero", "more than 256 MiB from a pipe or device"),
])
def test_unreadable_configurations_are_one_line_and_exit_2(tmp_path, source, words):
    conf = source
    if source == "deep":
        conf = tmp_path / "deep.toml"
        conf.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    run = _export(conf, "--check")
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in run.stderr, run.stderr
