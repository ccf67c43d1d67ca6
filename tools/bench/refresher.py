"""``python -m tools.bench.refresher MAP_ID KEYS`` — the adversarial refresher of a prune.

For keys ``0..KEYS-1`` of a ``u32 → {u64 packets; u64 last_seen_ns}`` map, round and round in
a tight loop, in its own process: write an *expired* value (``last_seen_ns = 1``), then at once
a *fresh* one (now). Both writes use ``BPF_EXIST``, so each success proves the entry was there;
a prune that judges the expired value and deletes after the fresh one landed has deleted a
live entry (the race of cilium/cilium#46298, made as likely as a user can make it).

It counts, until stdin closes:

- ``live``: the expired write found the key gone although the last thing written to it was
  fresh, and it did not come back within 50 ms (a prune that puts a refreshed entry back is
  given that long: on a shared machine it may be descheduled between its delete and its
  put-back): a live entry was deleted;
- ``expired_deleted``: the fresh write found the key gone: a prune deleted the expired value,
  which is its job;
- ``cycles``: expire-then-refresh pairs written.

A deleted key is re-created (``BPF_NOEXIST``) so the table stays full. Prints one JSON line.
"""

from __future__ import annotations

import ctypes
import errno
import json
import select
import sys
import time

from bpfbatch._sys.abi import BPF_EXIST, BPF_NOEXIST
from bpfbatch._sys.libbpf import lib
from bpfbatch.map.handle import Map

#: How long a vanished fresh entry may take to be put back before it counts as deleted, and
#: how often the refresher looks for it meanwhile.
GRACE_S = 0.05
LOOK_S = 0.0002


def came_back(lookup, fd, key, scratch) -> bool:
    """Whether ``key`` reappears within :data:`GRACE_S` (put back by the prune)."""
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        if lookup(fd, ctypes.byref(key), scratch) == 0:
            return True
        time.sleep(LOOK_S)
    return False


def main() -> None:
    map_id, keys = int(sys.argv[1]), int(sys.argv[2])
    m = Map.open_id(map_id)
    update, lookup, fd = lib.bpf_map_update_elem, lib.bpf_map_lookup_elem, m.fd
    expired = ctypes.create_string_buffer(16)
    ctypes.memmove(ctypes.addressof(expired) + 8, (1).to_bytes(8, "little"), 8)
    fresh = ctypes.create_string_buffer(16)
    scratch = ctypes.create_string_buffer(16)
    key = ctypes.c_uint32()
    counts = {"live": 0, "expired_deleted": 0, "cycles": 0}
    print("ready", flush=True)
    i = 0
    while True:
        if i % 256 == 0 and select.select([sys.stdin], [], [], 0)[0]:
            break
        key.value = i % keys
        i += 1
        if update(fd, ctypes.byref(key), expired, BPF_EXIST) == -errno.ENOENT:
            if not came_back(lookup, fd, key, scratch):
                counts["live"] += 1
            update(fd, ctypes.byref(key), expired, BPF_NOEXIST)
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        ctypes.memmove(ctypes.addressof(fresh) + 8, now.to_bytes(8, "little"), 8)
        if update(fd, ctypes.byref(key), fresh, BPF_EXIST) == -errno.ENOENT:
            counts["expired_deleted"] += 1
            update(fd, ctypes.byref(key), fresh, BPF_NOEXIST)
        counts["cycles"] += 1
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
