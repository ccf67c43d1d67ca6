"""State objects (:mod:`.state`) written as ``tc -b`` lines: adds for ``tc dump``, deletes
for ``tc apply``'s plan.

An add line is written so that the batch reader encodes it back to the same object (the dump
checks every line that way, :func:`checked_adds`): rates in bit/s, bursts in the bytes that give
the kernel's ticks back, u32 keys as ``match u32 VAL MASK at [nexthdr+]OFF``, root-table key
nodes as ``handle ::NODE`` (the kernel puts them in whatever root the instance has).
"""

from __future__ import annotations

import socket

from ..errors import BpfBatchError
from . import specs as S
from .htb import _psched, xmittime
from .state import ROOT, TcObject

_PROTOCOL_NAMES = {S.ETH_P_IP: "ip", S.ETH_P_IPV6: "ipv6", S.ETH_P_ALL: "all",
                   S.ETH_P_ARP: "arp", S.ETH_P_8021Q: "802.1q"}
#: mirred's (eaction) → words, and the verdict tc gives each mode when none is written.
_MIRRED = {1: ("egress", "redirect"), 2: ("egress", "mirror"), 3: ("ingress", "redirect"),
           4: ("ingress", "mirror")}
_MIRRED_DEFAULT = {"redirect": S.Verdict.STOLEN, "mirror": S.Verdict.PIPE}
_VERDICT_WORDS = {S.Verdict.OK: "pass", S.Verdict.SHOT: "drop", S.Verdict.PIPE: "pipe",
                  S.Verdict.RECLASSIFY: "reclassify", S.Verdict.UNSPEC: "continue",
                  S.Verdict.TRAP: "trap"}


class Unwritable(BpfBatchError):
    """An object no tc line can make exactly as the kernel holds it."""


def handle(value: int) -> str:
    """A qdisc handle or classid as tc writes it (hex ``MAJ:MIN``, ``MAJ:`` for a qdisc)."""
    major, minor = value >> 16, value & 0xFFFF
    return f"{major:x}:" if not minor else f"{major:x}:{minor:x}"


def parent_words(parent: int, classid: int | None = None) -> str:
    """``root``, ``ingress`` or ``parent MAJ:MIN``; a top class's parent is its qdisc."""
    if parent == S.TC_H_ROOT and classid is not None:
        parent = classid & 0xFFFF0000
    if parent == S.TC_H_ROOT:
        return "root"
    if parent == S.TC_H_INGRESS:
        return "ingress"
    return f"parent {handle(parent)}"


def protocol(info_protocol: int) -> str:
    number = socket.ntohs(info_protocol)
    return _PROTOCOL_NAMES.get(number, f"0x{number:04x}")


def _u32_id(table, bucket: int = 0, node: int | None = None) -> str:
    head = "" if table == ROOT else f"{table:x}"
    return f"{head}:{bucket:x}:".replace(":0:", "::") + (f"{node:x}" if node else "")


def _bytes_for_ticks(rate: int, ticks: int, what: str) -> int:
    """The burst in bytes that tc turns back into ``ticks`` at ``rate`` (its
    ``tc_calc_xmittime``); Unwritable when no byte count does."""
    tick_in_usec = _psched()[0]
    guess = int(ticks / tick_in_usec * rate / 1e6)
    for size in sorted(range(max(guess - 64, 0), guess + 64), key=lambda s: abs(s - guess)):
        if xmittime(rate, size) == ticks:
            return size
    raise Unwritable(f"no {what} in bytes gives {ticks} ticks at {rate} bytes/s")


def _sel(sel: bytes) -> list[str]:
    """A u32 selector's words: its keys, hashkey, offset; Unwritable for what tc cannot say."""
    flags, offshift, nkeys, offmask, off, offoff, hoff = S.TC_U32_SEL.unpack_from(sel, 0)
    hmask = S.BE32.unpack_from(sel, S.TC_U32_SEL.size)[0]
    words = []
    first = S.TC_U32_SEL.size + 4
    for i in range(nkeys):
        mask, val = S.TC_U32_KEY_MATCH.unpack_from(sel, first + 16 * i)
        koff, koffmask = S.TC_U32_KEY_AT.unpack_from(sel, first + 16 * i + 8)
        at = {0: "", -1: "nexthdr+"}.get(koffmask)
        if at is None:
            raise Unwritable(f"u32 key offmask {koffmask}")
        words += ["match", "u32", f"0x{val:08x}", f"0x{mask:08x}", "at", f"{at}{koff}"]
    if hmask:
        words += ["hashkey", "mask", f"0x{hmask:08x}", "at", str(hoff)]
    if flags & ~S.TC_U32_TERMINAL or offshift or offmask or off or offoff:
        raise Unwritable("u32 offset selectors")
    return words


def _actions(actions: tuple, names: dict[int, str]) -> list[str]:
    words = []
    for kind, index, params in actions:
        if params is None:
            words += ["action", kind, "index", str(index)]
            continue
        verdict, eaction, ifindex = params
        direction, mode = _MIRRED[eaction]
        words += ["action", "mirred", direction, mode, "dev", names.get(ifindex, str(ifindex))]
        if verdict != _MIRRED_DEFAULT[mode]:
            word = _VERDICT_WORDS.get(verdict)
            if word is None or mode != "mirror":
                raise Unwritable(f"mirred {mode} with verdict {verdict}")
            words.append(word)
        if index is not None:
            words += ["index", str(index)]
    return words


def _filter_head(verb: str, key: tuple, names: dict[int, str]) -> list[str]:
    ifindex, parent, chain, prio, proto = key[:5]
    words = ["filter", verb, "dev", names[ifindex], parent_words(parent), "protocol",
             protocol(proto), "prio", str(prio)]
    if chain:
        words += ["chain", str(chain)]
    return words


def add_line(obj: TcObject, names: dict[int, str], verb: str = "add", root: int | None = None
             ) -> str:
    """The line that adds ``obj`` (``verb``: add, or the verb that changes it in place); a
    u32 key node of a root table is named ``::NODE``, or ``ROOT::NODE`` given the root's id."""
    if obj.kind == "action":
        kind, index = obj.key
        return " ".join(["actions", verb, *_actions(((kind, index, obj.spec[0]),), names)])
    if obj.kind == "qdisc":
        ifindex, qhandle = obj.key
        parent, kind, *opts = obj.spec
        if kind == "ingress":
            return f"qdisc {verb} dev {names[ifindex]} ingress"
        r2q, defcls, direct_qlen = opts
        words = ["qdisc", verb, "dev", names[ifindex], parent_words(parent), "handle",
                 handle(qhandle), "htb", "default", f"{defcls:x}", "r2q", str(r2q)]
        if direct_qlen is not None:
            words += ["direct_qlen", str(direct_qlen)]
        return " ".join(words)
    if obj.kind == "class":
        ifindex, classid = obj.key
        (parent, rate, ceil, buffer, cbuffer, quantum, prio, overhead, mpu, linklayer,
         c_overhead, c_mpu, c_linklayer, _inner) = obj.spec
        if overhead or c_overhead or linklayer != 1 or c_linklayer != 1 or mpu != c_mpu:
            raise Unwritable("htb overhead or link layer options")
        words = ["class", verb, "dev", names[ifindex], parent_words(parent, classid), "classid",
                 handle(classid), "htb", "rate", f"{rate * 8}bit", "ceil", f"{ceil * 8}bit",
                 "burst", str(_bytes_for_ticks(rate, buffer, "burst")),
                 "cburst", str(_bytes_for_ticks(ceil, cbuffer, "cburst"))]
        if quantum is not None:
            words += ["quantum", str(quantum), "prio", str(prio)]
        if mpu:
            words += ["mpu", str(mpu)]
        return " ".join(words)
    table, bucket, node = obj.key[5:]
    if obj.kind == "ht":
        return " ".join([*_filter_head(verb, obj.key, names), "handle", f"{table:x}:", "u32",
                         "divisor", str(obj.spec[0])])
    sel, classid, link, flags, indev, actions = obj.spec
    if node is None:
        raise Unwritable("a u32 key node without a handle")
    named = table if table != ROOT or root is None else root
    words = [*_filter_head(verb, obj.key, names), "handle", _u32_id(named, bucket, node), "u32"]
    if table != ROOT:
        words += ["ht", _u32_id(table, bucket)]
    words += _sel(sel)
    if link is not None:
        words += ["link", _u32_id(link)]
    if classid:
        words += ["classid", handle(classid)]
    if indev:
        words += ["indev", indev]
    words += [word for bit, word in ((1, "skip_hw"), (2, "skip_sw")) if flags & bit]
    words += _actions(actions, names)
    return " ".join(words)


def delete_line(obj: TcObject, names: dict[int, str], root_ids: dict[tuple, int]) -> str:
    """The line that deletes live ``obj`` (a u32 root-table node named by its real handle)."""
    if obj.kind == "action":
        kind, index = obj.key
        return f"actions del action {kind} index {index}"
    if obj.kind == "qdisc":
        ifindex, qhandle = obj.key
        parent = obj.spec[0]
        if parent in (S.TC_H_ROOT, S.TC_H_INGRESS):
            return f"qdisc del dev {names[ifindex]} {parent_words(parent)}"
        return f"qdisc del dev {names[ifindex]} {parent_words(parent)} handle {handle(qhandle)}"
    if obj.kind == "class":
        ifindex, classid = obj.key
        return f"class del dev {names[ifindex]} classid {handle(classid)}"
    table, bucket, node = obj.key[5:]
    if table == ROOT:
        table = root_ids[obj.key[:5]]
    return " ".join([*_filter_head("del", obj.key, names), "handle",
                     _u32_id(table, bucket, node or None), "u32"])


def instance_delete_line(instance: tuple, names: dict[int, str]) -> str:
    """The line that deletes a whole u32 instance (every table and node it has)."""
    return " ".join(_filter_head("del", instance, names))
