"""The ``EMATCH_TREE`` of basic and cgroup as tc's ``parse_ematch()`` reads and sends it.

Grammar (``emp_ematch.y``): ``EXPR := TERM [ {and|or} EXPR ]``, ``TERM := [not] { KIND(ARGS) |
( EXPR ) }``. As in tc's bison parser, the first token that cannot continue the expression ends
it: after a whole top-level expression that token is left for the classifier (tc steps back
one word, to the last one its scanner read); anywhere else it is tc's "Parse error". Then, as
``flatten_tree()``, the tree becomes one list — the top-level terms, then each group's terms
appended as met — each term a ``struct tcf_ematch_hdr`` (its relation to the next, ``not``) and
either its kind's data or the index of its group's first term; kinds are found by name (the
ematch modules tc 6.1 builds) and numbered by tc's ``/etc/iproute2/ematch_map``."""

from __future__ import annotations

import dataclasses
import errno
import functools
import importlib
import re
import struct

from ..encoding import Attr
from ..grammar import BATCH_STATE, CommandError, Words
from . import Arg, EmError
from .lexer import AND, END, NOT, OR, Lexer, ScanState

EMATCH_MAP = "/etc/iproute2/ematch_map"
#: The ematch kinds tc 6.1 builds in (``<kind>_ematch_util``), by name.
_MODULES = {"cmp": "cmp", "nbyte": "nbyte", "u32": "u32", "meta": "meta", "canid": "canid",
            "ipset": "ipset", "ipt": "ipt"}
_TREE_HDR, _TREE_LIST, _PROG_TC = 1, 2, 0  # TCA_EMATCH_TREE_HDR/_LIST, TCF_EM_PROG_TC
_REL_AND, _REL_OR, _INVERT = 1, 2, 4  # TCF_EM_REL_AND/_OR, TCF_EM_INVERT
_HDR = struct.Struct("=HHHH")  # struct tcf_ematch_hdr: matchid, kind, flags, pad
_REF = struct.Struct("=I")

EXPR_USAGE = """\
Usage: EXPR
where: EXPR  := TERM [ { and | or } EXPR ]
       TERM  := [ not ] { MATCH | '(' EXPR ')' }
       MATCH := module '(' ARGS ')'
       ARGS := ARG1 ARG2 ...

Example: a(x y) and not (b(x) or c(x y z))
"""


@dataclasses.dataclass(slots=True, eq=False)
class _Term:
    """One term: ``args`` (the kind first) or, for a group, ``child`` (its terms)."""

    args: list[Arg] | None
    inverted: bool
    child: list[_Term] | None = None
    relation: int = 0
    ref: int = 0


class _SyntaxError(Exception):
    """bison's "syntax error" where it cannot recover (inside the expression)."""


def match_option(w: Words, attr_type: int, printed: list[str]) -> Attr | None:
    """``match EMATCH_TREE`` of a classifier, the cursor on the word after ``match``: the tree
    as attribute ``attr_type`` (None when there is none to send), the cursor left on the word
    tc reads next. Lines the scanner printed go to ``printed`` (tc prints them whatever
    follows). CommandError with tc's words and ``Illegal "ematch"`` otherwise.

    As in tc, words holding no term (``match ""``) send the batch's last tree again. Where tc
    loops for ever — re-flattening a last tree with groups, or stepping back onto ``match``
    when the word after it is too long for its scanner — the line is refused instead."""
    kept = BATCH_STATE.get()
    state = ScanState() if kept is None else kept.setdefault(__name__, ScanState())
    begin = w.pos
    lexer = Lexer(w.words, begin, len(w.words) - 1, state)
    try:
        chain = _parse(lexer)
    except _SyntaxError:
        raise CommandError("".join(lexer.notes) + _report(
            "Parse error", w.words[begin:lexer.pos], "syntax error") + EXPR_USAGE
            + 'Illegal "ematch"') from None
    if lexer.pos == begin:  # the first word refused unread: tc steps back onto `match` itself
        raise CommandError("".join(lexer.notes) + "the word after 'match' is too long for tc's "
                           "scanner, and tc reads that 'match' again for ever")
    w.pos = lexer.pos - 1  # tc's "undo look ahead by parser"
    printed.extend(lexer.notes)
    if chain is None:
        chain = state.root
        if chain is None:
            return None
        if any(term.child is not None for term in chain):
            raise CommandError("".join(printed) + "an empty ematch tree re-sends the last one, "
                               "whose groups tc's flatten_tree() loops on for ever")
    state.root = chain
    terms = _flatten(chain)
    try:
        items = [(index, _term_data(term)) for index, term in enumerate(terms, 1)]
    except EmError as exc:
        raise CommandError("".join(printed) + _em_failure(exc, w.words[begin:w.pos])
                           + 'Illegal "ematch"') from None
    return Attr(attr_type, (Attr(_TREE_HDR, struct.pack("=HH", len(terms) & 0xFFFF, _PROG_TC)),
                            Attr(_TREE_LIST, tuple(items))))


def _parse(lexer: Lexer) -> list[_Term] | None:
    """``input``: nothing (None), or an expression and whatever token ended it (a token other
    than END: bison's error recovery accepts what it has)."""
    token = lexer.token()
    if token is END:
        return None
    return _expr(lexer, token)[0]


def _expr(lexer: Lexer, token) -> tuple[list[_Term], object]:
    """``expr``, from its first token → (its terms, the token after it)."""
    chain = []
    while True:
        term = _term(lexer, token)
        chain.append(term)
        token = lexer.token()
        if token is not AND and token is not OR:
            return chain, token
        term.relation = _REL_AND if token is AND else _REL_OR
        token = lexer.token()


def _term(lexer: Lexer, token) -> _Term:
    """``match``: ``[not] KIND ( ARGS )`` or ``[not] ( EXPR )``; it reads nothing past its
    closing parenthesis (bison reduces there without a look-ahead)."""
    inverted = token is NOT
    if inverted:
        token = lexer.token()
    if token == "(":
        chain, token = _expr(lexer, lexer.token())
        if token != ")":
            raise _SyntaxError
        return _Term(None, inverted, chain)
    if token.__class__ is not Arg or lexer.token() != "(":
        raise _SyntaxError
    args = [token]
    while (token := lexer.token()).__class__ is Arg:
        args.append(token)
    if len(args) == 1 or token != ")":
        raise _SyntaxError
    return _Term(args, inverted)


def _flatten(chain: list[_Term]) -> list[_Term]:
    """``flatten_tree()``: the top-level terms, then each group's terms appended to the list as
    its group is met (depth first); a group refers to its first term's index."""
    terms = list(chain)

    def walk(level: list[_Term]) -> None:
        for term in level:
            if term.child is not None:
                term.ref = len(terms)
                terms.extend(term.child)
                walk(term.child)

    walk(chain)
    return terms


def _term_data(term: _Term) -> bytes:
    """One term's attribute payload, as ``parse_tree()`` writes it (each raw piece padded to 4,
    the padding counted in the term's length as ``addraw_l`` does)."""
    flags = term.relation | (_INVERT if term.inverted else 0)
    if term.args is None:
        return _HDR.pack(0, 0, flags, 0) + _REF.pack(term.ref)
    name = term.args[0].cstr()[:63].decode("utf-8", "surrogateescape")
    module = _module(name)
    number = _map_number(name, module.KIND_NUM)
    try:  # tc's parse_eopt_argv (ipt) takes the kind too, as getopt's program name
        data = module.parse_argv(term.args) if hasattr(module, "parse_argv") \
            else module.parse(term.args[1:])
    except EmError as exc:
        exc.where = (module, term.args[1:])
        raise
    return _HDR.pack(0, number & 0xFFFF, flags, 0) + data + bytes(-len(data) & 3)


def _module(name: str):
    """``get_ematch_kind()``: the kind's module; tc's words for an unknown one."""
    if name not in _MODULES:
        raise EmError(f'Unknown ematch "{name}"\n', report=False)
    return importlib.import_module(f"{__package__}.{_MODULES[name]}")


def _map_number(name: str, kind_num: int) -> int:
    """``lookup_map_id()``: the kind's number in tc's map, case-insensitively; tc's words when
    the map lacks it (or cannot be read)."""
    try:
        table, corrupt = _ematch_map()
    except OSError as exc:
        if exc.errno != errno.ENOENT:  # tc fails without a word of its own
            raise EmError("", report=False) from None
        table, corrupt = {}, None
    number = table.get(name.lower())
    if number is None and corrupt is not None:  # tc reads up to the name or the bad line
        raise EmError(corrupt, report=False)
    if number is None:
        raise EmError(f'Error: Unable to find ematch "{name}" in {EMATCH_MAP}\nPlease assign a '
                      f"unique ID to the ematch kind the suggested entry is:\n\t{kind_num}\t{name}\n",
                      report=False)
    return number


_MAP_LINE = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)[ \t\n\v\f\r]*([^ \t\n\v\f\r]+)")


@functools.cache  # read once per process (tc reads it per term)
def _ematch_map() -> tuple[dict[str, int], str | None]:
    """The map file as tc reads it: (names lower-cased → numbers, the first entry of a name
    winning; tc's line for the first corrupt entry, before which the names found count).
    OSError where the file cannot be opened."""
    table: dict[str, int] = {}
    with open(EMATCH_MAP, encoding="utf-8", errors="surrogateescape") as lines:
        for line in lines:
            text = line.lstrip(" \t")
            if not text or text[0] in "#\n":
                continue
            found = _MAP_LINE.match(text)
            if found is None:
                return table, f"ematch map {EMATCH_MAP} corrupted at {text}\n"
            table.setdefault(found.group(2).lower(), int(found.group(1)))
    return table, None


def _report(text: str, words: list[str], err: str | None = None) -> str:
    """``em_parse_error()``'s first lines: the text, the words read (the last one marked)."""
    head = f"{text}: {err}\n... " if err else f"{text}\n... "
    shown = "".join(f">>{word}<< " if n == len(words) - 1 else f"{word} "
                    for n, word in enumerate(words))
    return f"{head}{shown}...\n"


def _em_failure(exc: EmError, words: list[str]) -> str:
    """A kind's failure as tc prints it: its own lines, then (``PARSE_ERR``) the words, the
    kind's arguments with the one at fault marked, and the kind's usage."""
    if not exc.report:
        return exc.before + str(exc)
    module, args = exc.where
    text = exc.before + _report(str(exc), words)
    if exc.first is not None:
        marked = " ".join(f">>{arg.printable()}<<" if arg is exc.carg else arg.printable()
                          for arg in args[exc.first:])
        text += f"... {module.KIND}({marked})...\n"
    return text + module.USAGE

