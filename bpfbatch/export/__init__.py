"""``bpfbatch export``: BPF maps as Prometheus metrics, read in batches.

:mod:`.config` reads the TOML description of the metrics (pure: no kernel),
:mod:`.fields` binds a metric to a live map's BTF (which bytes are its value, labels and
bucket), :mod:`.collect` reads or drains each map once per scrape and aggregates every metric
on it with numpy, :mod:`.journal` keeps what a drain took until its response is delivered,
:mod:`.response` serves a scrape over HTTP and says whether it was delivered, and
:mod:`.server` is the Prometheus collector and the exporter's life (start-up, signals).
"""
