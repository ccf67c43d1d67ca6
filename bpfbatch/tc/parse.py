"""iproute2 ``tc -batch`` files → :mod:`.rules` objects, streaming, one command at a time.

Reading follows iproute2's ``getcmdline()``/``makeargs()``: everything from ``#`` to the end of
a physical line is a comment (so a ``\\`` after a ``#`` continues nothing), a line ending in
``\\`` continues on the next one (joined without a space), words split on blanks with ``'``/``"``
quoting, blank commands skipped. A command's line number is the number of the *last* physical
line read for it — what tc prints in ``Command failed FILE:LINE``.

Grammar: the subset of ``tc qdisc``, ``tc filter`` and ``tc actions`` listed in
:data:`SUPPORTED`; command words may be abbreviated as tc allows (``f`` for ``filter``, ``del``
for ``delete``). Anything else is an :class:`~bpfbatch.errors.InputError` naming FILE:LINE and the
offending token — never a guess.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import TextIO

from ..errors import InputError
from . import rules as R
from . import specs as S
from .htb import HtbClass, parse_rate
from .message import LineError

SUPPORTED = """\
qdisc add|del|replace dev DEV (ingress | clsact | [root | parent ID] [handle ID] htb [default N] [r2q N])
class add|del|change|replace dev DEV [root | parent ID] classid ID [htb rate R [ceil R] [prio N] [quantum N]]
filter add|del|change|replace dev DEV [ingress|egress|root|parent ID] [prio N] [protocol P] [handle H] KIND ...
  u32 [match ip src|dst A.B.C.D[/LEN]] [match ip sport|dport|protocol|tos VAL MASK] [match u32 VAL MASK at OFF]
      [ht H] [link H] [divisor N] [hashkey mask M at OFF] [classid ID] [skip_hw|skip_sw] [action ...]
  bpf (pinned|object-pinned|fd) PATH [da] [classid ID] [action ...]
  matchall [skip_hw|skip_sw] [classid ID] [action ...]
  flower [skip_hw|skip_sw] [src_mac MAC] [dst_mac MAC] [classid ID] [action ...]
actions add|change|replace ACTION [ACTION ...]    actions del action KIND index N
ACTION := action (gact VERDICT | VERDICT) [index N] [no_percpu]
        | action mirred egress|ingress redirect|mirror dev DEV [index N] [VERDICT (mirror only)] [no_percpu]
VERDICT := drop|pass|ok|pipe|continue|reclassify"""


class CommandError(Exception):
    """A parse failure inside one command; :func:`parse_numbered` adds FILE:LINE. ``fatal``:
    tc's own parser exits on this input (``usage()``, ``invarg()``: status 255, the rest of
    the batch never read, even with ``-force``); otherwise tc reports the line and goes on."""

    def __init__(self, text: str, *, fatal: bool = False) -> None:
        super().__init__(text)
        self.fatal = fatal


def _matches(token: str, word: str) -> bool:
    """tc's ``matches()``: ``token`` is a non-empty prefix of ``word``."""
    return bool(token) and word.startswith(token)


def split_words(text: str) -> list[str]:
    """``makeargs()``: blank-separated words, a word opening with ``'``/``"`` runs to the same quote."""
    if "'" not in text and '"' not in text:
        return text.split()
    words, pos, end = [], 0, len(text)
    while pos < end:
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        if pos == end:
            break
        if text[pos] in "'\"":
            close = text.find(text[pos], pos + 1)
            if close < 0:
                raise CommandError("unterminated quoted string")
            words.append(text[pos + 1:close])
            pos = close + 1
        else:
            stop = pos
            while stop < end and text[stop] not in " \t\r\n":
                stop += 1
            words.append(text[pos:stop])
            pos = stop
    return words


def read_commands(lines: Iterable[str]) -> Iterator[tuple[int, str | None]]:
    """Yield ``(line_number, command_text)`` per logical command, numbered like tc; text None
    when the input ends inside a continuation (tc: "Missing continuation line")."""
    number = 0
    pending: list[str] = []
    for raw in lines:
        number += 1
        text = raw.split("#", 1)[0] if "#" in raw else raw
        if text.endswith("\\\n"):
            pending.append(text[:-2])
            continue
        if pending:
            pending.append(text)
            text = "".join(pending)
            pending.clear()
        if text and not text.isspace():
            yield number, text
    if pending:
        yield number, None


class _Words:
    """A cursor over one command's words, raising :class:`CommandError` with the offending token."""

    __slots__ = ("words", "pos")

    def __init__(self, words: list[str]) -> None:
        words.append(None)  # end sentinel: peek and take need no length check
        self.words = words
        self.pos = 0

    def peek(self) -> str | None:
        return self.words[self.pos]

    def take(self, what: str) -> str:
        word = self.words[self.pos]
        if word is None:
            raise CommandError(f"missing {what}")
        self.pos += 1
        return word

    def number(self, what: str, base: int = 0) -> int:
        word = self.take(what)
        try:
            value = int(word, base)
        except ValueError:
            raise CommandError(f"bad {what} '{word}'") from None
        if not 0 <= value <= 0xFFFFFFFF:
            raise CommandError(f"{what} out of range '{word}'")
        return value

    def handle(self, what: str, parse) -> int:
        word = self.take(what)
        value = parse(word)
        if value is None:
            raise CommandError(f"bad {what} '{word}'")
        return value


@functools.lru_cache(maxsize=4096)  # handles repeat across a file's lines
def parse_classid(text: str) -> int | None:
    """``get_tc_classid``: ``root``, ``none``, ``MAJ:MIN`` / ``MAJ:`` (hex), or a bare hex number."""
    if text == "root":
        return S.TC_H_ROOT
    if text == "none":
        return 0
    major, colon, minor = text.partition(":")
    try:
        maj = _hex(major)
        if not colon:
            return maj if major and maj <= 0xFFFFFFFF else None
        low = _hex(minor)
    except ValueError:
        return None
    if maj >= 1 << 16 or low >= 1 << 16:
        return None
    return maj << 16 | low


@functools.lru_cache(maxsize=4096)  # handles repeat across a file's lines
def parse_qdisc_handle(text: str) -> int | None:
    """``get_qdisc_handle``: ``MAJ:`` (hex)."""
    major, _, rest = text.partition(":")
    try:
        maj = _hex(major) if major else -1
    except ValueError:
        return None
    if maj < 0:
        return None
    return maj << 16 if not rest and maj < 1 << 16 else None


@functools.lru_cache(maxsize=4096)  # handles repeat across a file's lines
def parse_u32_handle(text: str) -> int | None:
    """``get_u32_handle``: ``HTID:HASH:NODE`` (hex, parts optional) or ``0x...``."""
    parts = text.split(":")
    try:
        if len(parts) == 1:
            return _hex(text) if text.startswith("0x") else None
        if len(parts) > 3:
            return None
        htid, bucket, node = (_hex(p) for p in (parts + ["", ""])[:3])
    except ValueError:
        return None
    if htid >= 0x1000 or bucket >= 0x100 or node >= 0x1000:
        return None
    return htid << 20 | bucket << 12 | node


def _hex(text: str) -> int:
    """A hex field, empty meaning 0 (``strtoul(..., 16)`` on a handle part)."""
    if not text:
        return 0
    if not text.isalnum() and not text.startswith("0x"):
        raise ValueError(text)
    return int(text, 16)


def _is_hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdefABCDEF" for c in text)


def parse_mac(text: str) -> bytes | None:
    """``aa:bb:cc:dd:ee:ff`` (one or two hex digits a part) → 6 bytes; None if malformed."""
    parts = text.split(":")
    if len(parts) != 6 or not all(1 <= len(p) <= 2 and _is_hex(p) for p in parts):
        return None
    return bytes(int(p, 16) for p in parts)


# --- actions -----------------------------------------------------------------------------------


#: Words that open an action right after another one (tc's gact takes a bare verdict).
_CONTROLS = frozenset((*S.GACT_VERDICTS, "jump", "goto"))
_ACTION_OPENERS = _CONTROLS | {"gact", "mirred"}
_MAX_COOKIE = 16  # TC_COOKIE_MAX_SIZE


def _parse_actions(w: _Words) -> tuple[R.Action, ...]:
    """One or more ``action KIND ...`` groups, the cursor on the first ``action``."""
    actions = []
    while True:
        word = w.peek()
        if word in ("action", "actions"):
            w.pos += 1
        elif word is None:
            break
        elif not (actions and word in _ACTION_OPENERS):
            # tc's parse_action takes any other word as the next action's kind; one it has no
            # module for falls to gact, whose usage() ends tc (status 255)
            raise CommandError(f"Bad action type {word}", fatal=True)
        actions.append(_parse_action(w))
    if len(actions) > S.TCA_ACT_MAX_PRIO:
        raise CommandError(f"more than {S.TCA_ACT_MAX_PRIO} actions")
    return tuple(actions)


def _action_failed(text: str, left: int, kind: str) -> CommandError:
    """A failure inside an action's own parser, followed by the lines tc's parse_action adds
    (``left``: the words from the action's kind to the end of the line, tc's argc there)."""
    return CommandError(f"{text}\nbad action parsing\nparse_action: bad value ({left}:{kind})!\n"
                        'Illegal "action"')


def _parse_action(w: _Words) -> R.Action:
    left = len(w.words) - 1 - w.pos
    kind = w.take("action kind")
    if kind == "mirred":
        action = _parse_mirred(w, left)
    elif kind == "gact" or kind in _ACTION_OPENERS:
        verdict = _control(w, w.take("gact verdict") if kind == "gact" else kind)
        if verdict is None:  # tc: gact's usage(), which exits
            raise CommandError(f"Bad action type {w.words[w.pos - 1]}", fatal=True)
        index = 0
        if w.peek() == "index":
            w.pos += 1
            index = w.number("action index", 10)
        action = R.Gact(verdict, index)
    else:
        raise CommandError(f"unsupported action '{kind}'")
    if w.peek() == "cookie":
        w.pos += 1
        action.cookie = _cookie(w.take("cookie"))
    if w.peek() == "no_percpu":
        w.pos += 1
        action.no_percpu = True
    return action


def _control(w: _Words, word: str) -> str | None:
    """A control verdict as tc's ``parse_action_control`` reads it: a word of
    :data:`~.specs.GACT_VERDICTS`, ``jump N`` or ``goto chain N`` (the cursor after ``word``);
    None if ``word`` is none of them."""
    if word in S.GACT_VERDICTS:
        return word
    if word == "jump":
        return f"jump {w.number('jump count', 10)}"
    if word == "goto":
        if w.take("'chain'") != "chain":
            raise CommandError("Bad action type goto", fatal=True)
        return f"goto chain {w.number('chain index', 10)}"
    return None


def _cookie(text: str) -> bytes:
    if len(text) > 2 * _MAX_COOKIE:
        raise CommandError(f'Error: argument "{text}" is wrong: {len(text)} Max allowed size '
                           f"{2 * _MAX_COOKIE}", fatal=True)
    try:
        if len(text) % 2:
            raise ValueError(text)
        return bytes.fromhex(text)
    except ValueError:
        raise CommandError(f'Error: argument "{text}" is wrong: cookie must be a hex string',
                           fatal=True) from None


def _parse_mirred(w: _Words, left: int) -> R.Mirred:
    """tc's ``parse_mirred``: direction, mode, ``index N`` and/or ``dev DEV``; for a mirror a
    control verdict after the device; ``index`` also after it. ``mirred index N`` alone names
    an existing action (tc sends it with nothing else set)."""
    if w.peek() == "index":
        w.pos += 1
        return R.Mirred("", "", 0, _mirred_index(w, left))
    direction = w.take("mirred direction")
    if direction not in ("egress", "ingress"):
        raise _action_failed(f"mirred option not supported {direction}", left, "mirred")
    mode = w.peek()
    if mode not in ("redirect", "mirror"):  # tc skips words it does not know, to the end
        raise CommandError('Command line is not complete. Try option "help"', fatal=True)
    w.pos += 1
    dev, index, verdict = None, 0, None
    while dev is None:
        word = w.peek()
        if word == "index" and not index:
            w.pos += 1
            index = _mirred_index(w, left)
        elif word == "dev":
            w.pos += 1
            dev = w.take("device name")
        else:
            raise CommandError('Command line is not complete. Try option "help"', fatal=True)
    if mode == "mirror" and w.peek() in _CONTROLS:
        w.pos += 1
        verdict = _control(w, w.words[w.pos - 1])
    if w.peek() == "index":
        if index:
            raise _action_failed('mirred: Illegal double index', left, "mirred")
        w.pos += 1
        index = _mirred_index(w, left)
    return R.Mirred(direction, mode, dev, index, verdict=verdict, tc_argc=left)


def _mirred_index(w: _Words, left: int) -> int:
    word = w.take("action index")
    if not (word.isdecimal() and word.isascii()) or int(word) > 0xFFFFFFFF:
        raise _action_failed('mirred: Illegal "index"', left, "mirred")
    return int(word)


def _parse_actions_command(w: _Words) -> R.Actions:
    verb = _verb(w.take("command"), ("add", "change", "replace", "del"))
    if verb == "del":
        refs = []
        while w.peek() in ("action", "actions"):
            w.pos += 1
            kind = w.take("action kind")
            if w.take("'index'") != "index":
                raise CommandError(f"expected 'index', got '{w.words[w.pos - 1]}'")
            refs.append(R.ActionRef(kind, w.number("action index", 10)))
        if w.peek() is not None:  # tc parses the rest as another action and finds no index
            raise CommandError("Error: no index specified action: gact")
        actions = tuple(refs)
    else:
        actions = _parse_actions(w)
    if not actions:
        raise CommandError(f"expected 'action', got '{w.peek()}'" if w.peek() else "missing action")
    return R.Actions(verb, actions)


# --- classifiers -------------------------------------------------------------------------------


def _parse_u32(w: _Words) -> R.U32:
    keys: list[R.U32Key] = []
    opts: dict = {}
    while (word := w.peek()) is not None:
        w.pos += 1
        if word == "match":
            keys.append(_parse_u32_match(w))
        elif word == "ht":
            opts["ht"] = w.handle("hash table id", parse_u32_handle)
        elif word == "link":
            opts["link"] = w.handle("link id", parse_u32_handle)
        elif word == "divisor":
            divisor = w.number("divisor")
            if not 0 < divisor <= 0x100 or divisor & (divisor - 1):
                raise CommandError(f"bad divisor '{divisor}' (a power of two up to 256)")
            opts["divisor"] = divisor
        elif word == "hashkey":
            if w.take("'mask'") != "mask":
                raise CommandError("hashkey needs 'mask M at OFF'")
            mask = w.number("hashkey mask", 16)
            if w.take("'at'") != "at":
                raise CommandError("hashkey needs 'mask M at OFF'")
            offset = w.number("hashkey offset")
            if offset > 0x7FFF:  # tc_u32_sel.hoff is a signed 16-bit field
                raise CommandError(f"hashkey offset out of range '{offset}'")
            opts["hashkey"] = (mask, offset)
        elif word in ("classid", "flowid"):
            opts["classid"] = w.handle("classid", parse_classid)
        elif word in S.CLS_FLAGS:
            opts["flags"] = opts.get("flags", 0) | S.CLS_FLAGS[word]
        elif word in ("action", "actions"):
            w.pos -= 1
            opts["actions"] = _parse_actions(w)
        else:
            raise CommandError(f"unsupported u32 option '{word}'")
    for what in ("ht", "link"):
        if opts.get(what, 0) & 0xFFF:
            raise CommandError(f"bad {what} id (node part must be empty)")
    try:
        packed = R.pack_keys(keys)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    return R.U32(keys=tuple(packed), **opts)


def _parse_u32_match(w: _Words) -> R.U32Key:
    layer = w.take("match type")
    if layer == "u32":
        val = w.number("match value")
        mask = w.number("match mask", 16)
        off = 0
        if w.peek() == "at":
            w.pos += 1
            off = w.number("match offset")
        if off % 4:
            raise CommandError(f"match offset {off} is not a multiple of 4")
        return R.U32Key(val & mask, mask, off)
    if layer != "ip":
        raise CommandError(f"unsupported match '{layer}'")
    field = w.take("ip field")
    try:
        if field in ("src", "dst"):
            return R.ip_match(field, w.take("address"))
        if field in ("sport", "dport", "protocol", "tos", "dsfield"):
            value = w.take(f"{field} value")
            return R.ip_match(field, value, w.number(f"{field} mask", 16))
    except ValueError as exc:
        raise CommandError(f"bad ip {field}: {exc}") from None
    raise CommandError(f"unsupported ip match '{field}'")


def _parse_common(w: _Words, kind: str, extra) -> dict:
    """The options shared by bpf, matchall and flower; ``extra(word, opts)`` handles the rest."""
    opts: dict = {}
    while (word := w.peek()) is not None:
        w.pos += 1
        if word in ("classid", "flowid"):
            opts["classid"] = w.handle("classid", parse_classid)
        elif word in ("action", "actions"):
            w.pos -= 1
            opts["actions"] = _parse_actions(w)
        elif not extra(word, opts):
            raise CommandError(f"unsupported {kind} option '{word}'")
    return opts


def _parse_bpf(w: _Words) -> R.BpfProg:
    def extra(word: str, opts: dict) -> bool:
        if word in ("da", "direct-action"):
            opts["direct_action"] = True
        elif word in ("pinned", "object-pinned", "fd"):
            opts["pinned"] = w.take("pinned program path")
        else:
            return False
        return True

    opts = _parse_common(w, "bpf", extra)
    if "pinned" not in opts:
        raise CommandError("bpf needs 'pinned PATH' (object files are not loaded here)")
    return R.BpfProg(**opts)


def _flags_only(word: str, opts: dict) -> bool:
    if word not in S.CLS_FLAGS:
        return False
    opts["flags"] = opts.get("flags", 0) | S.CLS_FLAGS[word]
    return True


def _parse_matchall(w: _Words) -> R.Matchall:
    return R.Matchall(**_parse_common(w, "matchall", _flags_only))


def _parse_flower(w: _Words) -> R.Flower:
    def extra(word: str, opts: dict) -> bool:
        if word in ("src_mac", "dst_mac"):
            opts[word] = w.handle("MAC address", parse_mac)
            return True
        return _flags_only(word, opts)

    return R.Flower(**_parse_common(w, "flower", extra))


_CLASSIFIERS = {"u32": _parse_u32, "bpf": _parse_bpf, "matchall": _parse_matchall,
                "flower": _parse_flower}


# --- commands ----------------------------------------------------------------------------------


def _verb(word: str | None, allowed: tuple[str, ...]) -> str:
    if word in allowed:
        return word
    for verb in allowed:
        if word and (_matches(word, verb) or (verb == "del" and _matches(word, "delete"))):
            return verb
    raise CommandError(f"unsupported command '{word}'" if word else "missing command")


def _placement(w: _Words, word: str, where: dict) -> bool:
    """``dev DEV``, ``root``, ``parent ID`` — where a qdisc or class goes. False: not one of these."""
    if word == "dev":
        where["dev"] = w.take("device name")
    elif word == "root":
        where["parent"] = S.TC_H_ROOT
    elif word == "parent":
        where["parent"] = w.handle("parent", parse_classid)
    else:
        return False
    return True


def _parse_qdisc(w: _Words) -> R.Qdisc:
    verb = _verb(w.take("command"), ("add", "del", "replace"))
    where = {"parent": S.TC_H_ROOT}
    handle, kind = 0, None
    while (word := w.peek()) is not None:
        w.pos += 1
        if _placement(w, word, where):
            continue
        if word == "handle":
            handle = w.handle("qdisc handle", parse_qdisc_handle)
        elif word in ("ingress", "clsact"):
            kind = word
        elif word == "htb":
            kind = _parse_htb(w)
        else:
            raise CommandError(f"unsupported qdisc option or kind '{word}'")
    if "dev" not in where:
        raise CommandError("missing 'dev DEV'")
    return R.Qdisc(verb, where["dev"], kind, where["parent"], handle)


def _parse_htb(w: _Words) -> R.Htb:
    opts = {}
    while (word := w.peek()) is not None:
        w.pos += 1
        if word == "default":
            opts["default"] = w.number("htb default", 16)
        elif word == "r2q":
            opts["r2q"] = w.number("htb r2q", 10)
        else:
            raise CommandError(f"unsupported htb option '{word}'")
    return R.Htb(**opts)


def _parse_class(w: _Words) -> R.Class:
    verb = _verb(w.take("command"), ("add", "del", "change", "replace"))
    where = {"parent": 0}
    classid, kind = None, None
    while (word := w.peek()) is not None:
        w.pos += 1
        if _placement(w, word, where):
            continue
        if word == "classid":
            classid = w.handle("classid", parse_classid)
        elif word == "htb":
            kind = _parse_htb_class(w)
        else:
            raise CommandError(f"unsupported class option or kind '{word}'")
    if "dev" not in where:
        raise CommandError("missing 'dev DEV'")
    if classid is None:
        raise CommandError("missing 'classid ID'")
    return R.Class(verb, where["dev"], classid, kind, where["parent"])


def _parse_htb_class(w: _Words) -> HtbClass:
    opts = {}
    while (word := w.peek()) is not None:
        w.pos += 1
        if word in ("rate", "ceil"):
            text = w.take(word)
            try:
                opts[word] = parse_rate(text)
            except ValueError:
                raise CommandError(f"bad {word} '{text}'") from None
            if not opts[word]:  # below one byte per second: tc treats it as missing
                raise CommandError(f'"{word}" is required.')
        elif word == "prio":
            opts["prio"] = w.number("htb prio", 10)
        elif word == "quantum":
            opts["quantum"] = w.number("htb quantum", 10)
        else:
            raise CommandError(f"unsupported htb class option '{word}'")
    if "rate" not in opts:
        raise CommandError("htb class needs 'rate RATE'")
    return HtbClass(**opts)


_PARENTS = {"root": S.TC_H_ROOT, "ingress": R.INGRESS, "egress": R.EGRESS}
_PRIO_WORDS = ("prio", "priority", "pref", "preference")


def _parse_filter(w: _Words) -> R.Filter:
    verb = _verb(w.take("command"), ("add", "del", "change", "replace"))
    dev = None
    parent, prio, protocol, handle_text = 0, 0, None, None
    classifier = None
    while (word := w.peek()) is not None:
        w.pos += 1
        if word == "dev":
            dev = w.take("device name")
        elif word in _PARENTS:
            if parent:
                raise CommandError(f"duplicate parent '{word}'")
            parent = _PARENTS[word]
        elif word == "parent":
            if parent:
                raise CommandError("duplicate parent 'parent'")
            parent = w.handle("parent", parse_classid)
        elif word in _PRIO_WORDS:
            prio = w.number("prio")
            if prio > 0xFFFF:
                raise CommandError(f"prio out of range '{prio}'")
        elif word == "protocol":
            protocol = _protocol(w.take("protocol"))
        elif word == "handle":
            handle_text = w.take("filter handle")
        elif word in _CLASSIFIERS:
            classifier = _CLASSIFIERS[word](w)
        else:
            raise CommandError(f"unsupported filter option or classifier '{word}'")
    if dev is None:
        raise CommandError("missing 'dev DEV'")
    return R.Filter(verb, dev, parent, classifier, prio, protocol,
                    _filter_handle(handle_text, classifier))


def _protocol(word: str) -> int:
    if word in S.PROTOCOLS:
        return S.PROTOCOLS[word]
    try:
        value = int(word, 0)
    except ValueError:
        raise CommandError(f"unsupported protocol '{word}'") from None
    if not 0 <= value <= 0xFFFF:
        raise CommandError(f"protocol out of range '{word}'")
    return value


def _filter_handle(text: str | None, classifier) -> int:
    if text is None:
        return 0
    if isinstance(classifier, R.U32):
        value = parse_u32_handle(text)
    else:
        try:
            value = int(text, 0)
        except ValueError:
            value = None
    if value is None or not 0 <= value <= 0xFFFFFFFF:
        raise CommandError(f"bad filter handle '{text}'")
    return value


#: Command groups in tc's order of precedence for abbreviations ("a" is actions).
_GROUPS = {"qdisc": _parse_qdisc, "class": _parse_class, "filter": _parse_filter,
           "actions": _parse_actions_command}


def parse_command(text: str) -> R.Rule:
    """One command line (without a leading ``tc``) → a rule; ``CommandError`` on anything unsupported."""
    w = _Words(split_words(text))
    group = w.take("command")
    parse = _GROUPS.get(group)
    if parse is None:
        parse = next((p for word, p in _GROUPS.items() if _matches(group, word)), None)
        if parse is None:
            raise CommandError(f"unsupported command '{group}'")
    return parse(w)


def parse_numbered(number: int, text: str | None, name: str) -> R.Rule | LineError:
    """One command of :func:`read_commands` → its rule, or the :class:`~.message.LineError`
    naming ``NAME:LINE`` (returned, not raised, so the caller decides whether to go on)."""
    try:
        if text is None:
            raise CommandError("Missing continuation line")
        return parse_command(text)
    except CommandError as exc:
        return LineError(InputError(str(exc), obj=f"{name}:{number}"), exc.fatal)


def parse_batch(stream: TextIO | Iterable[str], name: str) -> Iterator[tuple[int, R.Rule | LineError]]:
    """Yield ``(line_number, rule)`` per command; a bad command yields a
    :class:`~.message.LineError` naming ``NAME:LINE`` in place of the rule."""
    for number, text in read_commands(stream):
        yield number, parse_numbered(number, text, name)
