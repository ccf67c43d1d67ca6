"""The batch reader's fast path: a message template per line *shape*.

Batch files repeat one line form with different numbers (``... index 1``, ``... index 2``, ...).
Parsing and encoding a line costs ~6 us of Python, twice the kernel's own work per message; a
template brings a repeated line down to one regex match (or, at a change of shape, one regex
split and a dict lookup) and one ``pack_into`` per field: ~1 us.

A line's shape is its text with the values of a few fixed-width fields cut out: the word after
``index``, ``prio``/``pref``, ``handle``, ``ht``, ``link``, u32's ``src``/``dst`` (the address;
a ``/LEN`` stays in the shape), flower's ``src_mac``/``dst_mac`` and ``classid``/``flowid``
(a class's id; a filter's target class). The second line of a shape
builds its template:

1. the full parser and encoder (:func:`.parse.parse_command`, ``Rule.message``) — the one
   definition of the bytes — encode the line;
2. each field is re-encoded with two probe values (the extremes of its range: all-ones and a
   mixed or zero pattern), and the template keeps the field only if each probe changed exactly
   the bytes the field's value predicts, at exactly one place, in one layout (host or network
   order); then all fields probed at once must match all patches applied together. A field that
   moves other bytes (a value that changes the message's structure, a u32 key merged with
   another on the same word) fails this and the shape stays on the full parser.

Lines the reader leaves unencoded (``actions add`` for the coalescer) get the same treatment one
step earlier: an :class:`ActionsTemplate` keeps the parsed rule, and a line's ``index`` values
rebuild the actions they belong to; the probes check the parser gives exactly that rule.

A field's value is used only when its token passes the check the parser would apply (syntax,
range, nonzero — zero turns some fields off); any other token, every shape with quotes, and every
shape without a template go through the full parser, so every error, and every odd value, is
judged by one parser. Templates live for one batch (the resolver's lifetime: device ifindexes
and program fds inside them stay valid), and both the template table and the once-seen shapes
are bounded, so memory stays flat whatever the file.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import socket
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from ..errors import BpfBatchError
from .message import LineError, Listing, Message, Parsed, undo_of
from .grammar import BATCH_STATE, DEVICES, PROGRAMS
from .linebuffer import LineBuffer
from .parse import CommandError, parse_command, parse_mac, parse_numbered, read_commands
from .resolve import Resolver
from . import rules as R
from .rules import Rule

_new_tuple = tuple.__new__
#: Shapes kept with a template (or marked as not templatable), and once-seen shapes remembered.
MAX_SHAPES = 1024
MAX_SEEN = 4096

#: `` KEYWORD VALUE``: the fields cut out of a shape. A value ends at blank or ``/`` and holds
#: no quote, so a line with quotes keeps them in its shape (and stays on the parser, which
#: splits quoted words differently).
_VALUE = r"([^\s/'\"]+)"
_FIELDS = re.compile(r" (index|prio|pref|priority|preference|handle|ht|link|src|dst|src_mac"
                     r"|dst_mac|classid|flowid) " + _VALUE)
_PREFIX = re.compile(r"/(\d+)(?:\s|$)")


# --- field values: token -> value, or None when the parser must judge the token ---------------


def _decimal(limit: int) -> Callable[[str], int | None]:
    """A decimal number 1..limit without leading zeros (read alike in base 10 and base 0)."""
    def value(token: str) -> int | None:
        if token.isdecimal() and token.isascii() and token[0] != "0":
            number = int(token)
            if number <= limit:
                return number
        return None
    return value


def _u32_id(with_node: bool) -> Callable[[str], int | None]:
    """u32 ``htid:bucket:node`` (lower-case hex; ``node`` empty for a table id), nonzero."""
    pattern = re.compile(r"([0-9a-f]{1,3}):([0-9a-f]{0,2}):" + ("([0-9a-f]{1,3})" if with_node else "()"))

    @functools.lru_cache(maxsize=4096)  # table ids repeat line after line (hash buckets)
    def value(token: str) -> int | None:
        found = pattern.fullmatch(token)
        if found is None:
            return None
        htid, bucket, node = (int(part, 16) if part else 0 for part in found.groups())
        return (htid << 20 | bucket << 12 | node) or None
    return value


_CLASSID = re.compile(r"([0-9a-f]{1,4}):([0-9a-f]{1,4})")


def _classid(token: str) -> int | None:
    """A classid ``MAJ:MIN`` (lower-case hex, both parts written), nonzero."""
    found = _CLASSID.fullmatch(token)
    if found is None:
        return None
    return (int(found.group(1), 16) << 16 | int(found.group(2), 16)) or None


def _ipv4(token: str) -> bytes | None:
    try:
        return socket.inet_pton(socket.AF_INET, token)
    except OSError:
        return None


class _Form(NamedTuple):
    """One kind of field: how its token reads, the probes that locate it, its layouts."""

    value: Callable[[str], int | bytes | None]
    probes: tuple[str, str]
    layouts: tuple[struct.Struct, ...]


_U32 = (struct.Struct("=I"),)
_INDEX = _Form(_decimal(0xFFFFFFFF), ("4294967295", "305419896"), _U32)
_PRIO = _Form(_decimal(0xFFFF), ("65535", "4660"), (struct.Struct("=H"),))
_HANDLE = _Form(_decimal(0xFFFFFFFF), ("4294967295", "305419896"), _U32)
_U32_HANDLE = _Form(_u32_id(True), ("fff:ff:fff", "123:45:678"), _U32)
_U32_TABLE = _Form(_u32_id(False), ("fff:ff:", "123:45:"), _U32)
_ADDRESS = _Form(_ipv4, ("255.255.255.255", "0.0.0.0"), (struct.Struct("4s"),))
_CLASS = _Form(_classid, ("fffe:fffe", "1234:5678"), _U32)
_MAC = _Form(parse_mac, ("ff:ff:ff:ff:ff:ff", "12:34:56:78:9a:bc"), (struct.Struct("6s"),))

#: The forms a keyword's value may take; the line that builds a template fixes which one.
_FORMS: dict[str, tuple[_Form, ...]] = {
    "index": (_INDEX,), "prio": (_PRIO,), "pref": (_PRIO,), "priority": (_PRIO,),
    "preference": (_PRIO,), "handle": (_HANDLE, _U32_HANDLE), "ht": (_U32_TABLE,),
    "link": (_U32_TABLE,), "src": (_ADDRESS,), "dst": (_ADDRESS,), "src_mac": (_MAC,),
    "dst_mac": (_MAC,), "classid": (_CLASS,), "flowid": (_CLASS,),
}


class _Slot(NamedTuple):
    """Where one field's value goes: token number, reader, layout, byte offset in the body."""

    token: int
    value: Callable[[str], int | bytes | None]
    pack_into: Callable
    offset: int


class MessageTemplate:
    """A shape's message with the offsets its fields are patched at, and ``line``: a pattern
    that matches exactly the lines of this shape, capturing their field tokens (one regex
    match is cheaper than splitting a line and looking its shape up)."""

    __slots__ = ("msg_type", "flags", "body", "slots", "line", "undo")

    def __init__(self, shape: tuple[str, ...], msg_type: int, flags: int, body: bytes,
                 slots: tuple[_Slot, ...]) -> None:
        self.msg_type, self.flags, self.body, self.slots = msg_type, flags, body, slots
        self.undo = undo_of(Message(msg_type, flags, body))
        self.line = _line_pattern(shape)

    def fill(self, tokens: list[str] | tuple[str, ...]) -> Message | None:
        """The message for these field tokens; None if a token must go to the parser."""
        body = bytearray(self.body)
        for token, value, pack_into, offset in self.slots:
            number = value(tokens[token])
            if number is None:
                return None
            pack_into(body, offset, number)
        return _new_tuple(Message, (self.msg_type, self.flags, body, self.undo, ""))  # no Python frame


class ActionsTemplate:
    """A shape of ``actions`` lines left unencoded (see ``TemplateReader``'s ``unencoded``):
    the parsed rule, and per field the action whose index it sets. A line is filled by building
    that action anew with the line's index and every other field as parsed — the rule the
    parser gives for the line, without parsing it (the probes in :func:`_build_actions` check
    that)."""

    __slots__ = ("verb", "actions", "makers", "line")

    def __init__(self, shape: tuple[str, ...], rule: R.Actions, owners: list[int]) -> None:
        self.verb, self.actions = rule.verb, rule.actions
        self.makers = tuple((owner, _index_maker(rule.actions[owner])) for owner in owners)
        self.line = _line_pattern(shape)

    def fill(self, tokens: list[str] | tuple[str, ...]) -> R.Actions | None:
        """The rule for these field tokens; None if a token must go to the parser."""
        actions = list(self.actions)
        for token, (owner, make) in zip(tokens, self.makers):
            index = _INDEX.value(token)
            if index is None:
                return None
            actions[owner] = make(index=index)
        return R.Actions(self.verb, tuple(actions))


def _index_maker(action) -> Callable[..., object]:
    """A constructor of ``action`` with every field but ``index`` bound (a partial call costs
    a fraction of ``dataclasses.replace``)."""
    return functools.partial(type(action), **{field.name: getattr(action, field.name)
                                              for field in dataclasses.fields(action)
                                              if field.name != "index"})


def _line_pattern(shape: tuple[str, ...]) -> re.Pattern:
    """A pattern matching exactly the lines of ``shape``, capturing their field tokens."""
    fields = "".join(re.escape(f" {shape[i]} ") + _VALUE + re.escape(shape[i + 1])
                     for i in range(1, len(shape), 2))
    return re.compile(re.escape(shape[0]) + fields)


#: What the parser gives in place of a rule: passed on as it is.
_NOT_RULES = (LineError, Listing)
#: Shapes the probes refused: they stay on the full parser.
_UNTEMPLATABLE = object()


class TemplateReader:
    """``(line, Parsed)`` per command of a batch: the line's encoded :class:`~.message.Message`
    (from a template where one fits, else from the parser and the rule's ``message()`` — the
    same bytes), or a :class:`~.message.LineError` naming NAME:LINE when the line is bad or
    names something that does not exist (a device, a pinned program).

    ``unencoded``: lines whose rule it accepts come out as the parsed rule, for a later stage
    to encode (the coalescer groups ``actions add`` lines before encoding); a repeated shape of
    them gets an :class:`ActionsTemplate`, which fills the rule without parsing the line.
    """

    def __init__(self, resolve: Resolver, unencoded: Callable[[Rule], bool] | None = None) -> None:
        self._resolve = resolve
        self._unencoded = unencoded
        self._templates: dict[tuple[str, ...], MessageTemplate | ActionsTemplate | object] = {}
        self._seen: set[tuple[str, ...]] = set()
        self._buffer = LineBuffer()  # tc's line buffer, for simple's sdata
        self._kept: dict = {LineBuffer: self._buffer}  # what parsers keep from line to line
        #: Lines filled from a template so far (the rest went through the parser).
        self.filled = 0

    def read(self, stream: Iterable[str], name: str) -> Iterator[tuple[int, Parsed | Rule]]:
        templates, split = self._templates, _FIELDS.split
        last = None  # the template of the last filled line: files repeat one shape in runs
        filled = 0  # counted locally and published when reading ends: this is the hot loop
        try:
            for number, text in read_commands(stream, self._buffer):
                if text is not None:
                    if last is not None:
                        found = last.line.fullmatch(text)
                        if found is not None:
                            message = last.fill(found.groups())
                            if message is not None:
                                filled += 1
                                yield number, message
                                continue
                    parts = split(text)
                    tokens = parts[2::3]
                    del parts[2::3]
                    shape = tuple(parts)
                    template = templates.get(shape)
                    if template is not None:
                        if template is not _UNTEMPLATABLE:
                            message = template.fill(tokens)
                            if message is not None:
                                last = template
                                filled += 1
                                yield number, message
                                continue
                    else:
                        yield number, self._first_lines(shape, tokens, number, text, name)
                        continue
                yield number, self._parsed(number, text, name)
        finally:
            self.filled += filled

    def _parsed(self, number: int, text: str | None, name: str) -> Parsed | Rule:
        """The full parser and encoder for one line (the rule itself if ``unencoded`` takes it)."""
        token = DEVICES.set(self._resolve.find_device)  # devices tc resolves while parsing
        programs = PROGRAMS.set(self._resolve)  # and programs it loads while parsing
        kept = BATCH_STATE.set(self._kept)
        self._buffer.used = False
        try:
            rule = parse_numbered(number, text, name)
        finally:
            BATCH_STATE.reset(kept)
            PROGRAMS.reset(programs)
            DEVICES.reset(token)
        if rule.__class__ in _NOT_RULES or (self._unencoded is not None and self._unencoded(rule)):
            return rule
        return encode_rule(rule, self._resolve, name, number)

    def _first_lines(self, shape: tuple[str, ...], tokens: list[str], number: int, text: str,
                     name: str) -> Parsed | Rule:
        """A shape without a template yet: parse; on its second line, build the template."""
        message = self._parsed(number, text, name)
        if message.__class__ in _NOT_RULES or (message.__class__ is Message and message.said) \
                or self._buffer.used:
            return message  # a template would not say what tc says while parsing the line,
            # nor copy what tc's line buffer holds after its words
        if shape not in self._seen:
            if len(self._seen) >= MAX_SEEN:
                self._seen.clear()
            self._seen.add(shape)
            return message
        if len(self._templates) >= MAX_SHAPES:
            return message
        forms = [_form_of(shape[1 + 2 * i], token) for i, token in enumerate(tokens)]
        if None in forms:
            return message  # a value the parser must judge: try again on a later line
        self._seen.discard(shape)
        template = None
        if not any('"' in part or "'" in part for part in shape):
            if message.__class__ is Message:
                template = _build(shape, tokens, forms, message, self._encode)
            else:  # a rule left unencoded
                template = _build_actions(shape, tokens, message, self._parse)
        self._templates[shape] = _UNTEMPLATABLE if template is None else template
        return message

    def _encode(self, text: str) -> Message | None:
        try:
            return parse_command(text).message(self._resolve)
        except (CommandError, BpfBatchError):
            return None

    @staticmethod
    def _parse(text: str) -> Rule | None:
        try:
            return parse_command(text)
        except (CommandError, BpfBatchError):
            return None


def encode_rule(rule, resolve: Resolver, source: str, line: int) -> Parsed:
    """``rule.message()``, or the :class:`~.message.LineError` its encoding raised (a device or
    program that does not exist), naming ``source:line``."""
    try:
        return Message(*rule.message(resolve))
    except BpfBatchError as exc:
        return LineError.at(exc, source, line)


def _form_of(keyword: str, token: str) -> _Form | None:
    return next((form for form in _FORMS[keyword] if form.value(token) is not None), None)


def _text(shape: tuple[str, ...], tokens: list[str]) -> str:
    """The command text of ``shape`` with these field tokens (the inverse of the split)."""
    out = [shape[0]]
    for i, token in enumerate(tokens):
        out += (" ", shape[1 + 2 * i], " ", token, shape[2 + 2 * i])
    return "".join(out)


def _build(shape: tuple[str, ...], tokens: list[str], forms: list[_Form],
           message: Message, encode: Callable[[str], Message | None]) -> MessageTemplate | None:
    """Locate every field by probing (see the module docs); None when any field is ambiguous."""
    msg_type, flags, body = message[:3]
    slots = []
    for i, form in enumerate(forms):
        value = _masked(form.value, shape[2 + 2 * i]) if form is _ADDRESS else form.value
        probed = []
        for probe in form.probes:
            reply = encode(_text(shape, tokens[:i] + [probe] + tokens[i + 1:]))
            if reply is None or reply[:2] != (msg_type, flags) or len(reply[2]) != len(body):
                return None
            probed.append((value(probe), reply[2]))
        place = _locate(body, value(tokens[i]), probed, form.layouts)
        if place is None:
            return None
        layout, offset = place
        slots.append(_Slot(i, value, layout.pack_into, offset))
    template = MessageTemplate(shape, msg_type, flags, bytes(body), tuple(slots))
    together = [form.probes[0] for form in forms]
    expected = template.fill(together)
    reply = encode(_text(shape, together))
    if expected is None or reply is None or reply[:2] != (msg_type, flags) \
            or bytes(expected[2]) != reply[2]:
        return None
    return template


def _build_actions(shape: tuple[str, ...], tokens: list[str], rule: Rule,
                   parse: Callable[[str], Rule | None]) -> ActionsTemplate | None:
    """An :class:`ActionsTemplate` when every field is an ``index`` that, probed with each of
    its probe values, changes exactly that value in exactly one action of the parsed rule (its
    own action for each field); then all fields probed at once must parse to what the template
    fills. None otherwise: the shape stays on the parser."""
    if rule.__class__ is not R.Actions or any(shape[1 + 2 * i] != "index" for i in range(len(tokens))):
        return None
    owners = []
    for i in range(len(tokens)):
        owner = None
        for probe in _INDEX.probes:
            probed = parse(_text(shape, tokens[:i] + [probe] + tokens[i + 1:]))
            if probed.__class__ is not R.Actions or probed.verb != rule.verb \
                    or len(probed.actions) != len(rule.actions):
                return None
            changed = [j for j, (ours, theirs) in enumerate(zip(rule.actions, probed.actions))
                       if ours != theirs]
            if len(changed) != 1 or owner not in (None, changed[0]) or \
                    dataclasses.replace(rule.actions[changed[0]], index=int(probe)) != probed.actions[changed[0]]:
                return None
            owner = changed[0]
        owners.append(owner)
    if len(set(owners)) != len(owners):
        return None
    template = ActionsTemplate(shape, rule, owners)
    together = [_INDEX.probes[0]] * len(tokens)
    if template.fill(together) != parse(_text(shape, together)):
        return None
    return template


def _masked(value: Callable[[str], bytes | None], after: str) -> Callable[[str], bytes | None]:
    """An address field followed by ``/LEN`` in its shape: the value the key holds is masked."""
    prefix = _PREFIX.match(after)
    if prefix is None or int(prefix.group(1)) >= 32:
        return value  # past 32 the parser refuses the line, and the probes fail
    mask = (0xFFFFFFFF << (32 - int(prefix.group(1)))) & 0xFFFFFFFF

    def masked(token: str) -> bytes | None:
        address = value(token)
        return None if address is None else (int.from_bytes(address, "big") & mask).to_bytes(4, "big")
    return masked


def _locate(body: bytes, value, probed: list[tuple[object, bytes]],
            layouts: tuple[struct.Struct, ...]) -> tuple[struct.Struct, int] | None:
    """The one (layout, offset) at which ``value`` sits in ``body`` such that writing each
    probe's value there gives exactly that probe's message; None if none or several."""
    found = []
    for layout in layouts:
        packed = layout.pack(value)
        offset = body.find(packed)
        while offset >= 0:
            end = offset + layout.size
            if all(probe_body == body[:offset] + layout.pack(probe) + body[end:]
                   for probe, probe_body in probed):
                found.append((layout, offset))
            offset = body.find(packed, offset + 1)
    return found[0] if len(found) == 1 else None
