"""Every conversion rule of ``migrate`` on generated layout pairs, bpftool as the oracle.

A seed draws, for each of a dozen maps, an old and a new C record made of fields that each
exercise one rule (widened and narrowed integers of both signednesses, enums renumbered and
resized, char and integer arrays grown and cut, nested structs reordered, a union through
its first member, bitfields both ways, arrays of structs and of arrays, removed, renamed,
new and ``--set`` fields; hash, array and per-CPU maps, and struct keys converted too). The
two layouts are compiled by clang into two objects (their enumerators share names, so they
cannot share one), the old maps filled with values every rule accepts, and each migrated;
then ``bpftool -j map dump`` of the new map, read with the value rule
(:func:`tools.layoutgen.formatted_as_value_rule`), must hold exactly what the rules say,
computed here from the values written, independently of the package's code.
"""

from __future__ import annotations

import json
import random
import shutil
import string
from pathlib import Path

import pytest

import bpfbatch
from tools import layoutgen

pytestmark = pytest.mark.skipif(not (shutil.which("bpftool") and shutil.which(layoutgen.CLANG)),
                                reason="needs bpftool and clang")

SEED = 20261201
MAPS = 12
PER_MAP = 7  # fields per map: every rule comes up in three maps or more
ENTRIES = 6


def _text(rng: random.Random, longest: int) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits)
                   for _ in range(rng.randint(0, longest)))


def _int(rng: random.Random, lo: int, hi: int) -> int:
    return rng.choice([lo, hi, 0, rng.randint(lo, hi)])


class Rule:
    """One field: its old and new C declarations (``{n}`` its name, ``{e}`` a unique
    prefix), the old value to write, the new value the rule gives, and the options it needs.
    A value ``None`` (old) is a field the old layout lacks; ``...`` (new) one it removes."""

    def __init__(self, old: str | None, new: str | None, value, expect, *, rename=False,
                 sets=None, enums: tuple[str, str] = ("", "")):
        self.old, self.new, self.value, self.expect = old, new, value, expect
        self.rename, self.sets, self.enums = rename, sets, enums


def _u(bits):
    return lambda rng: _int(rng, 0, (1 << bits) - 1)


def _s(bits):
    return lambda rng: _int(rng, -(1 << (bits - 1)), (1 << (bits - 1)) - 1)


SAME = lambda v: v  # noqa: E731 - the rule's expectation: the value unchanged

RULES = {
    "widen-u8-u64": Rule("__u8 {n}", "__u64 {n}", _u(8), SAME),
    "widen-s8-s32": Rule("__s8 {n}", "__s32 {n}", _s(8), SAME),
    "widen-s16-s64": Rule("short {n}", "long long {n}", _s(16), SAME),
    "widen-u32-s64": Rule("__u32 {n}", "__s64 {n}", _u(32), SAME),
    "narrow-u64-u16": Rule("__u64 {n}", "__u16 {n}", _u(16), SAME),
    "narrow-s32-s8": Rule("int {n}", "signed char {n}", _s(8), SAME),
    "sign-s32-u32": Rule("__s32 {n}", "__u32 {n}", lambda rng: _int(rng, 0, 2**31 - 1), SAME),
    "sign-u64-s64": Rule("__u64 {n}", "__s64 {n}", lambda rng: _int(rng, 0, 2**63 - 1), SAME),
    "enum-renumbered": Rule(
        "enum {e}o {n}", "enum __attribute__((packed)) {e}n {n}",
        lambda rng: rng.choice(["A", "B", "C"]), SAME,
        enums=("enum {e}o {{ {e}A = 1, {e}B = 2, {e}C = 7 }};",
               "enum __attribute__((packed)) {e}n {{ {e}C = 0, {e}X = 3, {e}A = 40, "
               "{e}B = 200 }};")),
    "enum-into-int": Rule("enum {e}o {n}", "__u16 {n}", lambda rng: rng.choice(["A", "B"]),
                          None, enums=("enum {e}o {{ {e}A = 5, {e}B = 600 }};", "")),
    "char-cut": Rule("char {n}[16]", "char {n}[8]", lambda rng: _text(rng, 7), SAME),
    "char-grown": Rule("char {n}[4]", "char {n}[12]", lambda rng: _text(rng, 4), SAME),
    "array-cut-widened": Rule("__u16 {n}[4]", "__u32 {n}[2]",
                              lambda rng: [_int(rng, 0, 65535), 7, 0, 0], lambda v: v[:2]),
    "array-grown": Rule("__u8 {n}[2]", "__s16 {n}[3]", lambda rng: [_int(rng, 0, 255), 1],
                        lambda v: v + [0]),
    "array-2d": Rule("__u8 {n}[2][2]", "__u16 {n}[2][3]",
                     lambda rng: [[_int(rng, 0, 255), 2], [3, 4]],
                     lambda v: [row + [0] for row in v]),
    "struct-reordered": Rule("struct {{ __u16 a; __u8 b; __u32 gone; }} {n}",
                             "struct {{ __u32 b; __u16 a; __u8 c; }} {n}",
                             lambda rng: {"a": _int(rng, 0, 65535), "b": _int(rng, 0, 255),
                                          "gone": 9},
                             lambda v: {"b": v["b"], "a": v["a"], "c": 0}),
    "union-first-member": Rule("union {{ __u32 x; __u8 y[4]; }} {n}",
                               "union {{ __u32 x; __u16 z; }} {n}",
                               lambda rng: {"x": _int(rng, 0, 2**32 - 1)},
                               lambda v: {"x": v["x"], "z": v["x"] & 0xFFFF}),
    "structs-in-array": Rule("struct {{ __u8 p; __u8 q; }} {n}[2]",
                             "struct {{ __u16 q; }} {n}[2]",
                             lambda rng: [{"p": 1, "q": _int(rng, 0, 255)},
                                          {"p": 2, "q": 3}],
                             lambda v: [{"q": item["q"]} for item in v]),
    "bits-widened": Rule("__u32 {n}:5", "__u32 {n}", lambda rng: _int(rng, 0, 31), SAME),
    "into-bits": Rule("__u8 {n}", "__u16 {n}:12", _u(8), SAME),
    "signed-bits": Rule("int {n}:6", "short {n}", _s(6), SAME),
    "removed": Rule("__u32 {n}", None, _u(32), ...),
    "new-zero": Rule(None, "__u64 {n}", None, lambda v: 0),
    "new-set": Rule(None, "__u16 {n}", None, lambda v: 777, sets="777"),
    "renamed-widened": Rule("__u32 {n}_was", "__u64 {n}", _u(32), SAME, rename=True),
}
#: bpftool prints a bitfield as hex text of its bits.
_BITS = {"bits-widened": False, "into-bits": True, "signed-bits": False}
#: Rules that are not a struct's direct member in bpftool's view (a bitfield needs one).
MAP_TYPES = ["BPF_MAP_TYPE_HASH", "BPF_MAP_TYPE_ARRAY", "BPF_MAP_TYPE_PERCPU_HASH",
             "BPF_MAP_TYPE_LRU_HASH"]
KEY_RULES = ["widen-u8-u64", "narrow-u64-u16", "struct-reordered", "enum-renumbered"]


class Pair:
    """One map's old and new layouts: ``fields`` (name → rule name) of its value, and of
    its key for a hash map with a struct key."""

    def __init__(self, i: int, rng: random.Random, order: list[str]):
        self.name = f"m{i}"
        self.map_type = rng.choice(MAP_TYPES)
        names = [order[(i * PER_MAP + j) % len(order)] for j in range(PER_MAP)]
        self.value = {f"v{i}_{j}": rule for j, rule in enumerate(names)}
        self.key = {}
        if "HASH" in self.map_type and rng.random() < 0.5:
            self.key = {f"k{i}_{j}": rule for j, rule in enumerate(rng.sample(KEY_RULES, 2))}
            self.key[f"k{i}_id"] = "widen-u8-u64"  # distinct keys: the row number

    def c(self, which: str) -> tuple[list[str], str]:
        """The enum declarations and the map definition of the ``old`` or ``new`` side."""
        decls = []

        def record(fields: dict[str, str], kind: str) -> str:
            members = []
            for name, rule_name in fields.items():
                rule = RULES[rule_name]
                decl = getattr(rule, which)
                if decl is None:
                    continue
                if which == "old" and rule.rename:
                    decl = decl.replace("{n}_was", f"{name}_was")
                enum = rule.enums[0 if which == "old" else 1]
                if enum:
                    decls.append(enum.format(e=f"{name}_"))
                members.append(decl.format(n=name, e=f"{name}_"))
            decls.append(f"struct {kind}_{self.name} {{ {'; '.join(members)}; }};")
            return f"struct {kind}_{self.name}"

        value = record(self.value, "val")
        key = record(self.key, "key") if self.key else "__u32"
        entries = ENTRIES if "ARRAY" in self.map_type else ENTRIES * 8  # LRU: room to spare
        return decls, (f"struct {{ __uint(type, {self.map_type}); __uint(max_entries, "
                       f"{entries}); __type(key, {key}); __type(value, {value}); }} "
                       f"{self.name} SEC(\".maps\");")

    def values(self, rng: random.Random, fields: dict[str, str], row: int | None = None):
        out = {}
        for name, rule_name in fields.items():
            rule = RULES[rule_name]
            if rule.old is None:
                continue
            key = f"{name}_was" if rule.rename else name
            value = rule.value(rng)
            if name.endswith("_id"):
                value = row
            out[key] = f"{name}_{value}" if rule.enums[0] and isinstance(value, str) else value
        return out

    def expected(self, old: dict, fields: dict[str, str]) -> dict:
        out = {}
        for name, rule_name in fields.items():
            rule = RULES[rule_name]
            if rule.new is None:
                continue
            if rule.old is None:
                out[name] = rule.expect(None)
                continue
            value = old[f"{name}_was" if rule.rename else name]
            if rule_name == "enum-into-int":
                value = {"A": 5, "B": 600}[value.rsplit("_", 1)[1]]
            else:
                value = rule.expect(value)
            if _BITS.get(rule_name):
                value = hex(value)
            out[name] = value
        return out

    def options(self) -> dict:
        renames, sets = [], []
        for side, fields in (("key", self.key), ("value", self.value)):
            for name, rule_name in fields.items():
                rule = RULES[rule_name]
                if rule.rename:
                    renames.append(f"{side}.{name}_was={side}.{name}")
                if rule.sets:
                    sets.append(f"{side}.{name}={rule.sets}")
        return {"rename": renames, "set": sets}


def _source(pairs: list[Pair], which: str) -> str:
    decls, maps = [], []
    for pair in pairs:
        d, m = pair.c(which)
        decls += d
        maps.append(m)
    return "\n".join(["#include <linux/bpf.h>", "#include <bpf/bpf_helpers.h>", *decls, *maps,
                      ""])


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    rng = random.Random(SEED)
    pairs = _pairs(rng)
    built = []
    for which in ("old", "new"):
        folder = Path(tmp_path_factory.mktemp(which))
        built.append(layoutgen.build(_source(pairs, which), folder))
    try:
        yield pairs, built[0], built[1], rng
    finally:
        for obj in built:
            obj.close()


def _pairs(rng: random.Random) -> list[Pair]:
    order = sorted(RULES)
    rng.shuffle(order)
    return [Pair(i, rng, order) for i in range(MAPS)]


def test_every_rule_is_drawn():
    drawn = {rule for pair in _pairs(random.Random(SEED)) for rule in pair.value.values()}
    assert drawn == set(RULES)


def test_each_rule_as_bpftool_reads_the_result(objects):
    pairs, old_obj, new_obj, rng = objects
    for pair in pairs:
        old, new = old_obj.map(pair.name), new_obj.map(pair.name)
        written = {}
        for row in range(ENTRIES):
            key = row if not pair.key else pair.values(rng, pair.key, row)
            value = pair.values(rng, pair.value)
            if old.info.percpu:
                value = [pair.values(rng, pair.value) for _ in range(_cpus(old))]
            old.update(key, value)
            written[json.dumps(key, sort_keys=True)] = (key, value)
        result = bpfbatch.migrate(old, new, **pair.options())
        assert result.counts.copied == ENTRIES
        gone = {f"value.{n}" for n, r in pair.value.items() if RULES[r].new is None}
        assert gone <= set(result.removed), result.plan
        got = {}
        for entry in layoutgen.formatted_as_value_rule(layoutgen.bpftool_dump(new), new_obj.btf,
                                                       new.info):
            got[json.dumps(entry["key"], sort_keys=True)] = entry
        want = {}
        for key, value in written.values():
            new_key = key if not pair.key else pair.expected(key, pair.key)
            entry = {"key": new_key}
            if old.info.percpu:
                entry["values"] = [{"cpu": c, "value": pair.expected(v, pair.value)}
                                   for c, v in enumerate(value)]
            else:
                entry["value"] = pair.expected(value, pair.value)
            want[json.dumps(new_key, sort_keys=True)] = entry
        assert got == want, f"{pair.name} ({pair.map_type}): {pair.key} {pair.value}\n" \
                            f"{result.plan}"


def _cpus(m) -> int:
    return m.info.value_stride // m.info.cpu_stride
