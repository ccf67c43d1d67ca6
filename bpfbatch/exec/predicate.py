"""The ``--where`` predicate language of map exec and prune, compiled to a parameter table.

Grammar (keywords are lower case; whitespace is free)::

    expr    := clause ('or' clause)*
    clause  := atom ('and' atom)*
    atom    := '(' expr ')' | field OP operand
    field   := NAME ('.' NAME)*                 a value field, nested structs by dots
             | 'key' ['.' NAME ('.' NAME)*]     the key, or a field of it
             | 'value' ['.' NAME ('.' NAME)*]   the value, or a field of it (explicitly)
    OP      := '==' | '!=' | '<' | '<=' | '>' | '>='
    operand := ['-'] INTEGER [UNIT]             decimal or 0x hex; with a unit, in ns
             | 'now' [('+' | '-') INTEGER UNIT] CLOCK_MONOTONIC ns (bpf_ktime_get_ns)
             | ENUMERATOR                        a name of the field's enum type
             | LITERAL                           a decoded field's display value:
                                                 10.0.0.1, fe80::1, 02:00:00:00:00:01,
                                                 "any text" (double quotes), a name
    UNIT    := ns | us | ms | s | m | h

Fields are integers of 1, 2, 4 or 8 bytes (also enums, bools and chars) of the map's value
type, or with the ``key.`` prefix of its key type, found through the BTF; bitfields, arrays and
floats are refused. ``key`` and ``value`` alone name a whole integer key or value; as prefixes
they win over a struct member of the same name. Constants must fit the
field's type; ``now``-relative operands need an 8-byte field and are computed when a pass
starts (in the kernel: ``bpf_ktime_get_ns()`` at the program's start; in user space:
``clock_gettime(CLOCK_MONOTONIC)``). ``now - 1h`` on a machine up for less than an hour is
below every unsigned value: ``ts < now - 1h`` is then false, never a wrapped-around true.

**Per-CPU maps**: a field's value is the *largest* of its per-CPU values (each possible CPU's
slot, as the map stores them; a CPU that never wrote the element contributes zeros). For a
``last_seen`` timestamp that is the newest one: ``last_seen < now - 30s`` selects an element
only when no CPU saw it in the last 30 s.

**Decoded fields** (``--decode``, and the automatic choice for ``__be16``/``__be32``
typedefs; :mod:`bpfbatch.records.decoding`) take what the output shows: ``dport == 443`` and
``saddr == 10.0.0.1`` compare the network-order bytes the kernel stored, ``comm == "bash"``
the text, ``ifindex == lo``, ``err == -ENOENT``. Such a field compares as displayed only for
``==``/``!=``, except the kinds whose display keeps the stored order (``errno``, ``ifname``,
``ksym``) and ``age``: ``seen age > 30`` (seconds, or with a unit) is ``seen < now - 30s``.

A :class:`Predicate` is in disjunctive normal form — an ``or`` of ``and``-clauses of
:class:`Term` — which is what the kernel program interprets (``progs/map_exec.h``); ``and``
binds tighter than ``or`` and parentheses are expanded, so the table stays small and the
program needs no stack. :meth:`Predicate.evaluate` is the same predicate, vectorised with numpy,
for the user-space emulation.
"""

from __future__ import annotations

import dataclasses
import itertools
import re

import numpy as np

from ..errors import InputError
from ..records.codec import Codec, PerCpuCodec
from ..records.layout import LeafKind, integer_field, leaf_kind
from .contract import OP_NAMES, package_contract

UNITS_NS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
#: Operator spellings (their kernel codes: :attr:`~bpfbatch.exec.contract.Contract.ops`).
OPS = tuple(OP_NAMES)

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<literal>"[^"]*"|\d+\.\d+\.\d+\.\d+\b|[0-9A-Fa-f]*:[0-9A-Fa-f:.]*)
  | (?P<number>(?:0[xX][0-9a-fA-F]+|\d+)(?:[a-zA-Z]+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>==|!=|<=|>=|<|>)
  | (?P<punct>[().+-])
""", re.X)
_NUMBER = re.compile(r"(0[xX][0-9a-fA-F]+|\d+)([a-zA-Z]*)")
_KEYWORDS = {"and", "or", "now"}
#: ``age OP x`` is ``stamp FLIPPED[OP] now - x``.
_FLIPPED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
#: Decoded kinds whose display keeps the order of the stored integer.
_ORDERED_KINDS = frozenset({"errno", "ifname", "ksym"})


@dataclasses.dataclass(frozen=True)
class Token:
    kind: str   # number, name, op, punct, keyword, end
    text: str
    column: int  # 1-based


@dataclasses.dataclass(frozen=True)
class Field:
    """An integer inside one (per-CPU: one CPU's) value: ``width`` bytes at ``offset``."""

    path: str
    offset: int
    width: int
    signed: bool
    in_key: bool = False

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(f"<{'i' if self.signed else 'u'}{self.width}")

    @property
    def range(self) -> tuple[int, int]:
        bits = self.width * 8
        return (-(1 << bits - 1), (1 << bits - 1) - 1) if self.signed else (0, (1 << bits) - 1)


@dataclasses.dataclass(frozen=True)
class Term:
    """``field op operand``; with ``relative`` the operand is added to ``now``."""

    field: Field
    op: str
    operand: int
    relative: bool = False

    def __str__(self) -> str:
        if not self.relative:
            return f"{self.field.path} {self.op} {self.operand}"
        sign = "-" if self.operand < 0 else "+"
        return f"{self.field.path} {self.op} now {sign} {abs(self.operand)}ns"


class Predicate:
    """An ``or`` of ``and``-clauses; no clauses at all means "every element"."""

    def __init__(self, clauses: tuple[tuple[Term, ...], ...], text: str = ""):
        self.clauses = clauses
        self.text = text

    @property
    def terms(self) -> list[Term]:
        return [t for clause in self.clauses for t in clause]

    def __str__(self) -> str:
        if not self.clauses:
            return "true"
        return " or ".join(" and ".join(map(str, c)) for c in self.clauses)

    def table(self, op_codes: dict[str, int]) -> list[dict]:
        """The kernel's ``struct map_exec_term`` fields, clause by clause; ``op_codes``: the
        program's ``enum map_exec_op`` (:attr:`~bpfbatch.exec.contract.Contract.ops`)."""
        rows = []
        for clause in self.clauses:
            for i, t in enumerate(clause):
                # The kernel's operand is an s64 compared as the field's type: an unsigned
                # constant >= 2**63 travels as its two's-complement bits.
                operand = t.operand - (1 << 64) if t.operand >= 1 << 63 else t.operand
                rows.append({"operand": operand, "offset": t.field.offset,
                             "width": t.field.width, "is_signed": int(t.field.signed),
                             "op": op_codes[t.op], "relative": int(t.relative),
                             "clause_end": int(i == len(clause) - 1),
                             "in_key": int(t.field.in_key)})
        return rows

    def evaluate(self, values: np.ndarray, now: int, *, keys: np.ndarray | None = None,
                 cpus: int = 0, cpu_stride: int = 0) -> np.ndarray:
        """Boolean mask over ``values``, a ``uint8`` array of shape ``(n, value_stride)``, and
        ``keys`` (``(n, key_size)``; needed only when a term reads the key).

        ``cpus`` > 0 reads a per-CPU layout (``cpus`` slots of ``cpu_stride`` bytes) and
        compares each field's largest per-CPU value, as the kernel program does.
        """
        n = len(values)
        if not self.clauses:
            return np.ones(n, bool)
        columns: dict[Field, np.ndarray] = {}
        result = np.zeros(n, bool)
        for clause in self.clauses:
            hit = np.ones(n, bool)
            for t in clause:
                if t.field not in columns:
                    columns[t.field] = (_column(keys, t.field, 0, 0) if t.field.in_key
                                        else _column(values, t.field, cpus, cpu_stride))
                hit &= _compare(columns[t.field], t, now)
            result |= hit
        return result


def _column(values: np.ndarray, field: Field, cpus: int, cpu_stride: int) -> np.ndarray:
    def at(base: int) -> np.ndarray:
        raw = np.ascontiguousarray(values[:, base + field.offset:base + field.offset + field.width])
        return raw.view(field.dtype).reshape(-1)
    if not cpus:
        return at(0)
    return np.maximum.reduce([at(cpu * cpu_stride) for cpu in range(cpus)])


def _compare(column: np.ndarray, term: Term, now: int) -> np.ndarray:
    operand = term.operand + (now if term.relative else 0)
    if operand < 0 and not term.field.signed:  # below every unsigned value
        return np.full(len(column), term.op in ("!=", ">", ">="))
    y = term.field.dtype.type(operand) if not term.relative else (
        np.int64(operand) if term.field.signed else np.uint64(operand))
    return {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
            ">": np.greater, ">=": np.greater_equal}[term.op](column, y)


# -- parsing -------------------------------------------------------------------------------


def tokenize(text: str, source: str = "where") -> list[Token]:
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise InputError(f"unexpected character {text[pos]!r}",
                             obj=f"{source} column {pos + 1}")
        kind = m.lastgroup
        if kind != "space":
            word = m.group()
            if kind == "name" and word in _KEYWORDS:
                kind = "keyword"
            tokens.append(Token(kind, word, pos + 1))
        pos = m.end()
    tokens.append(Token("end", "", len(text) + 1))
    return tokens


#: Deepest nesting of parentheses a predicate may have.
MAX_DEPTH = 64


class _Frame:
    """One open parenthesis (``opener``; ``None`` for the whole expression) while parsing:
    the ``or`` of the clauses closed so far and the ``and`` product being built (DNF)."""

    def __init__(self, opener: Token | None):
        self.opener = opener
        self.clauses: list[tuple[Term, ...]] = []
        self.product: list[tuple[Term, ...]] | None = None

    def conjoin(self, operand: list[tuple[Term, ...]], parser: "_Parser") -> None:
        if self.product is None:
            self.product = operand
        else:  # (a or b) and (c or d) = a&c or a&d or b&c or b&d
            self.product = [left + right for left, right in
                            itertools.product(self.product, operand)]
        parser.check_size(self.clauses + self.product)

    def disjoin(self, parser: "_Parser") -> None:
        self.clauses = self.clauses + self.product
        self.product = None
        parser.check_size(self.clauses)

    def close(self) -> list[tuple[Term, ...]]:
        return self.clauses + self.product


class _Parser:
    """Turns the tokens into clauses directly (DNF); see :meth:`parse`."""

    def __init__(self, text: str, value: Codec, key: Codec | None, source: str, max_terms: int):
        self.text = text
        self.tokens = tokenize(text, source)
        self.pos = 0
        self.value = value
        self.key = key
        self.source = source
        self.max_terms = max_terms

    def error(self, token: Token, message: str) -> InputError:
        shown = f" '{token.text}'" if token.text else " (end of expression)"
        return InputError(message, obj=f"{self.source} column {token.column}{shown}")

    def peek(self) -> Token:
        return self.tokens[self.pos]

    def take(self) -> Token:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def accept(self, kind: str, text: str) -> bool:
        token = self.peek()
        if token.kind == kind and token.text == text:
            self.pos += 1
            return True
        return False

    def parse(self) -> Predicate:
        """One pass over the tokens with an explicit stack of open parentheses (no recursion:
        the nesting depth is the user's, bounded by :data:`MAX_DEPTH`). Each frame holds the
        clauses of the ``or`` so far and the ``and`` product being built; a closed
        parenthesis is one operand of its parent's ``and``."""
        stack = [_Frame(None)]
        while True:
            token = self.peek()
            if self.accept("punct", "("):
                if len(stack) > MAX_DEPTH:
                    raise self.error(token, f"parentheses nested deeper than {MAX_DEPTH}")
                stack.append(_Frame(token))
                continue
            operand = [(self.comparison(),)]
            while True:  # fold the operand in, and close every parenthesis that ends here
                frame = stack[-1]
                frame.conjoin(operand, self)
                if self.accept("keyword", "and"):
                    break
                if self.accept("keyword", "or"):
                    frame.disjoin(self)
                    break
                token = self.peek()
                if frame.opener is None:
                    if token.kind != "end":
                        raise self.error(token, "expected 'and', 'or' or the end of the "
                                                "expression")
                    return Predicate(tuple(frame.close()), self.text)
                if not self.accept("punct", ")"):
                    raise self.error(token, f"expected ')' to close the '(' at column "
                                            f"{frame.opener.column}")
                operand = stack.pop().close()

    def check_size(self, clauses) -> None:
        size = sum(len(c) for c in clauses)
        if size > self.max_terms:
            raise self.error(self.tokens[self.pos - 1],
                             f"expression too large: {size} comparisons once and/or are "
                             f"expanded, the kernel program holds {self.max_terms}")

    def comparison(self) -> Term:
        field_token = self.peek()
        if field_token.kind != "name":
            raise self.error(field_token, "expected a field name")
        node, path, in_key = self.field()
        op = self.take()
        if op.kind != "op":
            raise self.error(op, f"expected a comparison ({' '.join(OPS)}) after field '{path}'")
        field = self._integer_field(field_token, node, path, in_key)
        return self.operand(field, node, op.text)

    def field(self):
        """``(layout node, path, in_key)`` of the dotted name at the current token."""
        token = self.take()
        in_key = token.text == "key" and self.key is not None
        node, parts = self.root(in_key, token), []
        if token.kind == "name" and (in_key or token.text == "value"):
            parts.append(token.text)
            if not self.accept("punct", "."):
                return node, token.text, in_key
            token = self.take()
        while True:
            if leaf_kind(node) is not LeafKind.STRUCT:
                if not parts:  # a scalar value: its fields are the two sides themselves
                    sides = "key, value" if self.key is not None else "value"
                    raise self.error(token, f"no such field (fields: {sides})")
                raise self.error(token, f"'{'.'.join(parts)}' is not a struct")
            members = node.fields()  # anonymous members' fields included, as in C
            if token.kind != "name" or token.text not in members:
                what = "no such field" if token.kind == "name" else "expected a field name"
                where = f" in '{'.'.join(parts)}'" if parts else ""
                raise self.error(token, f"{what}{where} (fields: {', '.join(members)})")
            node = members[token.text]
            parts.append(token.text)
            if not self.accept("punct", "."):
                return node, ".".join(parts), in_key
            token = self.take()

    def root(self, in_key: bool, token: Token):
        codec = self.key if in_key else self.value
        codec = codec.base if isinstance(codec, PerCpuCodec) else codec
        node = getattr(codec, "node", None)
        if node is None:
            what = "key" if in_key else "value"
            raise self.error(token, f"the map has no BTF {what} type: fields cannot be named "
                                    f"(give one: --{what}-type, or {what}_type= in the API)")
        return node

    def _integer_field(self, token: Token, node, path: str, in_key: bool) -> Field:
        if leaf_kind(node) is LeafKind.DISPLAY:  # compared as the stored integer
            if node.size not in (1, 2, 4, 8):
                raise self.error(token, f"field '{path}' ({node.decoder.kind}) has {node.size} "
                                        f"bytes; comparisons take 1, 2, 4 or 8")
            inner = node.inner
            return Field(path, node.offset, node.size,
                         leaf_kind(inner) is LeafKind.INTEGER and inner.signed, in_key)
        field = integer_field(node)
        if field is not None:
            return Field(path, field.offset, field.size, field.signed, in_key)
        kind = type(node).__name__.lower()
        raise self.error(token, f"field '{path}' is a {kind}, not a 1, 2, 4 or 8-byte integer")

    def operand(self, field: Field, node, op: str) -> Term:
        if leaf_kind(node) is LeafKind.DISPLAY and not (self.peek().kind == "keyword"
                                              and self.peek().text == "now"):
            return self.display_operand(field, node.decoder, op)
        token = self.take()
        if token.kind == "keyword" and token.text == "now":
            if field.width != 8:
                raise self.error(token, f"'now' is a 64-bit ns timestamp; field '{field.path}' "
                                        f"has {field.width} bytes")
            offset = 0
            if self.peek().kind == "punct" and self.peek().text in "+-":
                sign = -1 if self.take().text == "-" else 1
                token = self.take()
                offset = sign * self.number(token, duration=True)
                if abs(offset) >= 1 << 62:  # now ± offset must stay a 64-bit signed number
                    raise self.error(token, "duration too large (at most about 146 years)")
            return Term(field, op, offset, relative=True)
        first = token
        negative = token.kind == "punct" and token.text == "-"
        if negative:
            token = self.take()
        if token.kind == "name" and not negative:
            return Term(field, op, self.enumerator(token, field, node))
        value = self.number(token, duration=False) * (-1 if negative else 1)
        low, high = field.range
        if not low <= value <= high:
            raise self.error(first, f"{value} does not fit field '{field.path}' "
                                    f"({'s' if field.signed else 'u'}{field.width * 8}: "
                                    f"{low}..{high})")
        return Term(field, op, value)

    def display_operand(self, field: Field, decoder, op: str) -> Term:
        """A decoded field's operand, as its output shows it (see the module doc)."""
        first = token = self.take()
        sign = ""
        if token.kind == "punct" and token.text == "-":
            sign, token = "-", self.take()
        number = _NUMBER.fullmatch(token.text) if token.kind == "number" else None
        if decoder.kind == "age":
            if sign or not number:
                raise self.error(first, "expected an age in seconds, or with a unit (30s, 5m)")
            digits, unit = number.groups()
            if unit not in UNITS_NS and unit:
                raise self.error(token, f"unknown unit '{unit}' (use {', '.join(UNITS_NS)})")
            return Term(field, _FLIPPED[op], -int(digits, 0) * UNITS_NS[unit or "s"],
                        relative=True)
        if op not in ("==", "!=") and decoder.kind not in _ORDERED_KINDS:
            raise self.error(first, f"field '{field.path}' shows {decoder.kind} values, which "
                                    f"do not compare in the stored order: use == or != "
                                    f"(or --decode none to compare the stored integers)")
        if token.kind not in ("number", "name", "literal"):
            raise self.error(token, f"expected a {decoder.kind} value")
        if number and not number.group(2):
            value = int(sign + number.group(1), 0)
        else:
            value = sign + (token.text[1:-1] if token.text.startswith('"') else token.text)
        try:
            raw = decoder.parse(value, field.width, field.path)
        except InputError as exc:
            raise self.error(first, exc.message) from None
        return Term(field, op, int.from_bytes(raw, "little", signed=field.signed))

    def number(self, token: Token, *, duration: bool) -> int:
        m = _NUMBER.fullmatch(token.text) if token.kind == "number" else None
        if not m:
            raise self.error(token, "expected a duration like 30s" if duration
                             else "expected a number, 'now' or an enumerator")
        digits, unit = m.groups()
        if unit and unit not in UNITS_NS:
            raise self.error(token, f"unknown unit '{unit}' (use {', '.join(UNITS_NS)})")
        if duration and not unit:
            raise self.error(token, f"a duration needs a unit ({', '.join(UNITS_NS)})")
        return int(digits, 0) * UNITS_NS.get(unit, 1)

    def enumerator(self, token: Token, field: Field, node) -> int:
        enum = leaf_kind(node) is LeafKind.ENUM
        if enum and token.text in node.by_name:
            return node.by_name[token.text]
        known = f" (enumerators: {', '.join(node.by_name)})" if enum else ""
        raise self.error(token, f"not a number or an enumerator of field '{field.path}'{known}")


#: The predicate that selects every element, for callers that mean it (library use; the
#: CLI has ``clear`` for that).
EVERY_ELEMENT = Predicate((), "every element")


def compile_predicate(text: str, value: Codec, *, key: Codec | None = None, source: str = "where",
            max_terms: int | None = None) -> Predicate:
    """Parse ``text`` against the value (and key) codecs of a map
    (:func:`bpfbatch.records.codec.map_codecs`); without ``key``, ``key`` is an ordinary name.

    An empty or blank ``text`` is refused: an unset shell variable must not turn
    ``--action delete`` into "delete everything" (:data:`EVERY_ELEMENT` says that on
    purpose). Errors are :class:`InputError` naming ``source``, the column and the token.
    ``max_terms`` defaults to what the kernel program's table holds, in either mode, so a
    predicate runs in both or in neither.
    """
    if not text.strip():
        raise InputError("empty expression (an unset variable?); to act on every element "
                         "use dump, count or clear", obj=source)
    if max_terms is None:
        max_terms = package_contract().max_terms
    return _Parser(text, value, key, source, max_terms).parse()


def parse_duration(text: str, source: str) -> int:
    """``30s``, ``1500ms``, ``2h`` → nanoseconds (a positive integer with a unit)."""
    m = _NUMBER.fullmatch(text.strip())
    if not m or m.group(2) not in UNITS_NS:
        raise InputError(f"expected a duration like 30s, 500ms or 1h (units: "
                         f"{', '.join(UNITS_NS)}), got {text!r}", obj=source)
    value = int(m.group(1), 0) * UNITS_NS[m.group(2)]
    if value <= 0:
        raise InputError(f"must be positive, got {text!r}", obj=source)
    return value
