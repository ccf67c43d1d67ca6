"""The built-in demo: a BTF-typed flow table of about a million entries, made on the spot,
dumped, and the cost of reading it batched vs key by key, side by side.

The table's layout is declared once, as BTF (what clang would emit for the C structs in
:data:`C_DECLARATION`); the numpy dtypes used to fill it are derived from that BTF, never
retyped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import numpy as np
from tabulate import tabulate

from .._sys.abi import MapType
from ..api import Map
from ..btf import Btf, BtfBuilder
from ..map import cursor, writes
from ..formats import pipeline
from ..records.codec import map_codecs

C_DECLARATION = """\
enum ip_proto : __u8 { IPPROTO_ICMP = 1, IPPROTO_TCP = 6, IPPROTO_UDP = 17 };
struct flow_key   { __be32 saddr, daddr; __be16 sport, dport; enum ip_proto proto; __u8 pad[3]; };
struct flow_stats { __u64 packets, bytes, first_seen_ns, last_seen_ns; };"""

MAP_NAME = "bb_demo_flows"


def create_flow_table(max_entries: int, *, name: str = MAP_NAME) -> Map:
    """An empty hash map ``struct flow_key → struct flow_stats`` with BTF (see module doc)."""
    with BtfBuilder() as b:
        u8, u16, u32, u64 = (b.integer(n, s) for n, s in
                             (("__u8", 1), ("__u16", 2), ("__u32", 4), ("__u64", 8)))
        be16, be32 = b.typedef("__be16", u16), b.typedef("__be32", u32)  # shown decoded
        proto = b.enum("ip_proto", {"IPPROTO_ICMP": 1, "IPPROTO_TCP": 6, "IPPROTO_UDP": 17}, size=1)
        key = b.struct("flow_key", [("saddr", be32), ("daddr", be32), ("sport", be16),
                                    ("dport", be16), ("proto", proto), ("pad", b.array(u8, 3))])
        value = b.struct("flow_stats", [("packets", u64), ("bytes", u64),
                                        ("first_seen_ns", u64), ("last_seen_ns", u64)])
        # The map holds its own reference to the BTF: the builder may go.
        return Map.create(MapType.HASH, b.layout(key)[0], b.layout(value)[0], max_entries,
                          name=name, btf_fd=b.load(), btf_key_type_id=key,
                          btf_value_type_id=value)


def fill_flow_table(m: Map, entries: int, *, seed: int = 1) -> None:
    """Insert ``entries`` distinct synthetic flows with one batched update pass."""
    key_codec, value_codec = map_codecs(m.info, Btf.from_kernel(m.info.btf_id))
    rng = np.random.default_rng(seed)
    keys = np.zeros(entries, key_codec.dtype)
    index = np.arange(entries, dtype=np.uint32)
    # Addresses and ports in network byte order, as the kernel keeps them.
    keys["saddr"] = (0x0A000000 | index).byteswap()          # 10.x.y.z: unique per flow
    keys["daddr"] = rng.integers(0xC0A80001, 0xC0A8FFFF, entries, dtype=np.uint32).byteswap()
    keys["sport"] = rng.integers(1024, 65535, entries, dtype=np.uint16).byteswap()
    keys["dport"] = rng.choice(np.array([22, 53, 80, 443, 8080], np.uint16), entries).byteswap()
    keys["proto"] = rng.choice(np.array([6, 6, 6, 17, 1], np.int8), entries)
    values = np.zeros(entries, value_codec.dtype)
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    values["packets"] = rng.integers(1, 100_000, entries)
    values["bytes"] = values["packets"] * rng.integers(64, 1500, entries)
    # Ages up to ten minutes, but never before the boot (a young machine's clock is small).
    values["first_seen_ns"] = now - rng.integers(min(10**9, now), min(600 * 10**9, now) + 1,
                                                 entries)
    values["last_seen_ns"] = now - rng.integers(0, min(10**9, now) + 1, entries)
    writes.update(m, keys, values, entries)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _per_key_walk(m: Map) -> None:
    """bpftool's and bcc's way: get_next_key + lookup per element."""
    for _ in cursor.BatchCursor(m, force_fallback=True):
        pass


def run(entries: int, *, out=sys.stdout, pin: str | None = None) -> None:
    """Create, fill, show and time; the map disappears at the end unless ``pin`` is given."""
    say = lambda text="": print(text, file=out, flush=True)  # noqa: E731
    say("bpfbatch demo: a flow table declared as\n\n" + C_DECLARATION + "\n")
    with create_flow_table(max(entries, 1)) as m:
        took = _timed(lambda: fill_flow_table(m, entries))
        i = m.info
        say(f"created {i.label}: {i.type_name}, {entries:,} entries, key {i.key_size} B, "
            f"value {i.value_size} B; filled with one batched update pass in {took:.2f} s\n")
        if pin:
            m.pin(pin)
            say(f"pinned at {pin}: try `bpfbatch dump --pinned {pin} -o table --limit 10`\n")
        say(f"$ bpfbatch dump id {i.id} -o table --limit 5 "
            "--decode first_seen_ns=age --decode last_seen_ns=age")
        pipeline.run(cursor.BatchCursor(m, batch_size=5),
                     pipeline.Output("table", i, out.buffer, decode=["first_seen_ns=age",
                                                                      "last_seen_ns=age"]),
                     limit=5)
        say()
        rows = _compare(m)
        base = rows[0][1]
        say(f"reading all {entries:,} entries (to /dev/null), the first row is the baseline:\n")
        say(tabulate([[what, f"{secs:.2f}", f"{secs / base:.1f}×", how] for what, secs, how in rows],
                     headers=["reader", "seconds", "÷ batch", "syscalls"], tablefmt="github"))
        say("\nA dump is not an atomic snapshot: each hash bucket is read atomically, the map "
            "as a whole is not.")


def _compare(m: Map) -> list[tuple[str, float, str]]:
    n = m.info.max_entries
    calls = -(-n // cursor.DEFAULT_BATCH)
    rows = [("bpfbatch API → numpy arrays", _timed(lambda: cursor.read_all(m)),
             f"~{calls} lookup_batch")]
    with open(os.devnull, "wb") as null:
        def dump_jsonl():
            pipeline.run(cursor.read_ahead(cursor.BatchCursor(m)),
                         pipeline.Output("jsonl", m.info, null))
        rows.append(("bpfbatch dump -o jsonl", _timed(dump_jsonl), f"~{calls} lookup_batch"))
        rows.append(("per-key walk in Python", _timed(lambda: _per_key_walk(m)),
                     f"{2 * n:,} get_next_key + lookup"))
        bpftool = shutil.which("bpftool")
        if bpftool:
            argv = [bpftool, "-j", "map", "dump", "id", str(m.info.id)]
            rows.append(("bpftool -j map dump",
                         _timed(lambda: subprocess.run(argv, stdout=null, check=True)),
                         f"{2 * n:,} get_next_key + lookup"))
    return rows
