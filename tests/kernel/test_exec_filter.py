"""User-written filters (progs/bpfbatch_filter.h) on the real kernel: the example filter selects,
dumps and deletes exactly what the equivalent --where expression does on the same map, through
the API and the CLI; every misuse is one line naming the option, file or program."""

import errno
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bpfbatch import Map
from bpfbatch._sys.abi import BPF_EXIST, BPF_NOEXIST, MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.errors import KernelError
from bpfbatch.exec import walker
from bpfbatch.map import cursor, probes

pytestmark = pytest.mark.skipif(not probes.syscall_program(),
                                reason=f"syscall programs: {probes.syscall_program().reason}")

N = 2000
EXAMPLE = walker.FILTER_INCLUDE_DIR / "example_filter.bpf.o"
SMALL_FLOWS = walker.Filter(EXAMPLE, "small_flows")
WHERE = "packets < 10"  # what the example filter compiles in
KEY, VALUE = struct.Struct("<IIHHB3x"), struct.Struct("<QQQQ")
PROGS_SRC = Path(__file__).resolve().parents[2] / "progs"


def flow_map(map_type: MapType) -> Map:
    """An empty map of flowtable.h's layout (5-tuple → packets, bytes, first/last seen)."""
    with BtfBuilder() as b:
        u8, u16 = b.integer("u8", 1), b.integer("u16", 2)
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        key = b.struct("flowtable_key", [("saddr", u32), ("daddr", u32), ("sport", u16),
                                         ("dport", u16), ("proto", u8),
                                         ("pad", b.array(u8, 3))])
        value = b.struct("flowtable_stats", [("packets", u64), ("bytes", u64),
                                             ("first_seen_ns", u64), ("last_seen_ns", u64)])
        return Map.create(map_type, KEY.size, VALUE.size, 2 * N, name="bb_filter_test",
                          btf_fd=b.load(), btf_key_type_id=key, btf_value_type_id=value)


def flow_table(map_type: MapType, *, seed: int = 5) -> Map:
    """flow_map with N flows of 0..39 packets: a quarter of them small."""
    m = flow_map(map_type)
    rng = np.random.default_rng(seed)
    for i, packets in enumerate(rng.integers(0, 40, N)):
        m.update(KEY.pack(0x0a000001, 0x0a000002, 1024 + i, 53, 17),
                 VALUE.pack(int(packets), 100 * int(packets), 1, 2))
    return m


def contents(m: Map) -> dict[bytes, bytes]:
    keys, values = cursor.read_all(m)
    return {k.tobytes(): v.tobytes() for k, v in zip(keys, values)}


def small(elements: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """The reference: the elements with fewer than 10 packets, decided in Python."""
    return {k: v for k, v in elements.items() if VALUE.unpack(v)[0] < 10}


class Records:
    """A sink collecting (key, value) bytes; a record handed over twice fails the test."""

    def __init__(self, m: Map):
        self.info, self.got = m.info, {}

    def __call__(self, batch: cursor.Batch) -> None:
        keys = np.frombuffer(batch.keys, np.uint8).reshape(batch.count, self.info.key_size)
        values = np.frombuffer(batch.values, np.uint8).reshape(batch.count, self.info.value_stride)
        for k, v in zip(keys, values):
            assert k.tobytes() not in self.got, "a record handed over twice"
            self.got[k.tobytes()] = v.tobytes()


@pytest.mark.parametrize("map_type", [MapType.HASH, MapType.LRU_HASH], ids=lambda t: t.label)
def test_example_filter_does_what_where_does(map_type):
    with flow_table(map_type) as by_filter, flow_table(map_type) as by_where:
        before = contents(by_filter)
        assert before == contents(by_where)
        want = small(before)
        assert 0 < len(want) < N
        counted = walker.exec_filter(by_filter, SMALL_FLOWS, "count")
        assert counted.mode == "kernel" and counted.visited == N
        assert counted.selected == len(want)
        assert walker.exec_map(by_where, WHERE, "count", mode="kernel").selected == len(want)
        dumped = Records(by_filter)
        # An out map of 64 records: the dump resumes the way map_exec's does.
        with walker.KernelWalker(by_filter, out_bytes=64 * 40, user_filter=SMALL_FLOWS) as w:
            result = w.run(None, "dump", sink=dumped)
        assert result.passes > 1 and dumped.got == want
        by_filter_gone, by_where_gone = Records(by_filter), Records(by_where)
        deleted = walker.exec_filter(by_filter, SMALL_FLOWS, "delete", sink=by_filter_gone)
        walker.exec_map(by_where, WHERE, "delete", mode="kernel", sink=by_where_gone)
        assert deleted.deleted == len(want)
        assert by_filter_gone.got == by_where_gone.got == want
        assert contents(by_filter) == contents(by_where) == {
            k: v for k, v in before.items() if k not in want}


def test_max_selected_stops_a_filter():
    with flow_table(MapType.HASH) as m:
        result = walker.exec_filter(m, SMALL_FLOWS, "delete", max_selected=7)
        assert result.deleted == 7 and len(contents(m)) == N - 7


def test_filter_stop_ends_the_walk(built):
    """BPFBATCH_STOP: the element is not selected and the walk ends there, not resumed."""
    with flow_table(MapType.HASH) as m:
        before = contents(m)
        gone = Records(m)
        stop = walker.Filter(built / "stop_at_39.bpf.o", "stop_at_39")
        result = walker.exec_filter(m, stop, "delete", sink=gone)
        assert result.passes == 1 and result.deleted == result.visited - 1 < N
        assert all(VALUE.unpack(v)[0] < 39 for v in gone.got.values())
        assert contents(m) == {k: v for k, v in before.items() if k not in gone.got}


def cli(m: Map, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bpfbatch", "exec", "--map-id", str(m.info.id),
                           *args], capture_output=True, text=True, check=False)


def test_cli_filter_end_to_end():
    with flow_table(MapType.HASH) as m:
        before = contents(m)
        want = small(before)
        flt = ["--filter-obj", str(EXAMPLE), "--filter-prog", "small_flows"]
        counted = cli(m, *flt)
        assert counted.returncode == 0, counted.stderr
        assert counted.stdout == f"{len(want)}\n" and "(kernel, 1 pass)" in counted.stderr
        dumped = cli(m, *flt, "--action", "dump", "-o", "jsonl")
        assert dumped.returncode == 0, dumped.stderr
        records = [json.loads(line) for line in dumped.stdout.splitlines()]
        assert sorted(r["value"]["packets"] for r in records) == sorted(
            VALUE.unpack(v)[0] for v in want.values())
        assert {r["key"]["sport"] for r in records} == {KEY.unpack(k)[2] for k in want}
        deleted = cli(m, *flt, "--action", "delete")
        assert deleted.returncode == 0, deleted.stderr
        assert f"{len(want)} of {N} elements deleted" in deleted.stderr
        assert contents(m) == {k: v for k, v in before.items() if k not in want}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Filters compiled here: a syscall program without the header's maps, a filter reading
    past the value (the verifier must refuse it), one that stops at the first 39-packet flow,
    and one built on a header that does not put map_exec.h's enums in the BTF (as before they
    were read from there)."""
    clang = shutil.which("clang-16") or shutil.which("clang")
    if clang is None or not (PROGS_SRC / "vmlinux.h").exists():
        pytest.skip("needs clang and progs/vmlinux.h (make -C progs)")
    sources = {
        "lone": 'SEC("syscall") int lone(void *ctx) { return 0; }\n',
        "too_far": '#include "bpfbatch_filter.h"\n'
                   "static long bpfbatch_filter(const void *key, void *value)\n"
                   "{ return ((__u64 *)value)[100] ? BPFBATCH_SELECT : BPFBATCH_KEEP; }\n"
                   "BPFBATCH_FILTER_PROGRAM(too_far)\n",
        "stop_at_39": '#include "bpfbatch_filter.h"\n'
                      "static long bpfbatch_filter(const void *key, void *value)\n"
                      "{ return *(__u64 *)value >= 39 ? BPFBATCH_STOP : BPFBATCH_SELECT; }\n"
                      "BPFBATCH_FILTER_PROGRAM(stop_at_39)\n",
        # Selects flows under 10 packets not yet refreshed; on its second call for an element (the judgement
        # right before the delete) it then writes an odd one's last_seen_ns through the
        # pointer: a writer's refresh landing after the last judgement, made deterministic.
        "write_after_judging": '#include "bpfbatch_filter.h"\n'
                               "__u32 second;\n"
                               "static long bpfbatch_filter(const void *key, void *value)\n"
                               "{ __u64 *v = value;\n"
                               "  if (v[0] >= 10 || v[3] == 12345) return BPFBATCH_KEEP;\n"
                               "  if (!second) { second = 1; return BPFBATCH_SELECT; }\n"
                               "  second = 0;\n"
                               "  if (v[0] & 1) v[3] = 12345;\n"
                               "  return BPFBATCH_SELECT; }\n"
                               "BPFBATCH_FILTER_PROGRAM(write_after_judging)\n",
        # Selects nothing; writes an odd small flow's last_seen_ns through the pointer the
        # walk holds: a datapath's refresh in place, on demand.
        "refresh_odd": '#include "bpfbatch_filter.h"\n'
                       "static long bpfbatch_filter(const void *key, void *value)\n"
                       "{ __u64 *v = value;\n"
                       "  if (v[0] < 10 && (v[0] & 1)) v[3] = 12345;\n"
                       "  return BPFBATCH_KEEP; }\n"
                       "BPFBATCH_FILTER_PROGRAM(refresh_odd)\n",
        "old_header": '#include "bpfbatch_filter.h"\n'
                      "static long bpfbatch_filter(const void *key, void *value)\n"
                      "{ return BPFBATCH_SELECT; }\n"
                      "BPFBATCH_FILTER_PROGRAM(old_header)\n",
    }
    out = tmp_path_factory.mktemp("filters")
    old = out / "old"
    old.mkdir()
    header = (walker.FILTER_INCLUDE_DIR / "bpfbatch_filter.h").read_text()
    assert "struct map_exec_enums *bpfbatch_enums;" in header
    (old / "bpfbatch_filter.h").write_text(header.replace("struct map_exec_enums *bpfbatch_enums;",
                                                          ""))
    for name, body in sources.items():
        src = out / f"{name}.bpf.c"
        src.write_text('#include "vmlinux.h"\n#include <bpf/bpf_helpers.h>\n' + body +
                       'char LICENSE[] SEC("license") = "GPL";\n')
        first = [f"-I{old}"] if name == "old_header" else []
        subprocess.run([clang, "-g", "-O2", "-target", "bpf", *first,
                        f"-I{walker.FILTER_INCLUDE_DIR}",
                        f"-I{PROGS_SRC}", "-c", str(src), "-o", str(out / f"{name}.bpf.o")],
                       check=True)
    (out / "text.o").write_text("not an object\n")
    return out


def misuses(built: Path) -> list[tuple[list[str], str]]:
    flowtable = walker.FILTER_INCLUDE_DIR / "flowtable.bpf.o"
    with open(sys.executable, "rb") as f:  # an ELF file for another machine than BPF
        machine = int.from_bytes(f.read(20)[18:], sys.byteorder)
    return [
        (["--filter-obj", str(built / "missing.o"), "--filter-prog", "x"],
         f"{built / 'missing.o'}: no such BPF object file"),
        (["--filter-obj", str(built / "text.o"), "--filter-prog", "x"],
         (f"{built / 'text.o'}: not an ELF file (a BPF object is what clang -target bpf -c "
          "writes)")),
        (["--filter-obj", sys.executable, "--filter-prog", "x"],
         (f"{sys.executable}: an ELF object for machine {machine}, not BPF (build it with "
          "clang -target bpf)")),
        (["--filter-obj", str(EXAMPLE), "--filter-prog", "nope"],
         "example_filter.bpf.o: nope: no such program in the object (it has: small_flows)"),
        (["--filter-obj", str(flowtable), "--filter-prog", "record_flow"],
         ("flowtable.bpf.o: record_flow: a 'tc' program, not a filter: a filter is the "
          "syscall program BPFBATCH_FILTER_PROGRAM(name) makes (bpfbatch_filter.h)")),
        (["--filter-obj", str(built / "lone.bpf.o"), "--filter-prog", "lone"],
         "lone.bpf.o: not built on bpfbatch_filter.h: the object lacks map 'target'"),
        (["--filter-obj", str(built / "old_header.bpf.o"), "--filter-prog", "old_header"],
         ("old_header.bpf.o: not built on bpfbatch_filter.h: the object lacks enum "
          "map_exec_limit in its BTF (rebuild it with clang -g against the installed header)")),
        (["--filter-obj", str(EXAMPLE), "--filter-prog", "small_flows", "--where", WHERE],
         "--filter-obj: cannot be combined with --where"),
        (["--filter-obj", str(EXAMPLE), "--filter-prog", "small_flows", "--mode", "user"],
         "--mode: a filter object runs in the kernel only"),
        (["--filter-prog", "small_flows"],
         "--filter-prog: needs --filter-obj, the object file holding it"),
        (["--filter-obj", str(EXAMPLE)], "--filter-obj: needs --filter-prog, the program to run"),
        ([], "--where: give a predicate, or --filter-obj and --filter-prog"),
    ]


def test_cli_misuse_is_one_line_and_changes_nothing(built):
    with flow_table(MapType.HASH) as m:
        before = contents(m)
        for args, line in misuses(built):
            bad = cli(m, *args, "--action", "delete")
            usage = line.startswith("-")  # about the options themselves: a usage error
            assert (bad.returncode, bad.stderr) == (2 if usage else 1,
                                                    f"bpfbatch: error: {line}\n"), args
        rejected = cli(m, "--filter-obj", str(built / "too_far.bpf.o"), "--filter-prog",
                       "too_far", "--action", "delete")
        assert rejected.returncode == 1
        assert rejected.stderr.startswith("bpfbatch: error: too_far.bpf.o: load object: the "
                                          "verifier rejected program too_far: ")
        assert rejected.stderr.count("\n") == 1
        assert contents(m) == before


def per_cpu_flow_table(map_type: MapType) -> tuple[Map, dict[bytes, bytes]]:
    """flow_table's flows in a map of ``map_type``, every CPU's value the same for a per-CPU
    map; and the flows as written (one CPU's value)."""
    with flow_table(MapType.HASH) as plain:
        flows = contents(plain)
    m = flow_map(map_type)
    copies = m.info.value_stride // VALUE.size
    for k, v in flows.items():
        m.update(k, v * copies)
    return m, flows


HASH_TYPES = [MapType.HASH, MapType.LRU_HASH, MapType.PERCPU_HASH, MapType.LRU_PERCPU_HASH]


def assert_written_put_back(m: Map, left: dict[bytes, bytes], flows: dict[bytes, bytes],
                            written: set[bytes], *, writes_per_element: int | None) -> None:
    """Every ``written`` flow is back with the write (on ``writes_per_element`` of its CPU
    values, or all of them when None) and the rest as they were; every other small flow is
    gone and every other flow untouched."""
    chosen = small(flows)
    copies = m.info.value_stride // VALUE.size
    assert written and len(written) < len(chosen)
    for k in written:
        values = [VALUE.unpack_from(left[k], i * VALUE.size) for i in range(copies)]
        assert sum(v[3] == 12345 for v in values) == (writes_per_element or copies)
        assert all(v[:3] == VALUE.unpack(flows[k])[:3] for v in values)
    assert {k: v for k, v in left.items() if k not in written} == {
        k: v * copies for k, v in flows.items() if k not in chosen}


@pytest.mark.parametrize("map_type", HASH_TYPES, ids=lambda t: t.label)
def test_a_filter_puts_back_a_write_after_its_last_judgement(built, map_type):
    """The in-kernel delete (``kernel-fast``, and every user filter): a write landing between
    the program's last judgement and its delete is found by comparing the deleted element
    with the copy taken before, and the element is put back from the same run as it holds it
    then (every CPU's value). Without the compare (``bpfbatch_written``), this fails."""
    writer = walker.Filter(built / "write_after_judging.bpf.o", "write_after_judging")
    m, flows = per_cpu_flow_table(map_type)
    with m, walker.KernelWalker(m, records=True, user_filter=writer) as w:
        records = Records(m)
        result = w.run(None, "delete", sink=records, batch_size=100)
        left = contents(m)
    chosen = small(flows)
    written = {k for k, v in chosen.items() if VALUE.unpack(v)[0] & 1}
    copies = m.info.value_stride // VALUE.size
    assert result.deleted == len(chosen) - len(written)
    assert result.kept == len(written) and result.superseded == 0
    assert records.got == {k: v * copies for k, v in chosen.items() if k not in written}
    assert_written_put_back(m, left, flows, written, writes_per_element=1)


def default_delete_after_a_write(built, map_type, writer, monkeypatch):
    """The default delete (``--mode kernel``) of the small flows, where, after the program
    selected them and before the runner takes them, a writer refreshes the odd ones, replacing
    each element (``bpf_map_update_elem``, BPF_EXIST) or writing it in place through the
    pointer a BPF program looked up. Returns (the map, closed; the result, records handed over,
    what is left, the flows, the refreshed keys)."""
    refresher = walker.Filter(built / "refresh_odd.bpf.o", "refresh_odd")
    m, flows = per_cpu_flow_table(map_type)
    written = {k for k, v in small(flows).items() if VALUE.unpack(v)[0] & 1}
    copies = m.info.value_stride // VALUE.size
    run = walker._Deleter.run

    def write_then_delete(self, keys, now, result):
        if writer == "replace":
            for k in written:
                packets, size, first, _ = VALUE.unpack(flows[k])
                m.update(k, VALUE.pack(packets, size, first, 12345) * copies, flags=BPF_EXIST)
        else:
            walker.exec_filter(m, refresher, "count")
        return run(self, keys, now, result)

    monkeypatch.setattr(walker._Deleter, "run", write_then_delete)
    with m:
        records = Records(m)
        result = walker.exec_map(m, "packets < 10 and last_seen_ns != 12345", "delete",
                                 mode="kernel", sink=records)
        return m, result, records, contents(m), flows, written


@pytest.mark.parametrize("writer", ["replace", "inplace"])
@pytest.mark.parametrize("map_type", HASH_TYPES, ids=lambda t: t.label)
def test_the_default_delete_puts_back_a_write_landing_before_it(built, map_type, writer,
                                                                monkeypatch):
    """``BPF_MAP_LOOKUP_AND_DELETE_ELEM`` returns what it deleted, the re-judgement sees the
    write and the element goes back as it is now (:func:`default_delete_after_a_write`)."""
    m, result, records, left, flows, written = default_delete_after_a_write(
        built, map_type, writer, monkeypatch)
    chosen = small(flows)
    copies = m.info.value_stride // VALUE.size
    assert result.mode == "kernel" and result.passes == 1
    assert result.deleted == len(chosen) - len(written)
    assert result.kept == len(written) and result.superseded == 0
    assert records.got == {k: v * copies for k, v in chosen.items() if k not in written}
    assert_written_put_back(m, left, flows, written,
                            writes_per_element=1 if writer == "inplace" else None)


class _Everything:
    """A predicate that holds for every element: the re-judgement of a mutant."""

    def evaluate(self, values, now, **_):
        return np.ones(len(values), bool)


@pytest.mark.parametrize("writer", ["replace", "inplace"])
def test_without_the_re_judgement_the_default_delete_loses_the_writes(built, writer,
                                                                     monkeypatch):
    """The mutant the test above must kill: ``_Deleter`` judging nothing again (every key it
    takes stays deleted) loses every refreshed flow, and the test above would fail on it."""
    init = walker._Deleter.__init__

    def without_re_judgement(self, m, predicate):
        init(self, m, predicate)
        self.predicate = _Everything()

    monkeypatch.setattr(walker._Deleter, "__init__", without_re_judgement)
    _, result, _, left, flows, written = default_delete_after_a_write(
        built, MapType.HASH, writer, monkeypatch)
    assert written and result.kept == 0
    assert not written & set(left)  # every refreshed flow is gone: live deletions
    assert result.deleted == len(small(flows))


def test_a_put_back_that_fails_is_an_error_naming_the_key(monkeypatch):
    """A refreshed flow the default delete took must go back; when the map has no room for
    it any more (writers filled it between the delete and the put-back), the delete stops
    with an error naming the key it lost, never a silent loss."""
    m, flows = per_cpu_flow_table(MapType.HASH)
    written = {k for k, v in small(flows).items() if VALUE.unpack(v)[0] & 1}
    run, put_back = walker._Deleter.run, walker._Deleter._put_back

    def write_then_delete(self, keys, now, result):
        for k in written:
            packets, size, first, _ = VALUE.unpack(flows[k])
            m.update(k, VALUE.pack(packets, size, first, 12345), flags=BPF_EXIST)
        return run(self, keys, now, result)

    def fill_then_put_back(self, key, value, result):
        for port in range(m.info.max_entries):  # new flows until the map is full
            try:
                m.update(KEY.pack(0x0a000009, 0x0a000002, port, 53, 17), VALUE.pack(1, 1, 1, 1),
                         flags=BPF_NOEXIST)
            except KernelError as e:
                if e.errno == errno.E2BIG:
                    break
                assert e.errno == errno.EEXIST
        return put_back(self, key, value, result)

    monkeypatch.setattr(walker._Deleter, "run", write_then_delete)
    monkeypatch.setattr(walker._Deleter, "_put_back", fill_then_put_back)
    with m, pytest.raises(KernelError) as failed:
        walker.exec_map(m, "packets < 10 and last_seen_ns != 12345", "delete", mode="kernel")
    message = str(failed.value)
    lost = message.split("(key ")[1].split(";")[0]
    assert bytes.fromhex(lost) in written and "it is lost" in message
    assert failed.value.errno == errno.E2BIG
