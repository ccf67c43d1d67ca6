"""``python -m tools.bench.refresher MAP_ID KEYS [WRITER [GAP]]`` — the adversarial refresher
of a prune.

For keys ``0..KEYS-1`` of a ``u32 → {u64 packets; u64 last_seen_ns}`` map (per-CPU maps too),
round and round in a tight loop, in its own process: write an *expired* value
(``last_seen_ns = 1``), then at once a *fresh* one (now). Two kinds of writer:

- ``replace`` (the default): ``bpf_map_update_elem`` from user space, both writes with
  ``BPF_EXIST`` (each success proves the entry was there; on a plain or LRU hash each one
  replaces the element, on a per-CPU one it writes every CPU's value in place under the bucket
  lock). A prune that judges the expired value and deletes after the fresh one landed has
  deleted a live entry (the race of cilium/cilium#46298).
- ``inplace``: ``tools/bench/bpf/refresher.bpf.c``, a BPF program that looks the element up and
  writes both values through that pointer (a datapath's refresh), ``GAP`` loop turns apart
  (default 0). A key it finds gone was deleted while expired: the fresh write that followed
  went to a deleted element, so every such deletion is a live one unless the prune put the
  element back.

It counts, until stdin closes:

- ``live``: a key found gone although the last thing written to it was fresh (``replace``:
  the expired write found it gone; ``inplace``: any key found gone, unless counted in
  ``window``), that did not come back
  within a second (a prune that puts a refreshed entry back is given that long: on a shared
  machine under load it can be descheduled between its delete and its put-back for tens of
  milliseconds, which a 50 ms grace once counted as a live deletion): a live entry deleted;
- ``expired_deleted`` (``replace``): the fresh write found the key gone: a prune deleted the
  expired value, which is its job;
- ``window`` (``inplace``): a key gone whose last fresh write the program saw land on an
  element already deleted (looked up again after the write, the key no longer led to it): the
  window every mode leaves, a write through a pointer looked up before the delete; counted
  apart so that a prune's own losses (``live``) are judged without it;
- ``aged``: a key found gone whose last fresh write is older than :data:`CUTOFF_S`, the
  prunes' ``--older-than``: it expired, and deleting it was the prune's job (the refresher
  fell behind: on a loaded machine, or while it waited :data:`GRACE_S` for another key, which
  once made the 63 others age out and count as 'live');
- ``cycles``: expire-then-refresh pairs written.

A deleted key is re-created (``BPF_NOEXIST``) so the table stays full. Prints one JSON line.
"""

from __future__ import annotations

import ctypes
import errno
import json
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bpfbatch import Map
from bpfbatch._sys import abi
from bpfbatch._sys.abi import BPF_EXIST, BPF_NOEXIST
from bpfbatch._sys.libbpf import lib, num_possible_cpus
from bpfbatch.loader import PROGS_DIR, BpfObject

#: How long a vanished fresh entry may take to be put back before it counts as deleted, and
#: how often the refresher looks for it meanwhile.
GRACE_S = 1.0
LOOK_S = 0.0002
#: The cutoff the prunes racing this refresher use (tests and bench: ``--older-than 1s``).
CUTOFF_S = 1.0
WRITERS = ("replace", "inplace")
BPF_SOURCE = Path(__file__).parent / "bpf" / "refresher.bpf.c"


class Flows:
    """The map's keys and the two values, laid out for the syscalls (every CPU's copy for a
    per-CPU map)."""

    def __init__(self, m: Map):
        self.m = m
        cpus = num_possible_cpus() if m.info.percpu else 1
        self.expired = np.zeros((cpus, 2), np.uint64)
        self.expired[:, 1] = 1
        self.fresh = np.zeros((cpus, 2), np.uint64)
        self.scratch = np.zeros((cpus, 2), np.uint64)
        self.key = ctypes.c_uint32()
        #: When each key was last written fresh (at the latest), CLOCK_MONOTONIC seconds.
        self.fresh_at: dict[int, float] = {}

    def aged(self, key: int) -> bool:
        """Whether ``key``'s last fresh write is older than the prunes' cutoff."""
        return time.monotonic() - self.fresh_at.get(key, 0.0) > CUTOFF_S

    def write(self, key: int, value: np.ndarray, flags: int) -> int:
        self.key.value = key
        return lib.bpf_map_update_elem(self.m.fd, ctypes.byref(self.key), value.ctypes.data,
                                       flags)

    def refresh_value(self) -> np.ndarray:
        self.fresh[:, 1] = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        return self.fresh

    def came_back(self, key: int) -> bool:
        """Whether ``key`` reappears within :data:`GRACE_S` (put back by the prune)."""
        self.key.value = key
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            if lib.bpf_map_lookup_elem(self.m.fd, ctypes.byref(self.key),
                                       self.scratch.ctypes.data) == 0:
                return True
            time.sleep(LOOK_S)
        return False


def ready() -> None:
    print("ready", flush=True)


def replace_writer(flows: Flows, keys: int, counts: dict, stopped) -> None:
    ready()
    i = 0
    while not (i % 256 == 0 and stopped()):
        key = i % keys
        i += 1
        if flows.write(key, flows.expired, BPF_EXIST) == -errno.ENOENT:
            if flows.aged(key):
                counts["aged"] += 1
            elif not flows.came_back(key):
                counts["live"] += 1
            flows.write(key, flows.expired, BPF_NOEXIST)
        if flows.write(key, flows.refresh_value(), BPF_EXIST) == -errno.ENOENT:
            counts["expired_deleted"] += 1
            flows.write(key, flows.refresh_value(), BPF_NOEXIST)
        flows.fresh_at[key] = time.monotonic()
        counts["cycles"] += 1


def build_writer(tmp: Path) -> Path:
    """``refresher.bpf.c`` compiled into ``tmp`` (clang, against the package's headers)."""
    clang = shutil.which("clang-16") or shutil.which("clang") or "clang"
    obj = tmp / "refresher.bpf.o"
    subprocess.run([clang, "-g", "-O2", "-target", "bpf", "-D__TARGET_ARCH_x86",
                    f"-I{PROGS_DIR.parent.parent / 'progs'}", f"-I{PROGS_DIR}", "-c",
                    str(BPF_SOURCE), "-o", str(obj)], check=True)
    return obj


def inplace_writer(flows: Flows, keys: int, gap: int, counts: dict, stopped) -> None:
    with tempfile.TemporaryDirectory() as tmp, BpfObject(build_writer(Path(tmp))) as obj:
        obj.configure_map("target", reuse_fd=flows.m.fd)
        obj.load()
        fd = obj.program_fd("refresh")
        dtype = obj.dtype("refresh_args")
        args = np.zeros(1, dtype)
        args["nkeys"], args["gap"] = keys, gap
        run = abi.opts(abi.BpfTestRunOpts, ctx_in=args.ctypes.data, ctx_size_in=dtype.itemsize)
        ready()
        window = 0  # keys whose last fresh write landed on a deleted element
        while not stopped():
            for _ in range(64):
                ret = lib.bpf_prog_test_run_opts(fd, ctypes.byref(run))
                if ret < 0:
                    raise OSError(-ret, "run the refresher program")
                ran = time.monotonic()  # every key the run found was written fresh by now
                missing = int(args["missing"][0])
                flows.fresh_at.update((k, ran) for k in range(keys) if not missing >> k & 1)
                for key in (k for k in range(keys) if missing >> k & 1):
                    if flows.aged(key):
                        counts["aged"] += 1
                    elif not flows.came_back(key):
                        counts["window" if window >> key & 1 else "live"] += 1
                    flows.write(key, flows.refresh_value(), BPF_NOEXIST)
                    flows.fresh_at[key] = time.monotonic()
                # the marks of this run's writes; a key missing in it was re-created above
                window = int(args["window"][0])
        counts["cycles"] = int(args["cycles"][0])


def main() -> None:
    map_id, keys = int(sys.argv[1]), int(sys.argv[2])
    writer = sys.argv[3] if len(sys.argv) > 3 else "replace"
    gap = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    if writer not in WRITERS or (writer == "inplace" and keys > 64):
        raise SystemExit(f"usage: refresher MAP_ID KEYS [{'|'.join(WRITERS)} [GAP]] "
                         "(inplace: at most 64 keys)")
    m = Map.open_id(map_id)
    flows = Flows(m)
    counts = {"live": 0, "window": 0, "aged": 0, "expired_deleted": 0, "cycles": 0}

    def stopped() -> bool:
        return bool(select.select([sys.stdin], [], [], 0)[0])

    if writer == "replace":
        replace_writer(flows, keys, counts, stopped)
    else:
        inplace_writer(flows, keys, gap, counts, stopped)
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
