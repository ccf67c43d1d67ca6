"""``python -m tools.bench tools_readout``: one tcptop interval read-out, and what read-then-clear
loses under load.

Part 1 — one interval read-out of a flow map holding ``--flows`` entries (tcptop's own key and
value layout, from the object's BTF), refilled untimed before every round:

- ``bpfbatch swap+drain``: what ``bpfbatch top tcp`` does — swap the array-of-maps slot (the
  kernel waits for running programs), drain the idle map with LOOKUP_AND_DELETE_BATCH, view the
  records through numpy dtypes;
- ``bpfbatch drain``: the drain alone (the swap's cost is the difference);
- ``bcc items()+clear()``: bcc's tcptop loop (two syscalls per key to read, then a per-key
  delete whose walk restarts after every delete);
- ``bcc items_lookup_and_delete_batch()``: bcc's own batched read, for reference;
- ``libbpf-tools two-pass (C)``: libbpf-tools' tcptop ``print_stat`` loop in C —
  ``get_next_key`` + ``lookup`` into an array, then ``get_next_key`` + ``delete``.

Part 2 — bytes lost under the loopback load the kernel test uses (:mod:`bpfbatch.labs.loopback`:
IPv4 and IPv6 connections, both directions, sampled back to back), compared with the
application's own ``send()``/``recv()`` totals, for three read-out styles over the
same tcptop programs: read-then-clear (bcc/libbpf-tools), drain without swap, swap+drain.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from tabulate import tabulate

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.labs import loopback
from bpfbatch.loader import BpfObject
from bpfbatch.map import cursor, writes
from bpfbatch.top.intervals import SwappedMaps
from bpfbatch.top.tcptop import TcpTop

from . import harness

ROOT = Path(__file__).resolve().parents[2]

# libbpf-tools' tcptop print_stat(): a read pass, then a delete pass, key by key.
TWO_PASS_C = r"""
#include <bpf/bpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	int fd = bpf_map_get_fd_by_id(atoi(argv[1]));
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);
	if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &len)) {
		fprintf(stderr, "two_pass: open map %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	char *keys = malloc((size_t)info.max_entries * info.key_size);
	char *values = malloc((size_t)info.max_entries * info.value_size);
	char *key = malloc(info.key_size), *prev = NULL;
	long rows = 0;
	while (!bpf_map_get_next_key(fd, prev, keys + rows * info.key_size)) {
		if (bpf_map_lookup_elem(fd, keys + rows * info.key_size,
					values + rows * info.value_size))
			return 1;
		prev = keys + rows++ * info.key_size;
	}
	prev = NULL;
	while (!bpf_map_get_next_key(fd, prev, key)) {
		if (bpf_map_delete_elem(fd, key))
			return 1;
		prev = key;
	}
	printf("%ld\n", rows);
	return 0;
}
"""


def _build_two_pass(workdir: Path) -> Path:
    src, exe = workdir / "two_pass.c", workdir / "two_pass"
    src.write_text(TWO_PASS_C)
    subprocess.run(["cc", "-O2", "-o", str(exe), str(src), "-lbpf"], check=True)
    return exe


class FlowMaps:
    """Two flow maps with tcptop's layout behind a one-slot array-of-maps, and their records."""

    def __init__(self, flows: int):
        with BpfObject.package("tcptop") as obj:
            self.key_dtype, self.value_dtype = obj.dtype("tcptop_key"), obj.dtype("tcptop_value")
        size = 1 << (flows - 1).bit_length()
        ks, vs = self.key_dtype.itemsize, self.value_dtype.itemsize
        self.buffers = tuple(Map.create(MapType.HASH, ks, vs, size, name=f"bb_flows_{i}")
                             for i in range(2))
        self.selector = Map.create(MapType.ARRAY_OF_MAPS, 4, 4, 1, name="bb_active",
                                   inner_map_fd=self.buffers[0].fd)
        self.swapped = SwappedMaps(self.selector, self.buffers)
        rng = np.random.default_rng(7)
        keys = np.zeros(flows, self.key_dtype)
        keys["pid"] = rng.integers(1, 1 << 22, flows)
        keys["lport"] = np.arange(flows) % 65536
        keys["dport"] = np.arange(flows) // 65536 + 1
        keys["family"] = 2
        keys["saddr"][:, :4] = rng.integers(0, 256, (flows, 4))
        keys["comm"] = b"bench"
        values = np.zeros(flows, self.value_dtype)
        values["sent"] = rng.integers(0, 1 << 30, flows)
        values["received"] = rng.integers(0, 1 << 30, flows)
        self.keys, self.values, self.count = keys, values, flows

    def fill(self, target: Map) -> None:
        writes.update(target, self.keys, self.values, self.count)

    def fill_active(self) -> None:
        self.fill(self.buffers[self.swapped.active])

    def swap_and_drain(self) -> None:
        keys, values = self.swapped.drain()
        assert len(keys.view(self.key_dtype)) == len(values.view(self.value_dtype)) == self.count

    def drain(self) -> None:
        keys, values = cursor.read_all(self.buffers[0], delete=True)
        assert len(keys.view(self.key_dtype)) == len(values.view(self.value_dtype)) == self.count

    def close(self) -> None:
        for m in (self.selector, *self.buffers):
            m.close()


def _bcc_table(bcc, flows: FlowMaps):
    """A bcc BPF_HASH with the same key and value sizes (opaque bytes: bcc only needs sizes)."""
    size = flows.buffers[0].info.max_entries
    text = (f"struct key_t {{ char raw[{flows.key_dtype.itemsize}]; }};\n"
            f"struct val_t {{ char raw[{flows.value_dtype.itemsize}]; }};\n"
            f"BPF_HASH(flows, struct key_t, struct val_t, {size});\n")
    program = bcc.BPF(text=text)
    return program, program["flows"]


def readout(args, out_dir: Path | None) -> str:
    from tools.bcc_setup import load_bcc

    flows = FlowMaps(args.flows)
    bcc = load_bcc()
    cases: dict[str, harness.Case] = {
        "bpfbatch swap+drain": harness.InProcess(flows.swap_and_drain, setup=flows.fill_active),
        "bpfbatch drain": harness.InProcess(flows.drain, setup=lambda: flows.fill(flows.buffers[0])),
    }
    program = None
    with tempfile.TemporaryDirectory() as tmp:
        two_pass = Map.create(MapType.HASH, flows.key_dtype.itemsize, flows.value_dtype.itemsize,
                              flows.buffers[0].info.max_entries, name="bb_two_pass")
        cases["libbpf-tools two-pass (C)"] = harness.Command(
            [str(_build_two_pass(Path(tmp))), str(two_pass.info.id)],
            setup=lambda: flows.fill(two_pass))
        if bcc is not None:
            program, table = _bcc_table(bcc, flows)
            bcc_map = Map(table.map_fd, owned=False)

            def items_and_clear():
                rows = table.items()
                table.clear()
                assert len(rows) == flows.count

            def batch():
                assert len(list(table.items_lookup_and_delete_batch())) == flows.count

            cases["bcc items()+clear()"] = harness.InProcess(items_and_clear,
                                                             setup=lambda: flows.fill(bcc_map))
            cases["bcc items_lookup_and_delete_batch()"] = harness.InProcess(
                batch, setup=lambda: flows.fill(bcc_map))
        try:
            samples = harness.interleave(cases, rounds=args.rounds, warmup=1)
        finally:
            two_pass.close()
            flows.close()
            if program is not None:
                program.cleanup()
    rows = harness.summarize(samples, "bpfbatch swap+drain")
    return harness.report(f"one tcptop interval read-out, {args.flows} flows", rows,
                          "bpfbatch swap+drain", out_dir=out_dir,
                          params={"flows": args.flows, "rounds": args.rounds,
                                  "bcc": bcc is not None})


# -- part 2: bytes lost under load ----------------------------------------------------------


def _read_then_clear(tool: TcpTop) -> tuple[np.ndarray, np.ndarray]:
    """bcc's and libbpf-tools' interval: read every key, then delete every key found then."""
    active = tool.maps.buffers[tool.maps.active]
    keys, values = [], []
    key = active.next_key(None)
    while key is not None:
        value = active.lookup(key)
        if value is not None:
            keys.append(key)
            values.append(value)
        key = active.next_key(key)
    key = active.next_key(None)
    while key is not None:
        active.delete(key)
        key = active.next_key(key)
    return _arrays(keys, values, active)


def _drain_without_swap(tool: TcpTop) -> tuple[np.ndarray, np.ndarray]:
    return cursor.read_all(tool.maps.buffers[tool.maps.active], delete=True)


def _arrays(keys: list[bytes], values: list[bytes], m: Map) -> tuple[np.ndarray, np.ndarray]:
    return (np.frombuffer(b"".join(keys), np.uint8).reshape(-1, m.info.key_size),
            np.frombuffer(b"".join(values), np.uint8).reshape(-1, m.info.value_size))


STYLES = {
    "read-then-clear (bcc, libbpf-tools)": _read_then_clear,
    "drain without swap": _drain_without_swap,
    "bpfbatch swap+drain": None,
}


def _measure_loss(style, interval: float) -> dict:
    child = loopback.spawn()
    try:
        with TcpTop(pid=child.pid) as tool:
            if style is not None:
                tool.maps.drain = lambda: style(tool)  # the same programs, another read-out
            child.stdin.write("go\n")
            child.stdin.flush()
            counted, intervals = 0, 0
            while True:
                time.sleep(interval)
                finished = child.poll() is not None
                flows = tool.sample().flows
                counted += int(flows["sent"].sum() + flows["received"].sum())
                intervals += 1
                if finished:
                    break
        out, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    moved = json.loads(out)
    total = sum(moved["sent"].values()) + sum(moved["received"].values())
    return {"moved": total, "counted": counted, "lost": total - counted, "intervals": intervals}


def losses(args, out_dir: Path | None) -> str:
    results = {f"{name} @ {interval:g} s": [_measure_loss(style, interval)
                                             for _ in range(args.loss_runs)]
               for interval in args.loss_intervals for name, style in STYLES.items()}
    table = tabulate(
        [[name, runs[0]["moved"], sum(r["intervals"] for r in runs) // len(runs),
          max(r["lost"] for r in runs), sum(r["lost"] for r in runs),
          f"{100 * sum(r['lost'] for r in runs) / sum(r['moved'] for r in runs):.4f}%"]
         for name, runs in results.items()],
        headers=["read-out style @ sleep between read-outs", "bytes moved per run",
                 "intervals per run", "worst run: bytes lost",
                 f"bytes lost, {args.loss_runs} runs", "lost share"],
        tablefmt="github")
    text = f"## bytes lost under loopback load ({args.loss_runs} runs per style)\n\n{table}\n"
    print(text, flush=True)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "tools-readout-losses.json").write_text(json.dumps(results, indent=2) + "\n")
    return text


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench tools_readout",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--flows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loss-runs", type=int, default=3)
    parser.add_argument("--loss-intervals", type=float, nargs="+", default=[0.0, 0.05],
                        help="seconds slept between read-outs (0: back to back)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results")
    args = parser.parse_args(argv)
    readout(args, args.out)
    losses(args, args.out)
    return 0
