"""The bcc drop-ins against the real bcc: same entries and types as bcc's own table API."""

import ctypes
import gc
import types

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


@pytest.mark.parametrize(("name", "key_of", "leaf_of"), [
    ("counts", lambda i: i * 7919, lambda i: 2**64 - 1 - i),
    ("narrow", lambda i: i, lambda i: -i * 128),
    ("letters", lambda i: bytes([i]), lambda i: -(2**63) + i),
    ("wide", lambda i: -(2**63) + i, lambda i: i / 3 - 40.5),
    ("halves", lambda i: 65535 - i, lambda i: i * 0.25),
    ("flags", lambda i: i, lambda i: i % 2 == 0),
])
def test_scalar_tables_give_bccs_types_and_values(program, name, key_of, leaf_of):
    """Every scalar bcc declares: the same ctypes type per key and leaf as bcc's ``items()``,
    the same bytes, the same numbers (extremes, negatives, floats)."""
    table = program[name.encode()]
    for i in range(256):
        table[table.Key(key_of(i))] = table.Leaf(leaf_of(i))
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
