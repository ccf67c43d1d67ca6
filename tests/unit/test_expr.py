"""The --where language: every predicate form against a reference evaluation in plain Python
over values decoded by the codecs, errors pointing at the token, the kernel parameter table."""

import re

import numpy as np
import pytest

from bpfbatch.btf import Btf, BtfBuilder
from bpfbatch.errors import InputError
from bpfbatch.exec import predicate
from bpfbatch.exec.contract import package_contract
from bpfbatch.records.codec import BtfCodec, PerCpuCodec

S = 10**9
NOW = 5_000 * S


@pytest.fixture(scope="module")
def codec() -> BtfCodec:
    """struct stats { u64 packets; s32 delta; u16 port; u8 flags; enum state (1 byte);
    struct { u64 last_ns; s64 skew; } t; u32 bits:3; char name[8]; }"""
    with BtfBuilder() as b:
        u8, u16, u32, u64 = (b.integer(n, s) for n, s in
                             (("u8", 1), ("u16", 2), ("u32", 4), ("u64", 8)))
        s32, s64 = b.integer("s32", 4, signed=True), b.integer("s64", 8, signed=True)
        char = b.integer("char", 1, signed=True, char=True)
        state = b.enum("state", {"IDLE": 0, "OPEN": 1, "CLOSED": 2}, size=1)
        times = b.struct("times", [("last_ns", u64), ("skew", s64)])
        stats = b.struct("stats", [("packets", u64), ("delta", s32), ("port", u16),
                                   ("flags", u8), ("state", state), ("t", times),
                                   ("bits", u32, 3), ("name", b.array(char, 8))])
        return BtfCodec(Btf.from_bytes(b.raw()), stats)


@pytest.fixture(scope="module")
def values(codec) -> np.ndarray:
    """400 random records, as the raw ``(n, size)`` bytes a batch lookup hands out."""
    rng = np.random.default_rng(7)
    n = 400
    members = dict(codec.node.members)  # codec.dtype is None: the struct has a bitfield
    times = dict(members["t"].members)
    layout = {"packets": "<u8", "delta": "<i4", "port": "<u2", "flags": "u1", "state": "u1"}
    v = np.zeros(n, np.dtype({
        "names": [*layout, "t"], "formats": [*layout.values(), np.dtype(
            {"names": ["last_ns", "skew"], "formats": ["<u8", "<i8"],
             "offsets": [0, times["skew"].offset - times["last_ns"].offset]})],
        "offsets": [members[f].offset for f in [*layout, "t"]], "itemsize": codec.size}))
    v["packets"] = rng.integers(0, 50, n)
    v["delta"] = rng.integers(-20, 20, n)
    v["port"] = rng.choice([53, 80, 443, 65535], n)
    v["flags"] = rng.integers(0, 256, n)
    v["state"] = rng.integers(0, 3, n)
    v["t"]["last_ns"] = NOW - rng.integers(0, 90, n) * S
    v["t"]["skew"] = rng.integers(-5, 5, n)
    v["packets"][:3] = [0, 2**64 - 1, 7]   # the u64 extremes
    return np.frombuffer(v.tobytes(), np.uint8).reshape(n, codec.size)


def reference(codec, values, test) -> np.ndarray:
    """The predicate written as Python, applied to each record decoded by the codec."""
    return np.array([test(codec.decode(row.tobytes()), NOW) for row in values], bool)


CASES = [
    ("packets == 7", lambda v, now: v["packets"] == 7),
    ("packets != 7", lambda v, now: v["packets"] != 7),
    ("packets < 10", lambda v, now: v["packets"] < 10),
    ("packets <= 10", lambda v, now: v["packets"] <= 10),
    ("packets > 40", lambda v, now: v["packets"] > 40),
    ("packets >= 0xffffffffffffffff", lambda v, now: v["packets"] >= 2**64 - 1),
    ("delta < -5", lambda v, now: v["delta"] < -5),
    ("delta >= -0x3", lambda v, now: v["delta"] >= -3),
    ("port == 65535", lambda v, now: v["port"] == 65535),
    ("flags > 200", lambda v, now: v["flags"] > 200),
    ("state == OPEN", lambda v, now: v["state"] == "OPEN"),
    ("state != 2", lambda v, now: v["state"] != "CLOSED"),
    ("t.skew < 0", lambda v, now: v["t"]["skew"] < 0),
    ("t.last_ns < now - 30s", lambda v, now: v["t"]["last_ns"] < now - 30 * S),
    ("t.last_ns >= now - 1500ms", lambda v, now: v["t"]["last_ns"] >= now - 1500 * 10**6),
    ("t.last_ns < now - 1m", lambda v, now: v["t"]["last_ns"] < now - 60 * S),
    ("t.last_ns <= now", lambda v, now: v["t"]["last_ns"] <= now),
    ("t.last_ns > now + 1us", lambda v, now: v["t"]["last_ns"] > now + 1000),
    ("t.skew > now - 2h", lambda v, now: v["t"]["skew"] > now - 7200 * S),
    ("t.last_ns < 4990s", lambda v, now: v["t"]["last_ns"] < 4990 * S),
    ("packets < 10 and delta > 0", lambda v, now: v["packets"] < 10 and v["delta"] > 0),
    ("packets < 5 or packets > 45 or port == 53",
     lambda v, now: v["packets"] < 5 or v["packets"] > 45 or v["port"] == 53),
    ("packets < 10 and delta > 0 or port == 80 and t.last_ns < now - 10s",
     lambda v, now: (v["packets"] < 10 and v["delta"] > 0)
     or (v["port"] == 80 and v["t"]["last_ns"] < now - 10 * S)),
    ("(packets < 10 or packets > 40) and (port == 443 or delta < 0)",
     lambda v, now: (v["packets"] < 10 or v["packets"] > 40)
     and (v["port"] == 443 or v["delta"] < 0)),
    ("((packets<10))and(state==IDLE)", lambda v, now: v["packets"] < 10 and v["state"] == "IDLE"),
]


@pytest.mark.parametrize("text,test", CASES, ids=[c[0] for c in CASES])
def test_predicate_matches_reference(codec, values, text, test):
    got = predicate.compile_predicate(text, codec).evaluate(values, NOW)
    want = reference(codec, values, test)
    assert want.any() or text.startswith("packets >= 0xff") or "now + 1us" in text
    np.testing.assert_array_equal(got, want)


def test_per_cpu_fields_compare_the_largest_value(codec, values):
    cpus, stride = 3, (codec.size + 7) & ~7
    percpu = PerCpuCodec(codec, cpus)
    n = len(values) // cpus
    rows = np.zeros((n, stride * cpus), np.uint8)
    for cpu in range(cpus):
        rows[:, cpu * stride:cpu * stride + codec.size] = values[cpu * n:(cpu + 1) * n]
    for text, test in [("t.last_ns < now - 30s", lambda ts: max(ts) < NOW - 30 * S),
                       ("delta < -10", None)]:
        got = predicate.compile_predicate(text, percpu).evaluate(rows, NOW, cpus=cpus, cpu_stride=stride)
        decoded = [percpu.decode(row.tobytes()) for row in rows]
        if test is None:  # signed: the largest per-CPU value, compared signed
            want = [max(c["delta"] for c in d) < -10 for d in decoded]
        else:
            want = [test([c["t"]["last_ns"] for c in d]) for d in decoded]
        np.testing.assert_array_equal(got, want)


def test_now_minus_more_than_uptime_selects_nothing_unsigned(codec, values):
    """``now - 1h`` below zero: no u64 is smaller (no wrap-around to 'everything')."""
    early = 10 * S
    for text, expected in [("t.last_ns < now - 1h", False), ("t.last_ns > now - 1h", True),
                           ("t.last_ns != now - 1h", True), ("t.last_ns == now - 1h", False)]:
        assert (predicate.compile_predicate(text, codec).evaluate(values, early) == expected).all(), text


def test_kernel_table_is_dnf_with_clause_ends(codec):
    p = predicate.compile_predicate("(packets < 10 or delta > -3) and t.last_ns < now - 30s", codec)
    assert [[str(t) for t in c] for c in p.clauses] == [
        ["packets < 10", "t.last_ns < now - 30000000000ns"],
        ["delta > -3", "t.last_ns < now - 30000000000ns"]]
    ops = {op: 10 + i for i, op in enumerate(predicate.OPS)}  # the codes come from the caller
    table = p.table(ops)
    assert [r["clause_end"] for r in table] == [0, 1, 0, 1]
    assert table[0] == {"operand": 10, "offset": 0, "width": 8, "is_signed": 0,
                        "op": ops["<"], "relative": 0, "clause_end": 0, "in_key": 0}
    assert table[1]["relative"] == 1 and table[1]["operand"] == -30 * S
    assert table[1]["offset"] == 16 and table[2]["is_signed"] == 1 and table[2]["width"] == 4


ERRORS = [
    ("pakets < 3", 1, "pakets", "no such field (fields: packets, delta, port, flags, state, t, "
                                "bits, name)"),
    ("t.last < 3", 3, "last", "no such field in 't' (fields: last_ns, skew)"),
    ("packets.x < 3", 9, "x", "'packets' is not a struct"),
    ("bits < 1", 1, "bits", "is a bits, not a 1, 2, 4 or 8-byte integer"),
    ("name == 1", 1, "name", "not a 1, 2, 4 or 8-byte integer"),
    ("packets 3", 9, "3", "expected a comparison"),
    ("packets =< 3", 9, "=", "unexpected character"),
    ("packets < 3 and", 16, "", "expected a field name"),
    ("packets < 3 nand delta > 0", 13, "nand", "expected 'and', 'or'"),
    ("(packets < 3 or delta > 0", 26, "", "expected ')' to close the '(' at column 1"),
    ("packets < now - 30", 17, "30", "a duration needs a unit"),
    ("packets < now - 30y", 17, "30y", "unknown unit 'y'"),
    ("delta < now - 1s", 9, "now", "'now' is a 64-bit ns timestamp; field 'delta' has 4 bytes"),
    ("port > 70000", 8, "70000", "70000 does not fit field 'port' (u16: 0..65535)"),
    ("packets > -1", 11, "-", "does not fit"),
    ("delta > -2147483649", 9, "-", "(s32: -2147483648..2147483647)"),
    ("state == OPENED", 10, "OPENED", "enumerators: IDLE, OPEN, CLOSED"),
    ("packets == IDLE", 12, "IDLE", "not a number or an enumerator of field 'packets'"),
    ("packets < $", 11, "$", "unexpected character"),
    ("t.last_ns < now - 2000000h", 19, "2000000h", "duration too large"),
]


@pytest.mark.parametrize("text,column,token,message", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_name_column_and_token(codec, text, column, token, message):
    with pytest.raises(InputError) as info:
        predicate.compile_predicate(text, codec)
    line = str(info.value)
    shown = f"'{token}'" if token else "(end of expression)"
    if message == "unexpected character":
        assert line.startswith(f"where column {column}: unexpected character '{token}'")
    else:
        assert line.startswith(f"where column {column} {shown}: "), line
        assert message in line
    assert "\n" not in line


def test_too_many_terms_after_expansion(codec):
    text = " and ".join(f"(packets == {i} or delta == {i})" for i in range(4))  # 16 clauses × 4
    with pytest.raises(InputError, match="expression too large: .* the kernel program holds 16"):
        predicate.compile_predicate(text, codec)
    assert len(predicate.compile_predicate(text, codec, max_terms=64).terms) == 64


def test_map_without_btf_has_no_fields():
    from bpfbatch.records.codec import RawCodec
    with pytest.raises(InputError, match="no BTF value type"):
        predicate.compile_predicate("x < 3", RawCodec(8))


@pytest.mark.parametrize("text,ns", [("30s", 30 * S), ("1500ms", 1_500_000_000), ("2m", 120 * S),
                                     ("1h", 3600 * S), ("5us", 5000), ("7ns", 7)])
def test_durations(text, ns):
    assert predicate.parse_duration(text, "--older-than") == ns


@pytest.mark.parametrize("text", ["30", "0s", "s", "-1s", "3 days", "1y"])
def test_bad_durations(text):
    with pytest.raises(InputError, match="^--older-than: "):
        predicate.parse_duration(text, "--older-than")


@pytest.fixture(scope="module")
def key_codecs() -> tuple[BtfCodec, BtfCodec]:
    """``struct flow_key { u32 saddr; u16 dport; u8 proto; }`` and a bare ``u32`` key."""
    with BtfBuilder() as b:
        u8, u16, u32 = b.integer("u8", 1), b.integer("u16", 2), b.integer("u32", 4)
        key = b.struct("flow_key", [("saddr", u32), ("dport", u16), ("proto", u8)])
        btf = Btf.from_bytes(b.raw())
        return BtfCodec(btf, key), BtfCodec(btf, u32)


def test_key_fields(codec, values, key_codecs):
    struct_key, scalar_key = key_codecs
    rng = np.random.default_rng(3)
    n = len(values)
    keys = np.zeros((n, struct_key.size), np.uint8)
    keys[:, 0:4] = rng.integers(0, 256, (n, 4), dtype=np.uint8)
    keys[:, 4:6] = np.frombuffer(rng.choice(np.array([53, 443], "<u2"), n).tobytes(),
                                 np.uint8).reshape(n, 2)
    keys[:, 6] = rng.choice([6, 17], n)
    text = "key.dport == 53 and (key.proto == 17 or packets < 10)"
    p = predicate.compile_predicate(text, codec, key=struct_key)
    assert [t.field.in_key for t in p.terms] == [True, True, True, False]
    want = [k["dport"] == 53 and (k["proto"] == 17 or v["packets"] < 10)
            for k, v in ((struct_key.decode(kr.tobytes()), codec.decode(vr.tobytes()))
                         for kr, vr in zip(keys, values))]
    np.testing.assert_array_equal(p.evaluate(values, NOW, keys=keys), want)
    scalar = np.arange(n, dtype="<u4").view(np.uint8).reshape(n, 4)
    p = predicate.compile_predicate("key < 100 or value.packets > 45", codec, key=scalar_key)
    want = [i < 100 or codec.decode(vr.tobytes())["packets"] > 45 for i, vr in enumerate(values)]
    np.testing.assert_array_equal(p.evaluate(values, NOW, keys=scalar), want)
    row = p.table(package_contract().ops)[0]
    assert row["in_key"] == 1 and row["width"] == 4
    with pytest.raises(InputError, match=r"^where column 5 'port': no such field in 'key' "
                                         r"\(fields: saddr, dport, proto\)"):
        predicate.compile_predicate("key.port == 1", codec, key=struct_key)
    with pytest.raises(InputError, match=r"^where column 1 'key': no such field"):
        predicate.compile_predicate("key.dport == 1", codec)  # no key codec: 'key' is just a name
    with pytest.raises(InputError, match="field 'key' is a struct"):
        predicate.compile_predicate("key == 1", codec, key=struct_key)
    scalar_value = key_codecs[1]  # a bare u32 value: its only fields are key and value
    with pytest.raises(InputError, match=r"^where column 1 'pakets': no such field "
                                         r"\(fields: key, value\)$"):
        predicate.compile_predicate("pakets > 1", scalar_value, key=scalar_key)


@pytest.mark.parametrize("text", ["", "   ", "\t\n"])
def test_empty_expression_is_refused(codec, text):
    """An unset shell variable must not become "every element" (exec --action delete)."""
    with pytest.raises(InputError, match="empty expression") as info:
        predicate.compile_predicate(text, codec)
    assert str(info.value).startswith("where: ")


def test_deep_nesting_is_parsed_without_recursion(codec, values):
    depth = predicate.MAX_DEPTH
    nested = "(" * depth + "packets < 10" + ")" * depth + " and " + \
        "(" * depth + "delta > 0 or port == 53" + ")" * depth
    flat = predicate.compile_predicate("packets < 10 and (delta > 0 or port == 53)", codec)
    got = predicate.compile_predicate(nested, codec)
    assert got.clauses == flat.clauses
    np.testing.assert_array_equal(got.evaluate(values, NOW), flat.evaluate(values, NOW))


@pytest.mark.parametrize("depth", [predicate.MAX_DEPTH + 1, 400, 100_000])
def test_nesting_beyond_the_limit_is_one_line_error(codec, depth):
    text = "(" * depth + "packets < 10" + ")" * depth
    with pytest.raises(InputError) as info:
        predicate.compile_predicate(text, codec)
    assert str(info.value) == (f"where column {predicate.MAX_DEPTH + 1} '(': parentheses nested "
                               f"deeper than {predicate.MAX_DEPTH}")


@pytest.mark.parametrize("text,column,message", [
    ("(packets < 10", 14, "expected ')' to close the '(' at column 1"),
    ("((packets < 10) or delta > 0", 29, "expected ')' to close the '(' at column 1"),
    ("packets < 10)", 13, "expected 'and', 'or' or the end of the expression"),
    ("()", 2, "expected a field name"),
    ("packets < 10 or", 16, "expected a field name"),
])
def test_unbalanced_parentheses(codec, text, column, message):
    with pytest.raises(InputError, match=f"column {column} .*{re.escape(message)}"):
        predicate.compile_predicate(text, codec)


@pytest.mark.parametrize("operand,bits", [(2**63, -(2**63)), (2**64 - 1, -1),
                                          (2**63 - 1, 2**63 - 1)])
def test_u64_operands_travel_as_the_kernels_s64_bits(codec, operand, bits):
    """The kernel's ``__s64 operand`` is compared as the field's type: an unsigned constant
    of 2**63 or more is its two's-complement bits, not an OverflowError."""
    (row,) = predicate.compile_predicate(f"packets >= {operand}", codec).table(
        package_contract().ops)
    assert row["operand"] == bits and row["is_signed"] == 0
    assert np.array([row["operand"]], np.int64).view(np.uint64)[0] == operand
