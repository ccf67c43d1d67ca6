"""u32 (``f_u32.c``): selectors, hash tables, links, classid, actions; its usage and words."""

from __future__ import annotations

from ...errors import InputError
from .. import rules as R
from .. import specs as S
from ..action_list import incomplete
from ..grammar import (CommandError, Words, illegal_unless, ipv4_prefix, matches, parse_classid,
                       parse_u32_handle, unsigned, what_is)
from ..numbers import integer
from . import police
from .common import action_list, police_failed

NAMES = ("u32",)

USAGE = """\
Usage: ... u32 [ match SELECTOR ... ] [ link HTID ] [ classid CLASSID ]
               [ action ACTION_SPEC ] [ offset OFFSET_SPEC ]
               [ ht HTID ] [ hashkey HASHKEY_SPEC ]
               [ sample SAMPLE ] [skip_hw | skip_sw]
or         u32 divisor DIVISOR

Where: SELECTOR := SAMPLE SAMPLE ...
       SAMPLE := { ip | ip6 | udp | tcp | icmp | u{32|16|8} | mark }
                 SAMPLE_ARGS [ divisor DIVISOR ]
       FILTERID := X:Y:Z

NOTE: CLASSID is parsed at hexadecimal input."""


def parse_filter(w: Words) -> R.U32:
    """tc's ``u32_parse_opt``: its options in any order, its messages on failure (a bad value:
    ``Illegal "OPTION"``; an unknown word: ``What is "WORD"?`` and the usage)."""
    keys: list[R.U32Key] = []
    opts: dict = {}
    order: list[str] = []
    while (word := w.peek()) is not None:
        w.pos += 1
        if word == "match":
            keys.append(_selector(w, 'Illegal "match"'))
        elif word == "sample":
            opts["sample"] = _sample(w)
        elif word == "ht":
            opts["ht"] = illegal_unless(parse_u32_handle(_option_value(w)), "ht")
        elif word == "link":
            link = opts["link"] = illegal_unless(parse_u32_handle(_option_value(w)), "link")
            if link & 0xFFF:
                raise CommandError('"link" must be a hash table.')
            order.append("link")
        elif word == "divisor":
            divisor = unsigned(_option_value(w))
            if divisor is None or not 0 < divisor <= 0x100 or divisor & (divisor - 1):
                raise CommandError('Illegal "divisor"')
            opts["divisor"] = divisor
            order.append("divisor")
        elif word == "hashkey":
            opts["hashkey"] = _hashkey(w)
        elif word in ("classid", "flowid"):
            if "classid" in opts:
                opts["earlier_classids"] = (*opts.get("earlier_classids", ()), opts["classid"])
            opts["classid"] = illegal_unless(parse_classid(_option_value(w)), "classid")
            order.append("classid")
        elif word == "indev":
            if "indev" in opts:
                raise CommandError(f'Error: duplicate "indev": "{w.peek()}" is the second value.',
                                   fatal=True)
            if w.peek() is None:  # tc checks for it itself
                raise CommandError("Illegal indev")
            opts["indev"] = w.take("indev")
            order.append("indev")
        elif word in S.CLS_FLAGS:
            opts["flags"] = opts.get("flags", 0) | S.CLS_FLAGS[word]
        elif matches(word, "action"):
            w.pos -= 1
            if "actions" in opts:
                opts["earlier_actions"] = (*opts.get("earlier_actions", ()), opts["actions"])
            opts["actions"] = action_list(w)
            order.append("actions")
        elif matches(word, "police"):
            if w.peek() is None:
                raise incomplete()
            opts["police"] = police.parse_police(w, police_failed)
            order.append("police")
        elif word == "help":  # f_u32.c: the usage alone, and the line fails
            raise CommandError(USAGE)
        else:
            raise CommandError(what_is(word, USAGE))
    sample = opts.pop("sample", None)
    if sample is not None:
        opts["ht"] = sample | (opts.get("ht", 0) & 0xFFF00000)
    try:
        packed = R.pack_keys(keys)
    except InputError:
        raise CommandError('Illegal "match"') from None
    return R.U32(keys=tuple(packed), order=tuple(order), **opts)


def _option_value(w: Words) -> str:
    """An option's value, the cursor past the option word: tc's ``NEXT_ARG()`` (at the end of
    the line tc ends with "Command line is not complete")."""
    if w.peek() is None:
        raise incomplete()
    return w.take("value")


def parse_handle(text: str | None, classifier: R.U32 | None) -> int:
    """A u32 filter's ``handle``: ``htid:hash:node``. u32 reads it after its options, so the
    check before them (``classifier`` None) says nothing."""
    if text is None or classifier is None:
        return 0
    value = parse_u32_handle(text)
    if value is None:
        raise CommandError("Illegal filter ID")
    return value


def _selector(w: Words, failed: str) -> R.U32Key:
    """``parse_selector``: ``u32|u16|u8 VAL MASK [at [nexthdr+]OFF]``, ``ip FIELD ...``,
    ``tcp|udp src|dst VAL MASK``, ``icmp type|code VAL MASK``; CommandError(failed) otherwise."""
    layer = w.take("match type")
    try:
        if layer in ("u32", "u16", "u8"):
            val, mask = _value_mask(w, failed)
            off, offmask = _at(w, 0, 0, failed)
            return {"u32": R.u32_key, "u16": R.u16_key, "u8": R.u8_key}[layer](val, mask, off, offmask)
        if layer == "ip":
            field = w.take("ip field")
            if field in ("src", "dst"):
                prefix = ipv4_prefix(w.take("address"))  # get_prefix_1(AF_INET): tc's numbers
                if prefix is None:
                    raise CommandError(failed)
                addr, bits = int.from_bytes(prefix[0], "big"), prefix[1]
                mask = 0xFFFFFFFF << (32 - bits) & 0xFFFFFFFF if bits else 0
                off, offmask = _at(w, 12 if field == "src" else 16, 0, failed)
                return R.U32Key(addr & mask, mask, off, offmask)
            if field in R.IP_FIELDS:
                build, off, offmask = R.IP_FIELDS[field]
                val, mask = _value_mask(w, failed)
                off, offmask = _at(w, off, offmask, failed)
                return build(val, mask, off, offmask)
        elif (layer, w.peek()) in R.L4_FIELDS:
            build, off = R.L4_FIELDS[layer, w.take("field")]
            val, mask = _value_mask(w, failed)
            off, offmask = _at(w, off, -1, failed)
            return build(val, mask, off, offmask)
    except InputError:
        pass
    raise CommandError(failed)


def _value_mask(w: Words, failed: str) -> tuple[int, int]:
    val, mask = unsigned(w.peek()), None
    if val is not None:
        w.pos += 1
        mask = unsigned(w.peek(), 16)
    if mask is None:
        raise CommandError(failed)
    w.pos += 1
    return val, mask


def _at(w: Words, off: int, offmask: int, failed: str) -> tuple[int, int]:
    """``parse_at``: ``at OFF``, ``at nexthdr+OFF`` or ``at nexthdr+ OFF`` (or nothing)."""
    if w.peek() != "at":
        return off, offmask
    w.pos += 1
    word = w.take("offset")
    if word.startswith("nexthdr+"):
        offmask, word = -1, word[len("nexthdr+"):] or w.take("offset")
    off = integer(word)  # get_integer
    if off is None or not -0x8000 <= off <= 0x7FFF:
        raise CommandError(failed)
    return off, offmask


def _sample(w: Words) -> int:
    """``sample SELECTOR [divisor N]``: the bucket (as an ``ht`` id's hash part) the kernel
    hashes a packet with that one key into — what tc computes for ``ht``."""
    key = _selector(w, 'Illegal "sample"')
    divisor = 0x100
    if w.peek() == "divisor":
        w.pos += 1
        divisor = unsigned(_option_value(w))
        if divisor is None or not 0 < divisor <= 0x100 or divisor & (divisor - 1):
            raise CommandError('Illegal sample "divisor"')
    mask = key.mask
    shift = (mask & -mask).bit_length() - 1 if mask else 0
    return (((key.val & mask) >> shift) % divisor) << 12


def _hashkey(w: Words) -> tuple[int, int]:
    """``hashkey mask M at OFF`` (``parse_hashkey``)."""
    if w.take("'mask'") != "mask":
        raise CommandError('Illegal "hashkey"')
    mask = unsigned(w.take("hashkey mask"), 16)
    if mask is None or w.take("'at'") != "at":
        raise CommandError('Illegal "hashkey"')
    offset = unsigned(w.take("hashkey offset"))
    if offset is None or offset % 4 or offset > 0x7FFF:  # hoff: a signed 16-bit field
        raise CommandError('Illegal "hashkey"')
    return mask, offset
