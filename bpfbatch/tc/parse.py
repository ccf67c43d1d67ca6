"""iproute2 ``tc -batch`` files → :mod:`.rules` objects, streaming, one command at a time.

Reading follows iproute2's ``getcmdline()``/``makeargs()``: everything from ``#`` to the end of
a physical line is a comment (so a ``\\`` after a ``#`` continues nothing), a line ending in
``\\`` continues on the next one (joined without a space), words split on blanks with ``'``/``"``
quoting, blank commands skipped. A command's line number is the number of the *last* physical
line read for it — what tc prints in ``Command failed FILE:LINE``.

Grammar: the subset of ``tc qdisc``, ``tc class``, ``tc filter`` and ``tc actions`` listed in
:data:`SUPPORTED`; command words may be abbreviated as tc allows (``f`` for ``filter``, ``del``
for ``delete``). Anything else is an :class:`~bpfbatch.errors.InputError` naming FILE:LINE and the
offending token — never a guess. This module reads the commands (``tc_qdisc.c``,
``tc_class.c``, ``tc_filter.c``, ``m_action.c``'s ``tc actions``); each kind's options are read
by its module in :mod:`.kinds`, over the shared words of :mod:`.grammar`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TextIO

from ..errors import InputError
from . import rules as R
from . import specs as S
from .action_list import parse_actions
from .grammar import (DEVICES, SAID, CommandError, Words, invalid, matches, parse_classid, parse_mac,
                      parse_qdisc_handle, parse_u32_handle, read_commands, split_words, unsigned)
from .kinds import parsers
from .message import LineError, Listing, Said

__all__ = ["SUPPORTED", "CommandError", "parse_batch", "parse_classid", "parse_command", "parse_mac",
           "parse_numbered", "parse_u32_handle", "read_commands", "split_words"]

SUPPORTED = """\
qdisc add|del|replace dev DEV (ingress | clsact | [root | parent ID] [handle ID] htb [default N] [r2q N]
                                                                              [direct_qlen N])
class add|del|change|replace dev DEV [root | parent ID] classid ID
      [htb rate R [ceil R] [burst B] [cburst B] [mtu N] [mpu B] [prio N] [quantum N]]
filter add|del|change|replace dev DEV [ingress|egress|root|parent ID] [prio N] [protocol P]
       [chain N] [handle H] KIND ...
  u32 [match SELECTOR]... [sample SELECTOR [divisor N]] [ht H] [link H] [divisor N]
      [hashkey mask M at OFF] [classid ID] [indev DEV] [skip_hw|skip_sw] [police POLICE]
      [action ...]
      SELECTOR := u32|u16|u8 VAL MASK [at [nexthdr+]OFF] | ip src|dst A.B.C.D[/LEN|/MASK]
                | ip sport|dport|protocol|tos|dsfield|ihl|precedence|icmp_type|icmp_code VAL MASK
                | tcp|udp src|dst VAL MASK | icmp type|code VAL MASK
  bpf [pinned|object-pinned|fd PATH | obj|object-file FILE [sec NAME] | bytecode 'N,c t f k,...']
      [da] [classid ID] [skip_hw|skip_sw] [action ...]
  matchall [skip_hw|skip_sw] [classid ID] [action ...]                  (handle read by strtol)
  flower [MATCH ...] [verbose] [skip_hw|skip_sw] [classid ID | hw_tc TC] [action ...]
      MATCH := indev DEV | num_of_vlans N | [c]vlan_id|[c]vlan_prio N | [c]vlan_ethtype P
             | pppoe_sid N | ppp_proto P | dst_mac|src_mac|arp_tha|arp_sha MAC[/MASK|/BITS]
             | ip_proto P | ip_tos|ip_ttl V[/M] | dst_ip|src_ip|arp_tip|arp_sip PREFIX
             | dst_port|src_port PORT[/MASK]|MIN-MAX | tcp_flags F[/M] | type|code V[/M]
             | arp_op request|reply|N[/M] | ip_flags [no]frag/[no]firstfrag
             | ct_state {+|-}FLAGS | ct_zone|ct_mark V[/M] | ct_label HEX[/HEX]
             | enc_*, geneve_opts, vxlan_opts, erspan_opts, gtp_opts, mpls* (tunnel keys)
  fw [classid ID] [indev DEV] [police POLICE] [action ...]           (handle HANDLE[/FWMASK])
  route [from REALM | fromif DEV] [to REALM] [order N] [classid ID] [police POLICE] [action ...]
  basic [match EMATCH_TREE] [classid ID] [police POLICE] [action ...] (handle read by strtol)
  cgroup [match EMATCH_TREE] [police POLICE] [action ...]              (handle read by strtol)
      EMATCH_TREE := [not] KIND(ARGS) | [not] ( TREE ) [and|or TREE]; KIND := cmp | nbyte | u32
                     | meta | canid | ipset
  flow map key KEY | hash keys KEY,... [and|or|xor|rshift|addend N]... [divisor N]
       [baseclass ID] [perturb N] [match EMATCH_TREE] [police POLICE] [action ...]
  rsvp|rsvp6 [ipproto P] [session DST[/PORT | GPI]] [sender SRC[/PORT | GPI]] [classid ID]
       [tunnelid N] [tunnel N skip N] [police POLICE] [action ...]
  tcindex [hash N] [mask N] [shift N] [pass_on|fall_through] [classid ID] [police POLICE]
       [action ...]
actions add|change|replace ACTION [ACTION ...]    actions del action KIND index N ...
qdisc|class|filter show|list|ls ...   filter|actions get ...   actions list|flush action KIND
      (read-only lines and flush: run by iproute2's tc at their point of the batch)
ACTION := action [gact] CONTROL [random netrand|determ CONTROL VAL] [index N] [cookie HEX]
                 [no_percpu]
        | action gact index N
        | action mirred egress|ingress redirect|mirror [index N] dev DEV [CONTROL (mirror only)]
                 [index N] [cookie HEX] [no_percpu]
        | action mirred index N
        | action police POLICE
        | action skbedit [queue_mapping Q] [priority ID] [mark M[/MASK]] [ptype TYPE]
                 [inheritdsfield] [CONTROL] [index N]
        | action vlan (pop|pop_eth | push|modify [protocol P] id ID [priority N]
                 | push_eth dst_mac MAC src_mac MAC) [CONTROL] [index N]
        | action csum iph|ip4h|icmp|igmp|tcp|udp|udplite|sctp|and|or|+ ... [CONTROL] [index N]
        | action connmark [zone N] [CONTROL] [index N]
        | action sample rate N group N [trunc N] [CONTROL] [index N]
        | action nat ingress|egress OLD[/LEN] NEW [CONTROL] [index N]
        | action tunnel_key unset | set src_ip IP dst_ip IP [id N] [dst_port N] [tos N] [ttl N]
                 [geneve_opts CLASS:TYPE:DATA,...] [vxlan_opts GBP]
                 [erspan_opts VER:INDEX:DIR:HWID] [csum|nocsum] [CONTROL] [index N]
        | action skbmod set [dmac MAC] [smac MAC] [etype TYPE] | swap mac | ecn [CONTROL] [index N]
        | action simple [sdata STRING] [CONTROL] [index N]
        | action ife encode|decode [allow|use mark|prio|tcindex [VALUE]] [dst MAC] [src MAC]
                 [type TYPE] [CONTROL] [index N]
        | action gate [index N] [priority P] [base-time T] [cycle-time T] [cycle-time-ext T]
                 [clockid CLOCK] [flags N] [sched-entry open|close INTERVAL [IPV [MAX-OCTETS]]]...
                 [CONTROL]
        | action mpls (pop protocol P | push|mac_push [protocol P] label L [tc N] [ttl N] [bos N]
                 | modify [label L] [tc N] [ttl N] [bos N] | dec_ttl) [CONTROL] [index N]
        | action ctinfo [dscp MASK [STATEMASK]] [cpmark [MASK]] [zone N] [CONTROL] [index N]
        | action ct [clear | commit [force]] [zone N] [mark M[/MASK]] [label HEX[/HEX]]
                 [nat [src|dst addr A[-A] [port P[-P]]]] [index N] [CONTROL]      (tc 6.1: no helper)
          (each kind followed by [cookie HEX] [no_percpu] [skip_sw|skip_hw]...)
POLICE := [rate R burst B[/CELL]] [pkts_rate N pkts_burst N] [mtu B[/CELL]] [mpu B]
          [peakrate R] [avrate R] [overhead N] [linklayer ethernet|atm|adsl]
          [CONTROL | conform-exceed EXCEED[/CONFORM]] [index N]
CONTROL := drop|shot|pass|ok|pipe|continue|reclassify|trap (or a prefix) | jump N | goto chain N"""


def _parse_actions_command(w: Words) -> R.Actions | Listing:
    """``actions add|change|replace|del ...``. As tc's ``parse_action`` ends an action list at
    a prefix of a command word (``add``, ``d``, ``get``...) and its ``do_action`` then runs the
    rest of the line as another ``tc actions`` command (each sent, or printed, before the next
    is read), a line whose list ends so is several commands: it goes to iproute2's tc whole,
    as a :class:`~.message.Listing` does, once its first list has parsed."""
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
        start = w.pos
        actions = parse_actions(w)
        if w.peek() is not None:  # a command word follows
            return Listing(tuple(w.words[:-1]))
        if not actions and w.peek() is None:  # tc's words: `action` alone, or nothing at all
            raise CommandError('bad action empty 1\nparse_action: bad value (0:(null))!\n'
                               'Illegal "action"' if w.pos > start else 'Illegal "action"')
    if not actions:
        raise CommandError(f"expected 'action', got '{w.peek()}'" if w.peek() else "missing action")
    return R.Actions(verb, actions)


# --- commands ----------------------------------------------------------------------------------


def _verb(word: str | None, allowed: tuple[str, ...]) -> str:
    if word in allowed:
        return word
    for verb in allowed:
        if word and (matches(word, verb) or (verb == "del" and matches(word, "delete"))):
            return verb
    raise CommandError(f"unsupported command '{word}'" if word else "missing command")


def _placement(w: Words, word: str, where: dict) -> bool:
    """``dev DEV``, ``root``, ``parent ID`` — where a qdisc or class goes. False: not one of these."""
    if word == "dev":
        where["dev"] = w.take("device name")
    elif word == "root":
        where["parent"] = S.TC_H_ROOT
    elif word == "parent":
        where["parent"] = _id(w, parse_classid, "invalid parent ID")
    else:
        return False
    return True


def _id(w: Words, parse, what: str) -> int:
    """A handle or class id of tc_qdisc.c/tc_class.c: a bad one is ``invarg()``, which exits."""
    word = w.take("id")
    value = parse(word)
    if value is None:
        raise invalid(word, what)
    return value


def _parse_qdisc(w: Words) -> R.Qdisc:
    verb, where, handle, kind = _placed(w, "qdisc", ("add", "del", "replace"), S.TC_H_ROOT,
                                        ("handle", parse_qdisc_handle, "invalid qdisc ID"))
    return R.Qdisc(verb, where["dev"], kind, where["parent"], handle or 0)


def _parse_class(w: Words) -> R.Class:
    verb, where, classid, kind = _placed(w, "class", ("add", "del", "change", "replace"), 0,
                                         ("classid", parse_classid, "invalid class ID"))
    if classid is None:
        raise CommandError("missing 'classid ID'")
    return R.Class(verb, where["dev"], classid, kind, where["parent"])


def _placed(w: Words, role: str, verbs: tuple[str, ...], parent: int, own_id: tuple
            ) -> tuple[str, dict, int | None, object]:
    """What tc_qdisc.c and tc_class.c read alike: the verb, ``dev``/``root``/``parent``, the
    object's own id (``own_id``: its word, its reader and tc's words for a bad one) and its
    kind, whose module reads the rest (``role``: "qdisc" or "class") → (verb, placement, id
    or None, kind or None)."""
    verb = _verb(w.take("command"), verbs)
    where = {"parent": parent}
    id_word, parse_id, bad_id = own_id
    ident, kind = None, None
    kinds = parsers(role)
    while (word := w.peek()) is not None:
        w.pos += 1
        if _placement(w, word, where):
            continue
        if word == id_word:
            ident = _id(w, parse_id, bad_id)
        elif word in kinds:
            kind = kinds[word](w, word)
        else:
            raise CommandError(f"unsupported {role} option or kind '{word}'")
    if "dev" not in where:
        raise CommandError("missing 'dev DEV'")
    return verb, where, ident, kind


_PARENTS = {"root": S.TC_H_ROOT, "ingress": R.INGRESS, "egress": R.EGRESS}
_PRIO_WORDS = ("prio", "priority", "pref", "preference")


def _parse_filter(w: Words) -> R.Filter:
    """tc_filter.c's options; its invalid-argument exits are fatal, as in tc."""
    verb = _verb(w.take("command"), ("add", "del", "change", "replace"))
    dev = None
    parent, prio, protocol, handle_text, chain = 0, 0, None, None, None
    classifier = None
    while (word := w.peek()) is not None:
        w.pos += 1
        if word == "dev":
            if dev is not None and w.peek() is not None:  # tc's duparg(), which exits
                raise CommandError(f'Error: duplicate "dev": "{w.peek()}" is the second value.',
                                   fatal=True)
            dev = w.take("device name")
        elif word in _PARENTS or word == "parent":
            if parent:
                raise CommandError(f'Error: "{word}" is duplicate parent ID')
            if word == "parent":
                parent = parse_classid(w.take("parent"))
                if parent is None:
                    raise invalid(w.words[w.pos - 1], "Invalid parent ID")
            else:
                parent = _PARENTS[word]
        elif word in _PRIO_WORDS:
            prio = unsigned(w.take("prio"))
            if prio is None or prio > 0xFFFF:
                raise invalid(w.words[w.pos - 1], "invalid priority value")
        elif word == "protocol":
            protocol = S.protocol_number(w.take("protocol"))
            if protocol is None:
                raise invalid(w.words[w.pos - 1], "invalid protocol")
        elif word == "chain":
            chain = unsigned(w.take("chain"))
            if chain is None:
                raise invalid(w.words[w.pos - 1], "invalid chain index value")
        elif word == "handle":
            handle_text = w.take("filter handle")
        else:  # tc: any other word names the classifier, and the device is looked up first
            exists = DEVICES.get()
            if dev is not None and exists is not None and not exists(dev):
                raise CommandError(f'Cannot find device "{dev}"')
            parse = parsers("filter").get(word)
            if parse is not None:
                _filter_handle(handle_text, word, None)  # each kind reads the handle first
                classifier = parse(w, R.filter_protocol(verb, protocol), parent) \
                    if getattr(parse, "reads_header", False) else parse(w)
            elif w.peek() is None:
                raise CommandError(f"unsupported filter option or classifier '{word}'")
            else:  # tc has no module by that name: its stand-in parser refuses any option
                raise CommandError(f'Unknown filter "{word}", hence option "{w.peek()}" is '
                                   "unparsable")
    if dev is None:
        raise CommandError("missing 'dev DEV'")
    if classifier is None and handle_text is not None:
        raise CommandError('Must specify filter type when using "handle"')
    return R.Filter(verb, dev, parent, classifier, prio, protocol,
                    _filter_handle(handle_text, classifier.kind, classifier)
                    if classifier is not None else 0, chain)


def _filter_handle(text: str | None, kind: str, classifier) -> int:
    """Each classifier reads its own handle (u32 ``htid:hash:node``, fw ``HANDLE/MASK``, ...:
    its module's ``parse_handle``; ``classifier`` None: before its options, for tc's words
    alone), the others a number."""
    read = parsers("handle").get(kind)
    if read is not None:
        return read(text, classifier)
    if text is None:
        return 0
    value = unsigned(text)
    if value is None:
        raise CommandError('Illegal "handle"')
    return value


#: tc's MAX_ARGS: its batch reader takes at most one word fewer on a line.
_MAX_ARGS = 512
#: Command groups in tc's order of precedence for abbreviations ("a" is actions).
_GROUPS = {"qdisc": _parse_qdisc, "class": _parse_class, "filter": _parse_filter,
           "actions": _parse_actions_command}
#: Per group, the verbs tc checks before its listing verbs (a prefix takes the first match),
#: then the verbs of a :class:`~.message.Listing`: lines tc answers by printing, and
#: ``actions flush``.
_WRITE_VERBS = {"qdisc": ("add", "change", "replace", "link", "delete"),
                "class": ("add", "change", "replace", "delete"),
                "filter": ("add", "change", "replace", "delete"),
                "actions": ("add", "change", "replace", "delete")}
_LISTING_VERBS = {"qdisc": ("list", "show", "lst", "help"), "class": ("list", "show", "lst", "help"),
                  "filter": ("get", "list", "show", "lst", "help"),
                  "actions": ("get", "list", "show", "lst", "flush", "help")}


def parse_command(text: str) -> R.Rule | Listing:
    """One command line (without a leading ``tc``) → a rule, or the :class:`~.message.Listing`
    of a line tc answers by printing; ``CommandError`` on anything unsupported."""
    words = split_words(text)
    if len(words) >= _MAX_ARGS:  # tc's batch reader (makeargs) exits on such a line
        raise CommandError("Too many arguments to command", fatal=True, status=1)
    w = Words(words)
    group = w.take("command")
    name = group if group in _GROUPS else next((g for g in _GROUPS if matches(group, g)), None)
    if name is None:
        raise CommandError(f"unsupported command '{group}'")
    verb = w.peek()
    if verb is None or (not any(matches(verb, v) for v in _WRITE_VERBS[name])
                        and any(matches(verb, v) for v in _LISTING_VERBS[name])):
        return Listing(tuple(words[:-1]))  # without the cursor's end sentinel
    return _GROUPS[name](w)


def parse_numbered(number: int, text: str | None, name: str
                   ) -> R.Rule | Said | Listing | LineError:
    """One command of :func:`read_commands` → its rule (a :class:`~.message.Said` when tc
    prints something while parsing it), or the :class:`~.message.LineError` naming
    ``NAME:LINE`` (returned, not raised, so the caller decides whether to go on), what tc
    printed before failing opening its text."""
    said: list[str] = []
    token = SAID.set(said)
    try:
        if text is None:
            raise CommandError("Missing continuation line")
        rule = parse_command(text)
    except CommandError as exc:
        return LineError(InputError("".join(said) + str(exc), obj=f"{name}:{number}"),
                         exc.fatal, exc.status)
    finally:
        SAID.reset(token)
    return Said(rule, "".join(said)) if said else rule


def parse_batch(stream: TextIO | Iterable[str], name: str) -> Iterator[tuple[int, R.Rule | LineError]]:
    """Yield ``(line_number, rule)`` per command; a bad command yields a
    :class:`~.message.LineError` naming ``NAME:LINE`` in place of the rule."""
    for number, text in read_commands(stream):
        yield number, parse_numbered(number, text, name)
