"""Side-by-side benchmarks of bpfbatch against its real peers (see harness.py)."""
