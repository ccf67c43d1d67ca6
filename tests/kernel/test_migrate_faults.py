"""``migrate`` attacked as a user upgrading a production map would: signals during the copy
and at the swap (the stop line says exactly what TO holds and what the old path names),
``--swap-pin`` paths that are not FROM's pin, TO too small or not empty, a catch-up under
deletes and re-creations made by another process (bpftool), files that give a key twice.
Every refusal is checked to write nothing, ``--plan`` included."""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import test_migrate

import bpfbatch
from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.errors import InputError
from bpfbatch.map import writes
from bpfbatch.migrate.source import map_source
from fault_helpers import SIGNALS, bpfbatch_argv, signalled

U8, U32, U64 = test_migrate.U8, test_migrate.U32, test_migrate.U64
made = test_migrate.made  # the fixture: maps of struct keys and values, closed at the end

#: The stop line of an interrupted migration.
STOPPED = re.compile(r"^bpfbatch: interrupted \(SIG(INT|TERM|HUP)\) after (\d+) entries copied"
                     r"(?:, .*)?; (?:pinned at (\S+)|not swapped: (\S+) still names FROM)"
                     r".*\n$")


def _pair(made, n: int, *, max_entries: int | None = None):
    """FROM holding ``n`` entries ``id → n = id``, and an empty TO of a wider value."""
    src = made(MapType.HASH, [("id", U32)], [("n", U32)], max_entries or max(n, 1))
    dst = made(MapType.HASH, [("id", U32)], [("n", U64)], max_entries or max(n, 1))
    if n:
        writes.update(src, np.arange(n, dtype=np.uint32), np.arange(n, dtype=np.uint32), n)
    return src, dst


def _names(path: str) -> int:
    with Map.open(pinned=path) as m:
        return m.info.id


def _no_temporary_pins(path: str) -> bool:
    return not glob.glob(os.path.join(os.path.dirname(path), "*bpfbatch_swap*"))


@pytest.mark.parametrize("sig, delay", [(signal.SIGINT, 0.0), (signal.SIGTERM, 0.1),
                                        (signal.SIGHUP, 0.3)])
def test_a_signal_during_the_copy_says_what_to_holds(made, pins, sig, delay):
    """Whenever it lands, the stop line's count is TO's, and the old path still names FROM
    (or the line says it was swapped, and then it names TO)."""
    n = 100_000
    src, dst = _pair(made, n)
    old, new = pins(src, "migsig_old"), pins(dst, "migsig_new")
    proc = subprocess.Popen(bpfbatch_argv("migrate", "pinned", old, "pinned", new, "--catch-up",
                                          "--swap-pin", old), stderr=subprocess.PIPE)
    rc, stderr = signalled(proc, dst, sig, delay)
    if rc == 0:  # finished before the signal: nothing to judge but the result
        assert _names(old) == dst.info.id and dst.count() == n
        return
    said = STOPPED.match(stderr)
    assert rc == SIGNALS[sig] and said, stderr
    assert dst.count() == int(said.group(2))
    assert _names(old) == (dst.info.id if said.group(3) else src.info.id)
    assert _no_temporary_pins(old)


#: Runs the CLI with a signal raised at one moment of the swap (the moments are too short
#: for a signal sent from outside to hit them on purpose).
AT_THE_SWAP = textwrap.dedent("""
    import errno, os, signal, sys
    from bpfbatch.api import Map
    moment, rename, pin = sys.argv[1], os.rename, Map.pin
    def renaming(a, b):
        if moment == "a rename that fails":
            raise OSError(errno.EXDEV, "cross-device link")
        if moment == "before the rename":
            signal.raise_signal(signal.SIGTERM)
        rename(a, b)
        if moment == "after the rename":
            signal.raise_signal(signal.SIGTERM)
    def pinning(self, path):
        pin(self, path)
        if moment == "after the temporary pin":
            signal.raise_signal(signal.SIGTERM)
    os.rename, Map.pin = renaming, pinning
    from bpfbatch.cli import main
    main(sys.argv[2:])
""")


@pytest.mark.parametrize("moment, to_pinned", [("after the temporary pin", False),
                                               ("before the rename", True),
                                               ("after the rename", True)])
def test_a_signal_at_the_swap_finds_it_done_and_says_so(made, pins, moment, to_pinned):
    src, dst = _pair(made, 10)
    old = pins(src, "migswap_old")
    to = ["pinned", pins(dst, "migswap_new")] if to_pinned else ["id", dst.info.id]
    proc = subprocess.run([sys.executable, "-c", AT_THE_SWAP, moment, "migrate", "pinned", old,
                           *map(str, to), "--swap-pin", old], capture_output=True, text=True)
    said = STOPPED.match(proc.stderr)
    assert proc.returncode == 143 and said and said.group(3) == old, proc.stderr
    assert _names(old) == dst.info.id and dst.count() == 10
    assert _no_temporary_pins(old)


def test_a_swap_that_fails_is_undone_and_says_what_was_copied(made, pins):
    """A rename the kernel refuses (EXDEV here) is translated, names the path, leaves no
    temporary pin, and the path still names FROM."""
    src, dst = _pair(made, 10)
    old = pins(src, "migfail_old")
    proc = subprocess.run([sys.executable, "-c", AT_THE_SWAP, "a rename that fails", "migrate",
                           "pinned", old, "id", str(dst.info.id), "--swap-pin", old],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"bpfbatch: error: {old}: swap pins: rename ")
    assert proc.stderr.endswith("(10 entries copied before it) (EXDEV)\n"), proc.stderr
    assert _names(old) == src.info.id and _no_temporary_pins(old)


def test_swap_pin_moves_an_unpinned_to_and_one_pinned_on_another_bpffs(made, pins, tmp_path):
    src, dst = _pair(made, 10)
    old = pins(src, "migfs_old")
    proc = subprocess.run(bpfbatch_argv("migrate", "pinned", old, "id", dst.info.id,
                                        "--swap-pin", old), capture_output=True, text=True)
    assert proc.returncode == 0 and f"pinned at {old}" in proc.stderr, proc.stderr
    assert _names(old) == dst.info.id and _no_temporary_pins(old)
    src.pin(old + "_again")  # FROM again at a path of its own, TO on a bpffs of its own
    other = made(MapType.HASH, [("id", U32)], [("n", U64)], 10)
    mnt = tmp_path / "bpffs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "bpf", "bpf", str(mnt)], check=True)
    try:
        other.pin(str(mnt / "next"))
        proc = subprocess.run(bpfbatch_argv("migrate", "pinned", old + "_again", "pinned",
                                            mnt / "next", "--swap-pin", old + "_again"),
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert _names(old + "_again") == other.info.id and not (mnt / "next").exists()
        assert _no_temporary_pins(old)
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
        os.unlink(old + "_again")


@pytest.mark.parametrize("what, plan", [("another map's pin", False), ("another map's pin", True),
                                        ("a file not on bpffs", False), ("no such path", True)])
def test_a_swap_pin_that_is_not_from_s_pin_is_refused_before_anything_is_written(
        made, pins, tmp_path, what, plan):
    src, dst = _pair(made, 10)
    old = pins(src, "migref_old")
    other = made(MapType.HASH, [("id", U32)], [("n", U32)], 10, name="bb_mig_other")
    path = {"another map's pin": pins(other, "migref_other"),
            "a file not on bpffs": str(tmp_path / "flows"),
            "no such path": old + "_nothing"}[what]
    (tmp_path / "flows").write_text("")
    proc = subprocess.run(bpfbatch_argv("migrate", "pinned", old, "id", dst.info.id,
                                        "--swap-pin", path, *(["--plan"] if plan else [])),
                          capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"bpfbatch: error: {path}: --swap-pin: "), proc.stderr
    assert dst.count() == 0 and _names(old) == src.info.id
    if what == "another map's pin":
        assert _names(path) == other.info.id


def _array(maps, entries: int, kind: MapType = MapType.ARRAY) -> Map:
    """An array (or ``kind``) of ``u64`` values (BTF: u32 key, u64 value)."""
    with BtfBuilder() as b:
        u32, u64 = b.integer("u32", 4), b.integer("u64", 8)
        return maps(kind, 4, 8, entries, name="bb_mig_arr", btf_fd=b.load(),
                    btf_key_type_id=u32, btf_value_type_id=u64)


@pytest.mark.parametrize("kind, plan", [(MapType.HASH, True), (MapType.LRU_HASH, False),
                                        (MapType.ARRAY, False)])
def test_a_to_too_small_is_refused_before_anything_is_written(made, maps, kind, plan):
    """A hash map would take its max_entries and fail (E2BIG) half-way; an LRU map would
    evict without a word and the summary count entries it no longer holds."""
    if kind is MapType.ARRAY:
        src, dst = _array(maps, 100), _array(maps, 50)
        writes.update(src, np.arange(100, dtype=np.uint32), np.arange(1, 101, dtype=np.uint64),
                      100)
        why = "key 50: index 50 is past TO's last (max_entries 50)"
    else:
        src, _ = _pair(made, 1000)
        dst = made(kind, [("id", U32)], [("n", U64)], 100)
        why = "holds at most 100 entries (max_entries), FROM has 1000"
    proc = subprocess.run(bpfbatch_argv("migrate", "id", src.info.id, "id", dst.info.id,
                                        *(["--plan"] if plan else [])),
                          capture_output=True, text=True)
    assert proc.returncode == 1 and why in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1
    _, values = dst.to_numpy()
    assert not values.any() if kind is MapType.ARRAY else dst.count() == 0


@pytest.mark.parametrize("kind, plan", [(MapType.HASH, False), (MapType.ARRAY, True)])
def test_a_to_that_is_not_empty_is_refused_and_left_as_it_was(made, maps, kind, plan):
    """TO is to hold FROM's records and nothing else: an entry already there would stay,
    and no catch-up pass could tell it from FROM's."""
    if kind is MapType.ARRAY:
        src, dst = _array(maps, 16), _array(maps, 16)
        dst.update(np.uint32(3).tobytes(), np.uint64(9).tobytes())
    else:
        src, dst = _pair(made, 10, max_entries=100)
        dst.update_items([({"id": 99}, {"n": 9})])
    before = sorted(dst.items())
    proc = subprocess.run(bpfbatch_argv("migrate", "id", src.info.id, "id", dst.info.id,
                                        *(["--plan"] if plan else [])),
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "TO is not empty (1 entr" in proc.stderr, proc.stderr
    assert sorted(dst.items()) == before


def _bpftool(*args) -> None:
    subprocess.run(["bpftool", "map", *map(str, args)], check=True, capture_output=True)


def _key(k: int) -> list[str]:
    return ["key", "hex", *[f"{b:02x}" for b in k.to_bytes(4, "little")]]


def _stepped(src: Map, steps: list) -> object:
    """FROM ``src``, whose ``i``-th read first runs ``steps[i]`` (bpftool commands: another
    process writing the map between two passes)."""
    source = map_source(src)
    read, reads = source.read, iter(steps)

    def stepping(batch_size):
        for command in next(reads, ()):
            _bpftool(*command)
        return read(batch_size)

    source.read = stepping
    return source


def _update(map_id: int, k: int, n: int) -> tuple:
    return ("update", "id", map_id, *_key(k), "value", "hex",
            *[f"{b:02x}" for b in n.to_bytes(4, "little")])


def _delete(map_id: int, k: int) -> tuple:
    return ("delete", "id", map_id, *_key(k))


def test_catch_up_follows_deletes_and_re_creations_made_by_another_process(made):
    src, dst = _pair(made, 10, max_entries=100)
    i = src.info.id
    steps = [(), [_delete(i, 1), _delete(i, 2), _update(i, 2, 200), _delete(i, 3),
                  _update(i, 3, 3), _update(i, 100 - 1, 99)],
             [_update(i, 1, 77), _delete(i, 100 - 1)], ()]
    result = bpfbatch.migrate(_stepped(src, steps), dst, catch_up=5)
    counts = result.counts
    assert (counts.passes, counts.updated, counts.deleted, counts.moving) == (3, 3, 2, 0)
    dumped = json.loads(subprocess.run(["bpftool", "-j", "map", "dump", "id", str(dst.info.id)],
                                       capture_output=True, text=True, check=True).stdout)
    held = {int.from_bytes(bytes(int(b, 16) for b in e["key"]), "little"):
            int.from_bytes(bytes(int(b, 16) for b in e["value"]), "little") for e in dumped}
    assert held == {**{k: k for k in range(10)}, 1: 77, 2: 200}


def test_a_catch_up_pass_that_would_overfill_to_writes_nothing(made):
    src = made(MapType.HASH, [("id", U32)], [("n", U32)], 100)
    dst = made(MapType.HASH, [("id", U32)], [("n", U64)], 11)
    src.update_items([({"id": k}, {"n": k}) for k in range(10)])
    i = src.info.id
    steps = [(), [_update(i, 50, 1), _update(i, 51, 1), _update(i, 5, 555)]]
    with pytest.raises(InputError, match="holds at most 11 entries .max_entries., FROM has 12"):
        bpfbatch.migrate(_stepped(src, steps), dst, catch_up=5)
    assert sorted(v["n"] for _, v in dst.items()) == list(range(10))


def test_a_file_is_refused_whole_when_a_key_comes_twice_or_a_line_is_bad(made, tmp_path):
    _, dst = _pair(made, 0, max_entries=10)
    twice = tmp_path / "twice.jsonl"
    twice.write_text('{"key":{"id":1},"value":{"n":2}}\n{"key":{"id":3},"value":{"n":3}}\n'
                     '{"key":{"id":1},"value":{"n":4}}\n')
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"key":{"id":1},"value":{"n":2}}\n{"key":{"id":2},"value":{"n":3}\n')
    for path, options, status, why in (
            (twice, [], 1, f"{twice}:1: becomes the same key as {twice}:3 in TO (the file "
                           "gives it twice)"),
            (bad, ["--plan"], 1, f"{bad}:2: invalid JSON"),
            (twice, ["--catch-up"], 2, "--catch-up: a file does not change")):
        proc = subprocess.run(bpfbatch_argv("migrate", path, "id", dst.info.id, *options),
                              capture_output=True, text=True)
        assert proc.returncode == status and why in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1 and dst.count() == 0


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_file_dumped_with_decoders_migrates_as_the_map_does(tmp_path, fmt):
    """``dump --decode`` then ``migrate --decode`` (the same options): the value model's
    round trip, into the new layout, equals migrating the map itself."""
    from bpfbatch.labs.demo import fill_flow_table
    from bpfbatch.loader import PROGS_DIR, BpfObject

    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    decode = ["--decode", "key.proto=hex", "--decode", "first_seen_ns=hex", "--decode",
              "key.daddr=hex"]
    with BpfObject.package("flowtable") as old, BpfObject.package("flowtable_v2") as new:
        old.load()
        new.load()
        src, dst = old.map("flows"), new.map("flows")
        fill_flow_table(src, 100)
        dump = tmp_path / f"flows.{fmt}"
        with open(dump, "wb") as out:
            subprocess.run(bpfbatch_argv("dump", "id", src.info.id, "-o", fmt, *decode),
                           stdout=out, check=True)
        proc = subprocess.run(bpfbatch_argv(
            "--btf", PROGS_DIR / "flowtable.bpf.o", "--key-type", "struct flowtable_key",
            "--value-type", "struct flowtable_stats", "migrate", dump, "id", dst.info.id,
            "--rename", "first_seen_ns=first_ns", *decode), capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        from_file = sorted(dst.items(), key=lambda kv: kv[0]["saddr"])
        writes.delete(dst, *test_migrate._all_keys(dst))
        bpfbatch.migrate(src, dst, rename=["first_seen_ns=first_ns"])
        assert from_file == sorted(dst.items(), key=lambda kv: kv[0]["saddr"])
        assert len(from_file) == 100


def test_a_change_to_does_not_see_does_not_keep_the_passes_going(made):
    """A writer that touches only a field TO drops (or padding) changes nothing of TO: the
    first pass finds nothing, and says nothing is still changing."""
    src = made(MapType.HASH, [("id", U32)], [("n", U32), ("scratch", U32)], 10)
    dst = made(MapType.HASH, [("id", U32)], [("n", U64)], 10)
    src.update_items([({"id": k}, {"n": k, "scratch": 0}) for k in range(10)])
    i = src.info.id
    touch = ("update", "id", i, *_key(4), "value", "hex", "04", "00", "00", "00", "ff", "00",
             "00", "00")
    result = bpfbatch.migrate(_stepped(src, [(), [touch], [touch]]), dst, catch_up=3)
    counts = result.counts
    assert (counts.passes, counts.updated, counts.moving) == (1, 0, 0)
    assert sorted(v["n"] for _, v in dst.items()) == list(range(10))


def test_keys_that_differ_only_in_padding(made):
    """The kernel keeps a key's bytes, padding included (a program that does not zero its
    key's holes makes such keys): copied as they are into an unchanged key layout, with no
    phantom change in the catch-up; refused, by their bytes, when TO's key drops the hole."""
    src = made(MapType.HASH, [("a", U8), ("b", U32)], [("n", U32)], 10)
    same = made(MapType.HASH, [("a", U8), ("b", U32)], [("n", U64)], 10)
    wider = made(MapType.HASH, [("a", U8), ("b", U64)], [("n", U32)], 10)
    for hole, n in (("00", "01"), ("ee", "02")):
        _bpftool("update", "id", src.info.id, "key", "hex", "01", hole, "00", "00", "05", "00",
                 "00", "00", "value", "hex", n, "00", "00", "00")
    counts = bpfbatch.migrate(src, same, catch_up=3).counts
    assert (counts.copied, counts.passes, counts.moving) == (2, 1, 0)
    held = same.to_numpy()[0].tobytes().hex()
    assert sorted((held[:16], held[16:])) == ["0100000005000000", "01ee000005000000"]
    with pytest.raises(InputError, match="differ only in padding, (0100000005000000 and "
                                         "01ee|01ee000005000000 and 01000)"):  # read order
        bpfbatch.migrate(src, wider)
    assert wider.count() == 0


def test_a_key_gone_from_a_hash_zeroes_an_array_to_s_element(maps):
    """An array's elements cannot be deleted (the kernel refuses): a key gone from FROM
    leaves TO's element as an empty array's is, zero."""
    src, dst = _array(maps, 10, MapType.HASH), _array(maps, 10)
    writes.update(src, np.arange(3, dtype=np.uint32), np.arange(1, 4, dtype=np.uint64), 3)
    steps = [(), [_delete(src.info.id, 1)]]
    counts = bpfbatch.migrate(_stepped(src, steps), dst, catch_up=3).counts
    assert (counts.copied, counts.deleted, counts.moving) == (3, 1, 0)
    assert dst.to_numpy()[1].tolist()[:4] == [1, 0, 3, 0]


@pytest.mark.parametrize("option, word", [("--set", "n"), ("--rename", "n=")])
def test_an_option_without_its_value_is_named(made, option, word):
    src, dst = _pair(made, 3)
    proc = subprocess.run(bpfbatch_argv("migrate", "id", src.info.id, "id", dst.info.id,
                                        option, word), capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"bpfbatch: error: {option}: expected "), proc.stderr
    assert dst.count() == 0


def test_a_set_key_field_that_makes_keys_one_says_so(made):
    src, dst = _pair(made, 3)
    with pytest.raises(InputError, match="told them apart are removed, cut or --set"):
        bpfbatch.migrate(src, dst, set=["key.id=5"])
    assert dst.count() == 0


def test_a_per_cpu_dump_sums_into_a_plain_to_as_the_map_does(made, tmp_path):
    src = made(MapType.PERCPU_HASH, [("id", U32)], [("n", U32)], 10)
    dst = made(MapType.HASH, [("id", U32)], [("n", U64)], 10)
    ncpus = src.info.value_stride // src.info.cpu_stride
    src.update_items([({"id": k}, [{"n": k * 10 + c} for c in range(ncpus)]) for k in range(5)])
    dump = tmp_path / "percpu.jsonl"
    with open(dump, "wb") as out:
        subprocess.run(bpfbatch_argv("dump", "id", src.info.id, "-o", "jsonl"), stdout=out,
                       check=True)
    proc = subprocess.run(bpfbatch_argv("migrate", dump, "id", dst.info.id, "--sum"),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert {k["id"]: v["n"] for k, v in dst.items()} == {
        k: sum(k * 10 + c for c in range(ncpus)) for k in range(5)}
