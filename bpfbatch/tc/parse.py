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
from .htb import HtbClass, parse_rate, parse_size
from . import usage
from .message import LineError
from .usage import what_is

SUPPORTED = """\
qdisc add|del|replace dev DEV (ingress | clsact | [root | parent ID] [handle ID] htb [default N] [r2q N]
                                                                              [direct_qlen N])
class add|del|change|replace dev DEV [root | parent ID] classid ID
      [htb rate R [ceil R] [burst B] [cburst B] [mtu N] [mpu B] [prio N] [quantum N]]
filter add|del|change|replace dev DEV [ingress|egress|root|parent ID] [prio N] [protocol P]
       [chain N] [handle H] KIND ...
  u32 [match SELECTOR]... [sample SELECTOR [divisor N]] [ht H] [link H] [divisor N]
      [hashkey mask M at OFF] [classid ID] [indev DEV] [skip_hw|skip_sw] [action ...]
      SELECTOR := u32|u16|u8 VAL MASK [at [nexthdr+]OFF] | ip src|dst A.B.C.D[/LEN|/MASK]
                | ip sport|dport|protocol|tos|dsfield|ihl|precedence|icmp_type|icmp_code VAL MASK
                | tcp|udp src|dst VAL MASK | icmp type|code VAL MASK
  bpf [pinned|object-pinned|fd PATH | obj|object-file FILE [sec NAME] | bytecode 'N,c t f k,...']
      [da] [classid ID] [skip_hw|skip_sw] [action ...]
  matchall [skip_hw|skip_sw] [classid ID] [action ...]
  flower [skip_hw|skip_sw] [src_mac MAC] [dst_mac MAC] [classid ID] [action ...]
actions add|change|replace ACTION [ACTION ...]    actions del action KIND index N ...
ACTION := action (gact CONTROL | CONTROL) [index N] [cookie HEX] [no_percpu]
        | action mirred egress|ingress redirect|mirror [index N] dev DEV [CONTROL (mirror only)]
                 [index N] [cookie HEX] [no_percpu]
        | action mirred index N
CONTROL := drop|pass|ok|pipe|continue|reclassify | jump N | goto chain N"""


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
    """``get_qdisc_handle``: ``MAJ[:...]`` (hex)."""
    major = text.partition(":")[0]  # tc reads the major and ignores what follows the colon
    try:
        maj = _hex(major) if major else -1
    except ValueError:
        return None
    return maj << 16 if 0 <= maj < 1 << 16 else None


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
    """One or more ``action KIND ...`` groups, the cursor on the first ``action``.

    As in tc's ``parse_action``, a cookie stays set for the rest of the command: an action
    without one of its own carries the last one given before it (tc keeps one cookie buffer
    per command and never clears it)."""
    actions = []
    cookie = None
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
        action = _parse_action(w)
        if action.cookie is None:
            action.cookie = cookie
        cookie = action.cookie
        actions.append(action)
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
    """tc's ``u32_parse_opt``: its options in any order, its messages on failure (a bad value:
    ``Illegal "OPTION"``; an unknown word: ``What is "WORD"?`` and the usage)."""
    keys: list[R.U32Key] = []
    opts: dict = {}
    order: list[str] = []
    while (word := w.peek()) is not None:
        w.pos += 1
        if word == "match":
            keys.append(_u32_selector(w, 'Illegal "match"'))
        elif word == "sample":
            opts["sample"] = _u32_sample(w)
        elif word == "ht":
            opts["ht"] = _illegal_unless(parse_u32_handle(w.take("ht")), "ht")
        elif word == "link":
            link = opts["link"] = _illegal_unless(parse_u32_handle(w.take("link")), "link")
            if link & 0xFFF:
                raise CommandError('"link" must be a hash table.')
            order.append("link")
        elif word == "divisor":
            divisor = _unsigned(w.take("divisor"))
            if divisor is None or not 0 < divisor <= 0x100 or divisor & (divisor - 1):
                raise CommandError('Illegal "divisor"')
            opts["divisor"] = divisor
            order.append("divisor")
        elif word == "hashkey":
            opts["hashkey"] = _u32_hashkey(w)
        elif word in ("classid", "flowid"):
            opts["classid"] = _illegal_unless(parse_classid(w.take("classid")), "classid")
            order.append("classid")
        elif word == "indev":
            if "indev" in opts:
                raise CommandError(f'Error: duplicate "indev": "{w.peek()}" is the second value.',
                                   fatal=True)
            opts["indev"] = w.take("indev")
            order.append("indev")
        elif word in S.CLS_FLAGS:
            opts["flags"] = opts.get("flags", 0) | S.CLS_FLAGS[word]
        elif word in ("action", "actions"):
            w.pos -= 1
            opts["actions"] = _parse_actions(w)
            order.append("actions")
        else:
            raise CommandError(what_is(word, usage.U32))
    sample = opts.pop("sample", None)
    if sample is not None:
        opts["ht"] = sample | (opts.get("ht", 0) & 0xFFF00000)
    try:
        packed = R.pack_keys(keys)
    except InputError:
        raise CommandError('Illegal "match"') from None
    return R.U32(keys=tuple(packed), order=tuple(order), **opts)


def _illegal_unless(value, option: str):
    if value is None:
        raise CommandError(f'Illegal "{option}"')
    return value


def _unsigned(word: str | None, base: int = 0) -> int | None:
    """``get_u32``/``get_unsigned``: a C integer literal (base 0: 0x hex, 0 octal) up to 32 bits."""
    if not word or not word.isascii() or word[0] in "+-" or not word[-1].isalnum():
        return None
    try:
        if base == 0 and len(word) > 1 and word[0] == "0" and word[1] not in "xX":
            value = int(word, 8)
        else:
            value = int(word, base)
    except ValueError:
        return None
    return value if value <= 0xFFFFFFFF else None


def _u32_selector(w: _Words, failed: str) -> R.U32Key:
    """``parse_selector``: ``u32|u16|u8 VAL MASK [at [nexthdr+]OFF]``, ``ip FIELD ...``,
    ``tcp|udp src|dst VAL MASK``, ``icmp type|code VAL MASK``; CommandError(failed) otherwise."""
    layer = w.take("match type")
    try:
        if layer in ("u32", "u16", "u8"):
            val, mask = _u32_value_mask(w, failed)
            off, offmask = _u32_at(w, 0, 0, failed)
            return {"u32": R.u32_key, "u16": R.u16_key, "u8": R.u8_key}[layer](val, mask, off, offmask)
        if layer == "ip":
            field = w.take("ip field")
            if field in ("src", "dst"):
                addr, mask = R.ipv4_prefix(w.take("address"))
                off, offmask = _u32_at(w, 12 if field == "src" else 16, 0, failed)
                return R.U32Key(addr & mask, mask, off, offmask)
            if field in R.IP_FIELDS:
                build, off, offmask = R.IP_FIELDS[field]
                val, mask = _u32_value_mask(w, failed)
                off, offmask = _u32_at(w, off, offmask, failed)
                return build(val, mask, off, offmask)
        elif (layer, w.peek()) in R.L4_FIELDS:
            build, off = R.L4_FIELDS[layer, w.take("field")]
            val, mask = _u32_value_mask(w, failed)
            off, offmask = _u32_at(w, off, -1, failed)
            return build(val, mask, off, offmask)
    except InputError:
        pass
    raise CommandError(failed)


def _u32_value_mask(w: _Words, failed: str) -> tuple[int, int]:
    val, mask = _unsigned(w.peek()), None
    if val is not None:
        w.pos += 1
        mask = _unsigned(w.peek(), 16)
    if mask is None:
        raise CommandError(failed)
    w.pos += 1
    return val, mask


def _u32_at(w: _Words, off: int, offmask: int, failed: str) -> tuple[int, int]:
    """``parse_at``: ``at OFF``, ``at nexthdr+OFF`` or ``at nexthdr+ OFF`` (or nothing)."""
    if w.peek() != "at":
        return off, offmask
    w.pos += 1
    word = w.take("offset")
    if word.startswith("nexthdr+"):
        offmask, word = -1, word[len("nexthdr+"):] or w.take("offset")
    try:
        off = int(word, 0)
    except ValueError:
        raise CommandError(failed) from None
    if not -0x8000 <= off <= 0x7FFF:
        raise CommandError(failed)
    return off, offmask


def _u32_sample(w: _Words) -> int:
    """``sample SELECTOR [divisor N]``: the bucket (as an ``ht`` id's hash part) the kernel
    hashes a packet with that one key into — what tc computes for ``ht``."""
    key = _u32_selector(w, 'Illegal "sample"')
    divisor = 0x100
    if w.peek() == "divisor":
        w.pos += 1
        divisor = _unsigned(w.take("divisor"))
        if divisor is None or not 0 < divisor <= 0x100 or divisor & (divisor - 1):
            raise CommandError('Illegal sample "divisor"')
    mask = key.mask
    shift = (mask & -mask).bit_length() - 1 if mask else 0
    return (((key.val & mask) >> shift) % divisor) << 12


def _u32_hashkey(w: _Words) -> tuple[int, int]:
    """``hashkey mask M at OFF`` (``parse_hashkey``)."""
    if w.take("'mask'") != "mask":
        raise CommandError('Illegal "hashkey"')
    mask = _unsigned(w.take("hashkey mask"), 16)
    if mask is None or w.take("'at'") != "at":
        raise CommandError('Illegal "hashkey"')
    offset = _unsigned(w.take("hashkey offset"))
    if offset is None or offset % 4 or offset > 0x7FFF:  # hoff: a signed 16-bit field
        raise CommandError('Illegal "hashkey"')
    return mask, offset


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
    """bpf: a pinned program, classic BPF ``bytecode``, an object file (``obj FILE [sec
    NAME]``, loaded through the package's loader), or nothing (a ``del`` naming the filter)."""
    def extra(word: str, opts: dict) -> bool:
        if word in ("da", "direct-action"):
            opts["direct_action"] = True
        elif word in ("pinned", "object-pinned", "fd"):
            opts["pinned"] = w.take("pinned program path")
        elif word in ("bytecode", "bc"):
            opts["bytecode"] = _cbpf(w.take("bytecode"))
        elif word in ("obj", "object-file"):
            opts["object_file"] = w.take("object file")
        elif word in ("sec", "section"):
            opts["section"] = w.take("section")
        elif word in S.CLS_FLAGS:
            opts["flags"] = opts.get("flags", 0) | S.CLS_FLAGS[word]
        else:
            return False
        return True

    return R.BpfProg(**_parse_common(w, "bpf", extra))


def _cbpf(text: str) -> tuple[tuple[int, int, int, int], ...]:
    """tc's ``bytecode 'N,code jt jf k,...'`` → N instructions (``bpf_parse_string``)."""
    try:
        count, *insns = text.split(",")
        ops = tuple(tuple(int(part, 0) for part in insn.split()) for insn in insns)
        if int(count) != len(ops) or not 0 < len(ops) <= 4096 or any(
                len(op) != 4 or not (0 <= op[0] <= 0xFFFF and 0 <= op[1] <= 0xFF
                                     and 0 <= op[2] <= 0xFF and 0 <= op[3] <= 0xFFFFFFFF)
                for op in ops):
            raise ValueError(text)
    except ValueError:
        raise CommandError("Error parsing bytecode") from None
    return ops


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
            if w.peek() is not None:  # tc's ingress/clsact parsers take no option
                raise CommandError(what_is(w.peek(), f"Usage: ... {word}"))
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
        elif word == "direct_qlen":
            opts["direct_qlen"] = _illegal_unless(_unsigned(w.take("direct_qlen"), 10), "direct_qlen")
        else:
            raise CommandError(what_is(word, usage.HTB))
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


#: htb class size options (with tc's synonyms) → :class:`~.htb.HtbClass` fields.
_HTB_SIZES = {"burst": "burst", "buffer": "burst", "maxburst": "burst", "cburst": "cburst",
              "cbuffer": "cburst", "cmaxburst": "cburst", "mpu": "mpu"}


def _parse_htb_class(w: _Words) -> HtbClass:
    opts = {}
    while (word := w.peek()) is not None:
        w.pos += 1
        if word in ("rate", "ceil"):
            text = w.take(word)
            try:
                opts[word] = parse_rate(text)
            except InputError:
                raise CommandError(f"bad {word} '{text}'") from None
            if not opts[word]:  # below one byte per second: tc treats it as missing
                raise CommandError(f'"{word}" is required.')
        elif word == "prio":
            opts["prio"] = w.number("htb prio", 10)
        elif word == "quantum":
            opts["quantum"] = w.number("htb quantum", 10)
        elif word in _HTB_SIZES:
            name = _HTB_SIZES[word]
            try:
                opts[name] = parse_size(w.take(word))
            except InputError:
                raise CommandError(f'Illegal "{name}"') from None
        elif word == "mtu":
            opts["mtu"] = _illegal_unless(_unsigned(w.take("mtu"), 10), "mtu")
        else:
            raise CommandError(what_is(word, usage.HTB))
    if "rate" not in opts:
        raise CommandError("htb class needs 'rate RATE'")
    return HtbClass(**opts)


_PARENTS = {"root": S.TC_H_ROOT, "ingress": R.INGRESS, "egress": R.EGRESS}
_PRIO_WORDS = ("prio", "priority", "pref", "preference")


def _parse_filter(w: _Words) -> R.Filter:
    """tc_filter.c's options; its invalid-argument exits are fatal, as in tc."""
    verb = _verb(w.take("command"), ("add", "del", "change", "replace"))
    dev = None
    parent, prio, protocol, handle_text, chain = 0, 0, None, None, None
    classifier = None
    while (word := w.peek()) is not None:
        w.pos += 1
        if word == "dev":
            dev = w.take("device name")
        elif word in _PARENTS or word == "parent":
            if parent:
                raise CommandError(f'Error: "{word}" is duplicate parent ID')
            if word == "parent":
                parent = parse_classid(w.take("parent"))
                if parent is None:
                    raise _invalid(w.words[w.pos - 1], "Invalid parent ID")
            else:
                parent = _PARENTS[word]
        elif word in _PRIO_WORDS:
            prio = _unsigned(w.take("prio"))
            if prio is None or prio > 0xFFFF:
                raise _invalid(w.words[w.pos - 1], "invalid priority value")
        elif word == "protocol":
            protocol = S.protocol_number(w.take("protocol"))
            if protocol is None:
                raise _invalid(w.words[w.pos - 1], "invalid protocol")
        elif word == "chain":
            chain = _unsigned(w.take("chain"))
            if chain is None:
                raise _invalid(w.words[w.pos - 1], "invalid chain index value")
        elif word == "handle":
            handle_text = w.take("filter handle")
        elif word in _CLASSIFIERS:
            classifier = _CLASSIFIERS[word](w)
        else:
            raise CommandError(f"unsupported filter option or classifier '{word}'")
    if dev is None:
        raise CommandError("missing 'dev DEV'")
    return R.Filter(verb, dev, parent, classifier, prio, protocol,
                    _filter_handle(handle_text, classifier), chain)


def _invalid(word: str, what: str) -> CommandError:
    """tc's ``invarg()``: it prints this and exits."""
    return CommandError(f'Error: argument "{word}" is wrong: {what}', fatal=True)


def _filter_handle(text: str | None, classifier) -> int:
    """Each classifier reads its own handle: u32 ``htid:hash:node``, the others a number."""
    if text is None:
        return 0
    if isinstance(classifier, R.U32):
        return _u32_filter_id(text)
    value = _unsigned(text)
    if value is None:
        raise CommandError('Illegal "handle"')
    return value


def _u32_filter_id(text: str) -> int:
    value = parse_u32_handle(text)
    if value is None:
        raise CommandError("Illegal filter ID")
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
