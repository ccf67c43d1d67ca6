"""The bcc drop-ins against the real bcc: same entries and types as bcc's own table API."""

import ctypes
import gc
import struct
import types
from collections import Counter

import pytest

from bpfbatch import bcc as batched
from bpfbatch.errors import InputError
from tools.bcc_setup import load_bcc

bcc = load_bcc()
pytestmark = pytest.mark.skipif(bcc is None, reason="bcc or kernel headers not available")

PROGRAM = b"""
struct flow { u32 saddr; u16 dport; u8 proto; };
struct stats { u64 packets; u64 bytes; };
BPF_HASH(flows, struct flow, struct stats, 4096);
BPF_HASH(counts, u32, u64, 4096);
BPF_PERCPU_HASH(percpu32, u32, u32, 256);
BPF_PERCPU_HASH(percpu64, u32, u64, 256);
BPF_ARRAY(slots, u64, 64);
BPF_HASH(narrow, u8, s16, 256);
BPF_HASH(letters, char, long, 256);
BPF_HASH(wide, s64, double, 256);
BPF_HASH(halves, u16, float, 256);
BPF_HASH(flags, u32, bool, 256);
"""


@pytest.fixture(scope="module")
def program():
    b = bcc.BPF(text=PROGRAM)
    try:
        yield b
    finally:
        b.cleanup()


def _plain(entries):
    """bcc ctypes objects → comparable Python values (bytes of each object)."""
    return sorted((bytes(k), bytes(v)) for k, v in entries)


def _fill_flows(table, n):
    for i in range(n):
        table[table.Key(saddr=i, dport=i % 65536, proto=6)] = table.Leaf(packets=i, bytes=i * 100)


def test_items_equal_bcc_items_with_struct_types(program):
    table = program[b"flows"]
    _fill_flows(table, 1000)
    ours = batched.items(table, batch_size=64)
    assert _plain(ours) == _plain(table.items())
    key, leaf = ours[0]
    assert type(key) is table.Key and type(leaf) is table.Leaf
    assert leaf.bytes == leaf.packets * 100
    table.clear()


def test_items_and_clear_returns_everything_once_and_empties(program):
    table = program[b"counts"]
    for i in range(3000):
        table[table.Key(i)] = table.Leaf(i * 3)
    before = _plain(table.items())
    drained = batched.items_and_clear(table, batch_size=100)
    assert _plain(drained) == before
    assert len({bytes(k) for k, _ in drained}) == 3000
    assert table.items() == []
    assert type(drained[0][0]) is table.Key


#: Every scalar bcc declares, filled with extremes, negatives and floats: table → (key of i,
#: leaf of i) for i in 0..255.
SCALARS = {
    "counts": (lambda i: i * 7919, lambda i: 2**64 - 1 - i),
    "narrow": (lambda i: i, lambda i: -i * 128),
    "letters": (lambda i: bytes([i]), lambda i: -(2**63) + i),
    "wide": (lambda i: -(2**63) + i, lambda i: i / 3 - 40.5),
    "halves": (lambda i: 65535 - i, lambda i: i * 0.25),
    "flags": (lambda i: i, lambda i: i % 2 == 0),
}


def _fill_scalars(table, name):
    key_of, leaf_of = SCALARS[name]
    for i in range(256):
        table[table.Key(key_of(i))] = table.Leaf(leaf_of(i))


@pytest.mark.parametrize("name", SCALARS)
def test_scalar_tables_give_bccs_types_and_values(program, name):
    """Every scalar bcc declares: the same ctypes type per key and leaf as bcc's ``items()``,
    the same bytes, the same numbers (extremes, negatives, floats)."""
    table = program[name.encode()]
    _fill_scalars(table, name)
    theirs = table.items()
    for ours in (batched.items(table, batch_size=50), batched.items_and_clear(table)):
        assert _plain(ours) == _plain(theirs)
        assert {(type(k), type(v)) for k, v in ours} == {(table.Key, table.Leaf)}
        assert sorted((k.value, v.value) for k, v in ours) == sorted(
            (k.value, v.value) for k, v in theirs)
    assert table.items() == []



def test_float_leaves_keep_their_bytes(program):
    """A float leaf holding a signalling NaN comes back with its bytes, as bcc's ``items()``
    copies them (through a Python float the quiet bit would be set)."""
    table = program[b"halves"]
    snan = table.Leaf.from_buffer_copy(bytes.fromhex("0100807f"))
    table[table.Key(1)] = snan
    for ours in (batched.items(table), batched.items_and_clear(table)):
        assert [bytes(v) for _, v in ours] == [bytes(snan)]

def test_collector_state_is_left_as_found(program):
    """The read-out switches the garbage collector off and back on, and leaves objects the
    caller froze frozen."""
    table = program[b"counts"]
    for i in range(100):
        table[table.Key(i)] = table.Leaf(i)
    gc.freeze()
    frozen = gc.get_freeze_count()
    try:
        assert len(batched.items(table)) == 100
        assert gc.isenabled() and gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        assert len(batched.items(table)) == 100
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert gc.get_freeze_count() == 0
    table.clear()


def test_clear_empties_hash_like_bcc(program):
    table = program[b"counts"]
    for i in range(2000):
        table[table.Key(i)] = table.Leaf(i)
    assert batched.clear(table) == 2000
    assert len(table.items()) == 0


@pytest.mark.parametrize("name", ["percpu32", "percpu64"])
def test_percpu_values_as_bcc_returns_them(program, name):
    table = program[name.encode()]
    ncpus = table.total_cpu
    for i in range(50):
        table[table.Key(i)] = table.Leaf(*[i * 10 + cpu for cpu in range(ncpus)])
    theirs = table.items()
    ours = batched.items(table)
    assert _plain(ours) == _plain(theirs)
    assert type(ours[0][1]) is type(theirs[0][1])
    for key, leaf in ours:
        assert list(leaf) == [key.value * 10 + cpu for cpu in range(ncpus)]
    table.clear()


def test_percpu_reducer_applied(program):
    table = bcc.table.PerCpuHash(program, program[b"percpu64"].map_id, program[b"percpu64"].map_fd,
                                 ctypes.c_uint, ctypes.c_ulonglong, "percpu64",
                                 reducer=lambda a, b: a + b)
    ncpus = table.total_cpu
    table[table.Key(7)] = table.Leaf(*([5] * ncpus))
    ours = [(k.value, v) for k, v in batched.items(table)]
    assert ours == [(k.value, v) for k, v in table.items()] == [(7, 5 * ncpus)]
    batched.clear(table)


def test_array_clear_zeroes_like_bcc(program):
    table = program[b"slots"]
    for i in range(64):
        table[table.Key(i)] = table.Leaf(i + 1)
    assert _plain(batched.items(table)) == _plain(table.items())
    read = batched.items_and_clear(table)
    assert sorted(v.value for _, v in read) == list(range(1, 65))
    assert all(v.value == 0 for _, v in table.items())
    table[table.Key(3)] = table.Leaf(9)
    assert batched.clear(table) == 64
    assert table[table.Key(3)].value == 0


def test_table_types_that_do_not_match_the_map_are_an_input_error(program):
    table = program[b"counts"]
    wrong = types.SimpleNamespace(map_fd=table.map_fd, Key=ctypes.c_uint64, Leaf=table.Leaf)
    with pytest.raises(InputError, match=r"table types are 8/8 bytes, the map's key/value are 4/8"):
        batched.items(wrong)


# -- the batch-call drop-ins against bcc's own batch calls --------------------------------------

def _fill(table, name):
    """``name``'s table filled as above; the float table also holds a signalling NaN, the
    per-CPU ones a different value on every CPU."""
    if name in SCALARS:
        _fill_scalars(table, name)
        if name == "halves":
            table[table.Key(65535)] = table.Leaf.from_buffer_copy(bytes.fromhex("0100807f"))
    elif name == "flows":
        _fill_flows(table, 300)
    elif name == "slots":
        for i in range(64):
            table[table.Key(i)] = table.Leaf(i * 11)
    else:
        for i in range(50):
            table[table.Key(i)] = table.Leaf(*[i * 10 + cpu for cpu in range(table.total_cpu)])


_CDATA = (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array)


def _handed_out(pairs) -> Counter:
    """What a batch call handed out, comparable across calls: each item's exact type with
    its bytes (a ctypes object) or value (a float by its bits, so NaNs compare)."""
    def item(x):
        if isinstance(x, _CDATA):
            return type(x), bytes(x)
        return type(x), struct.pack("d", x) if isinstance(x, float) else x
    return Counter((item(k), item(v)) for k, v in pairs)


@pytest.mark.parametrize("name", [*SCALARS, "flows", "percpu32", "percpu64", "slots"])
def test_batch_calls_hand_out_what_bccs_batch_calls_do(program, name):
    """bcc's ``items_lookup_batch()`` and ``items_lookup_and_delete_batch()`` against ours on
    the same entries: the same items of the same types (``int`` for a ``u32`` key, the raw
    per-CPU array), the same values bit for bit, and the table empty after the drain."""
    table = program[name.encode()]
    _fill(table, name)
    theirs = _handed_out(table.items_lookup_batch())
    ours = batched.items_lookup_batch(table, batch_size=7)
    assert type(ours) is list and _handed_out(ours) == theirs
    if name == "counts":
        assert {(type(k), type(v)) for k, v in ours} == {(int, int)}
    if name == "slots":  # bcc's drain refuses arrays; ours reads, then zeroes
        assert _handed_out(batched.items_lookup_and_delete_batch(table)) == theirs
        assert {v.value for _, v in table.items()} == {0}
        return
    assert _handed_out(table.items_lookup_and_delete_batch()) == theirs
    assert table.items() == []
    _fill(table, name)
    assert _handed_out(batched.items_lookup_and_delete_batch(table, batch_size=7)) == theirs
    assert table.items() == []


@pytest.mark.parametrize(("drain", "builder"), [("items_and_clear", "_objects"),
                                                ("items_lookup_and_delete_batch", "_array_items")])
def test_a_drain_that_fails_while_building_puts_everything_back(program, monkeypatch, drain,
                                                                builder):
    """An error while the drained bytes become objects (here a MemoryError on the third
    batch) leaves the table as it was, as bcc's per-key ``items()`` sees it."""
    table = program[b"counts"]
    for i in range(3000):
        table[table.Key(i)] = table.Leaf(i * 3)
    before = _plain(table.items())
    build, calls = getattr(batched, builder), []

    def failing(*args):
        calls.append(args)
        if len(calls) == 5:  # a key and a leaf per batch
            raise MemoryError
        return build(*args)
    monkeypatch.setattr(batched, builder, failing)
    with pytest.raises(MemoryError):
        getattr(batched, drain)(table, batch_size=100)
    assert len(calls) == 5
    assert _plain(table.items()) == before
    table.clear()
