"""slabratetop counts allocations exactly: opening N TCP sockets allocates N objects from the
``TCP`` cache (``sk_prot_alloc``) and N from ``sock_inode_cache``, in this process.

Honest limits of the cross-check: without ``CONFIG_SLUB_STATS`` the kernel keeps no per-cache
allocation counter, so the exact figure is checked with the tool's own pid filter; what the
kernel does say independently is each cache's object size (``/sys/kernel/slab/<cache>/
slab_size``, which BYTES / ALLOCS must equal) and, in ``/proc/slabinfo``, that at least N
``TCP`` objects exist while the sockets are open. Without the pid filter other processes may
allocate meanwhile, so the count is only bounded below.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bpfbatch.map import probes
from bpfbatch.top.slabratetop import SlabRateTop

SOCKETS = 300


def _row(caches: np.ndarray, name: str) -> tuple[int, int]:
    match = caches[caches["name"] == name.encode()]
    return (int(match["count"].sum()), int(match["bytes"].sum())) if len(match) else (0, 0)


def _slab_size(cache: str) -> int:
    return int(Path(f"/sys/kernel/slab/{cache}/slab_size").read_text())


def _slabinfo_objects(cache: str) -> int:
    for line in Path("/proc/slabinfo").read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == cache:
            return int(fields[2])  # <num_objs>
    raise AssertionError(f"{cache} not in /proc/slabinfo")


def _open_sockets(tool: SlabRateTop) -> tuple[np.ndarray, int]:
    tool.sample()  # start from an empty interval
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(SOCKETS)]
    try:
        caches = tool.sample().caches
        objects = _slabinfo_objects("TCP")
    finally:
        for s in sockets:
            s.close()
    return caches, objects


@pytest.mark.parametrize("hook", ["tp_btf", "raw_tp"])
def test_counts_this_process_allocations_exactly(hook):
    support = getattr(probes, hook)("kmem_cache_alloc")
    if not support:
        pytest.skip(f"{hook} does not attach here: {support.reason}")
    with SlabRateTop(pid=os.getpid(), hook_kinds=(hook,)) as tool:
        caches, objects = _open_sockets(tool)
        assert tool.sample().dropped_events == 0
    for cache in ("TCP", "sock_inode_cache"):
        count, nbytes = _row(caches, cache)
        assert count == SOCKETS, cache
        assert nbytes == SOCKETS * _slab_size(cache), cache
    assert objects >= SOCKETS


def test_unfiltered_counts_at_least_ours():
    with SlabRateTop() as tool:
        caches, _ = _open_sockets(tool)
    count, nbytes = _row(caches, "TCP")
    assert count >= SOCKETS
    assert nbytes == count * _slab_size("TCP")
    assert len(np.unique(caches["name"])) == len(caches)  # merged by name


def test_kmalloc_counted_by_size_class():
    """kmalloc() (pipe buffers, pipe_inode_info...) fires kmem:kmalloc, not kmem_cache_alloc:
    the rows are size classes the kernel has kmalloc caches for, BYTES = ALLOCS x size."""
    with SlabRateTop(pid=os.getpid()) as tool:
        tool.sample()
        for _ in range(SOCKETS):
            for fd in os.pipe():
                os.close(fd)
        caches = tool.sample().caches
    kmalloc = caches[np.char.startswith(caches["name"], b"kmalloc-")]
    assert kmalloc["count"].sum() >= SOCKETS
    existing = {line.split()[0] for line in Path("/proc/slabinfo").read_text().splitlines()}
    for row in kmalloc:
        name = row["name"].decode()
        size = name.removeprefix("kmalloc-")
        size = int(size[:-1]) * 1024 if size.endswith("k") else int(size)
        assert name in existing
        assert row["bytes"] == row["count"] * size, name


def test_cli_prints_bcc_columns():
    proc = subprocess.run([sys.executable, "-m", "bpfbatch", "top", "slab", "-C", "-r", "3",
                           "-s", "count", "0.2", "2"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    headers = [line for line in proc.stdout.splitlines() if line.startswith("CACHE")]
    assert len(headers) == 2
    assert headers[0].split() == ["CACHE", "ALLOCS", "BYTES"]
    assert proc.stdout.count(" loadavg: ") == 2


def test_the_screen_is_cleared_on_a_terminal_only():
    """As ``top maps``: the clear's escape codes go to a terminal, never into a pipe."""
    import os
    import pty

    argv = [sys.executable, "-m", "bpfbatch", "top", "slab", "-r", "1", "0.1", "1"]
    piped = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert piped.returncode == 0 and "CACHE" in piped.stdout and "\x1b" not in piped.stdout
    main, tty = pty.openpty()
    try:
        done = subprocess.run(argv, stdout=tty, stderr=subprocess.PIPE, timeout=60)
        assert done.returncode == 0, done.stderr
        os.set_blocking(main, False)
        shown = os.read(main, 1 << 16)
    finally:
        os.close(main)
        os.close(tty)
    assert b"\x1b[H\x1b[2J" in shown and b"CACHE" in shown
