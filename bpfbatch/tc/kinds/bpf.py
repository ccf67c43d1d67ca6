"""bpf: the classifier (``f_bpf.c``) and the action (``m_bpf.c``), each running classic BPF
bytecode (given inline or in a file) or an eBPF program (from an object file, or pinned), read
by one set of readers as tc's ``bpf_legacy.c`` reads them for both."""

from __future__ import annotations

import dataclasses
import os
import socket
import struct

from .. import specs as S
from ..action_list import action_failed, failure, incomplete
from ..bpf_program import EbpfProgram, fd_attrs, ops_attrs
from ..encoding import encode, strz, u32
from ...errors import NotFoundError
from ..grammar import PROGRAMS, CommandError, Words, matches, parse_classid, what_is
from ..resolve import BPF_PROG_TYPE_SCHED_ACT, BPF_PROG_TYPE_SCHED_CLS, Resolver
from . import gact
from .common import Listed, actions_attr, next_value, police_attr
from .tail import Tail

NAMES = ("bpf",)

def _usage(head: str, ebpf: str, name: str, what: str, foot: str) -> str:
    """m_bpf's and f_bpf's explain(): their common text around each one's own lines (``name``:
    the section's word, ``what``: its default)."""
    return f"""\
Usage: ... bpf ...{head}

BPF use case:
 bytecode BPF_BYTECODE
 bytecode-file FILE

eBPF use case:
{ebpf}

Where BPF_BYTECODE := 's,c t f k,c t f k,c t f k,...'
c,t,f,k and s are decimals; s denotes number of 4-tuples

Where FILE points to a file containing the BPF_BYTECODE string,
an ELF file containing eBPF map definitions and bytecode, or a
pinned eBPF program.

Where {name} refers to the section name containing the
{what} (default '{what}').

Where UDS_FILE points to a unix domain socket file in order
to hand off control of all created eBPF maps to an agent.

{foot}"""


USAGE = _usage(" [ index INDEX ]", """\
 object-file FILE [ section ACT_NAME ] [ export UDS_FILE ] [ verbose ]
 object-pinned FILE""", "ACT_NAME", "action", """\
Where optionally INDEX points to an existing action, or
explicitly specifies an action index upon creation.""")


# linux/tc_act/tc_bpf.h TCA_ACT_BPF_*
_PARMS, _OPS_LEN, _OPS, _FD, _NAME = 2, 3, 4, 5, 6
_KIND = encode((strz(S.ActAttr.KIND, "bpf"),))
_BPF_MAXINSNS = 4096
#: bpf_parse_string's buffer for a bytecode file: "4096," and 4096 of "65535 255 255 4294967295,"
#: (sizeof counts each NUL); a file that fills it is refused.
_FILE_MAX = len("4096,") + 1 + _BPF_MAXINSNS * (len("65535 255 255 4294967295,") + 1)


#: f_bpf.c's explain(), its section default filled in.
FILTER_USAGE = _usage("", """\
 object-file FILE [ section CLS_NAME ] [ export UDS_FILE ] [ verbose ] [ direct-action ] \
[ skip_hw | skip_sw ]
 object-pinned FILE [ direct-action ] [ skip_hw | skip_sw ]

Common remaining options:
 [ action ACTION_SPEC ]
 [ classid CLASSID ]""", "CLS_NAME", "classifier", """\
ACTION_SPEC := ... look at individual actions
NOTE: CLASSID is parsed as hexadecimal input.""")

# linux/pkt_cls.h TCA_BPF_POLICE (the other TCA_BPF_* are specs.Bpf)
_FILTER_POLICE = 2


@dataclasses.dataclass(slots=True)
class BpfFilter:
    """cls_bpf as tc's ``f_bpf.c`` sends it: the classid, actions and policer in the order
    the line gave them (``listed``; no options at all where the line ended at ``bpf``), then
    the ``program`` (classic instructions, none where the line gave none, as tc sends them; or
    an eBPF program), then ``gen_flags`` (skip_hw/skip_sw) and ``flags`` (direct-action)."""

    listed: Listed
    program: tuple[tuple[int, int, int, int], ...] | EbpfProgram = ()
    gen_flags: int = 0
    flags: int = 0
    kind = "bpf"

    def options(self, resolve: Resolver, protocol: int) -> tuple | None:
        attrs = self.listed.options(resolve, protocol)
        if attrs is None:
            return None
        if isinstance(self.program, EbpfProgram):
            try:
                fd = self.program.fd(resolve)
            except NotFoundError as exc:  # loaded here when the reader did not while parsing
                raise NotFoundError(f"{exc.message}\nUnable to load program") from None
            program = fd_attrs(S.Bpf.FD, S.Bpf.NAME, fd, self.program.annotation())
        else:
            program = ops_attrs(S.Bpf.OPS_LEN, S.Bpf.OPS, self.program)
        if self.gen_flags:
            program.append((S.Bpf.FLAGS_GEN, struct.pack("=I", self.gen_flags)))
        if self.flags:
            program.append((S.Bpf.FLAGS, struct.pack("=I", self.flags)))
        return (*attrs, *program)


def parse_filter(w: Words) -> BpfFilter:
    """tc's ``f_bpf.c`` ``bpf_parse_opt``, the cursor past ``bpf``: ``[run] MODE ARG ...``
    (a word no option names, before any program, is read as a mode), ``classid``/``flowid``,
    ``direct-action``/``da``, ``skip_hw``, ``skip_sw``, ``action``, ``police``, ``help``, each
    as tc's ``matches()`` reads it. A pinned program is opened while parsing and an object file
    loaded after the options, as tc does, where the reader gives a resolver
    (:data:`~..grammar.PROGRAMS`); ``export``'s socket is then connected."""
    listed = Listed("bpf", sends_options=w.peek() is not None)
    cls = BpfFilter(listed)
    attrs: list = []
    seen_run = False
    while (word := w.peek()) is not None:
        if matches(word, "run") or not (seen_run or _filter_word(word)):
            if matches(word, "run"):
                next_value(w)
                if seen_run:
                    raise CommandError(f'Error: duplicate "run": "{w.peek()}" is the second value.',
                                       fatal=True)
            seen_run = True
            try:
                cls.program = _mode(w, BPF_PROG_TYPE_SCHED_CLS, "classifier")
            except CommandError as exc:
                if exc.fatal:
                    raise
                raise CommandError(_then(str(exc), "Unable to parse bpf command line")) from None
        elif matches(word, "classid") or matches(word, "flowid"):
            classid = parse_classid(next_value(w))
            if classid is None:
                raise CommandError('Illegal "classid"')
            attrs.append(u32(S.Bpf.CLASSID, classid))
        elif matches(word, "direct-action") or matches(word, "da"):
            cls.flags |= S.TCA_BPF_FLAG_ACT_DIRECT
        elif matches(word, "skip_hw"):
            cls.gen_flags |= S.CLS_FLAGS["skip_hw"]
        elif matches(word, "skip_sw"):
            cls.gen_flags |= S.CLS_FLAGS["skip_sw"]
        elif matches(word, "action"):
            attrs.append(actions_attr(w, S.Bpf.ACT))
            continue
        elif matches(word, "police"):
            attrs.append(police_attr(w, _FILTER_POLICE))
            continue
        elif matches(word, "help"):
            raise CommandError(FILTER_USAGE)
        else:
            raise CommandError(what_is(word, FILTER_USAGE))
        w.pos += 1
    listed.attrs = tuple(attrs)
    program = cls.program
    if isinstance(program, EbpfProgram):
        if program.section is not None:
            try:
                _load(program)
            except CommandError as exc:
                raise CommandError(_then(str(exc), "Unable to load program")) from None
        if program.uds is not None:
            _connect(program.uds, CommandError)
    return cls


def _then(text: str, line: str) -> str:
    """tc's ``line`` after what the failed reader printed (nothing, for some)."""
    return f"{text}\n{line}" if text else line


def _filter_word(word: str) -> bool:
    """Whether f_bpf's option loop names ``word`` before its mode fallback."""
    return any(matches(word, name) for name in (
        "classid", "flowid", "direct-action", "da", "skip_hw", "skip_sw", "action", "police",
        "help"))


def cbpf_ops(text: str) -> tuple[tuple[int, int, int, int], ...]:
    """tc's ``bpf_ops_parse``: ``'N,code jt jf k,...'`` → N instructions, each number read as
    ``sscanf``'s ``%hu %hhu %hhu %u`` reads it (a sign, wrap-around, trailing words ignored).
    CommandError with tc's line (empty where tc fails without one)."""
    count, pos = _scan_unsigned(text, 0, 16)
    if count is None or text[pos:pos + 1] != ",":
        raise CommandError("")
    if not 0 < count <= _BPF_MAXINSNS:
        raise CommandError("")
    ops = []
    while (pos := text.find(",", pos) + 1) and pos < len(text):
        if len(ops) >= count:
            raise CommandError("Real program length exceeds encoded length parameter!")
        op, at = [], pos
        for bits in (16, 8, 8, 32):
            value, at = _scan_unsigned(text, at, bits)
            if value is None:
                raise CommandError(f"Error at instruction {len(ops)}!")
            op.append(value)
        ops.append(tuple(op))
    if len(ops) != count:
        raise CommandError("Parsed program length is less than encoded length parameter!")
    return tuple(ops)


def _scan_unsigned(text: str, pos: int, bits: int) -> tuple[int | None, int]:
    """One ``sscanf`` unsigned conversion at ``pos``: blanks skipped, an optional sign, decimal
    digits, through ``strtoul`` (a magnitude past 64 bits is ULONG_MAX, a minus wraps) and cut
    to ``bits`` → (value or None, the position after it)."""
    while pos < len(text) and text[pos] in " \t\n\v\f\r":
        pos += 1
    start = pos
    if pos < len(text) and text[pos] in "+-":
        pos += 1
    digits = pos
    while pos < len(text) and "0" <= text[pos] <= "9":
        pos += 1
    if pos == digits:
        return None, start
    value = int(text[digits:pos])
    value = (1 << 64) - 1 if value >> 64 else (-value if text[start] == "-" else value) % (1 << 64)
    return value & ((1 << bits) - 1), pos


def _bytecode_file(path: str) -> str:
    """``bpf_parse_string`` reading a file: each line ends in a comma, runs of blanks kept as
    their first; CommandError with tc's words where the file cannot be read or is too long."""
    try:
        with open(path, "rb") as file:
            data = file.read(4 * _FILE_MAX)
    except OSError as exc:  # tc's perror()
        raise CommandError(f"Cannot fopen: {os.strerror(exc.errno or 0)}") from None
    out, prev = [], " "
    for c in data.decode("latin-1"):
        if c == "\n":
            if prev != ",":
                out.append(",")
            prev = ","
        elif c in " \t":
            if prev != " ":
                out.append(c)
            prev = " "
        else:
            out.append(c)
            prev = c
        if len(out) >= _FILE_MAX:
            raise CommandError("")
    return "".join(out).split("\0", 1)[0]


@dataclasses.dataclass(slots=True)
class BpfAction(Tail):
    """act_bpf: a classic BPF program (``ops``) or an eBPF ``program`` run on the packet, its
    return value the verdict; neither for ``bpf index N`` naming an existing action.
    ``tc_argc``: tc's argc at ``bpf`` (its error lines print it when the program is missing)."""

    ops: tuple[tuple[int, int, int, int], ...] | None = None
    program: EbpfProgram | None = None
    tc_argc: int = dataclasses.field(default=0, compare=False, repr=False)
    kind = "bpf"

    def attrs(self, resolve: Resolver) -> tuple:
        options = []
        if self.ops is not None:  # tc's order: the program while parsing, the parms after
            options += ops_attrs(_OPS_LEN, _OPS, self.ops)
        elif self.program is not None:
            try:
                fd = self.program.fd(resolve)
            except NotFoundError as exc:  # loaded here when the reader did not while parsing
                raise NotFoundError(str(action_failed(exc.message, self.tc_argc, "bpf"))) from None
            options += fd_attrs(_FD, _NAME, fd, self.program.annotation())
        options.append((_PARMS, self.parms()))
        return self.action_attrs(_KIND, options)


def parse_action(w: Words, left: int) -> BpfAction:
    """tc's ``m_bpf.c`` ``bpf_parse_opt``, the cursor on ``bpf``: ``[run] MODE ARG ...`` once,
    then ``[CONTROL] [index N]``. An eBPF program is loaded (or opened) here, as tc does, where
    the reader gives a resolver (:data:`~..grammar.PROGRAMS`); ``export``'s socket is connected
    after the tail, as tc does, and nothing is sent on it (tc's libbpf loader keeps no maps for
    it to hand over)."""
    failed = failure(left, "bpf")

    action = BpfAction(tc_argc=left)
    w.pos += 1
    if w.peek() is None:
        raise incomplete()
    seen_run = False
    while (word := w.peek()) is not None:
        if matches(word, "run"):
            w.pos += 1
            if w.peek() is None:
                raise incomplete()
            if seen_run:
                raise CommandError(f'Error: duplicate "run": "{w.peek()}" is the second value.',
                                   fatal=True)
        elif matches(word, "help"):
            raise failed(USAGE)
        elif matches(word, "index") or seen_run:
            break
        seen_run = True
        try:
            mode = _mode(w, BPF_PROG_TYPE_SCHED_ACT, _ACT_SECTION)
            _load(mode)  # bpf_parse_and_load_common: the object loaded right away
        except CommandError as exc:
            if exc.fatal:
                raise
            raise failed(str(exc)) from None
        if isinstance(mode, EbpfProgram):
            action.program = mode
        else:
            action.ops = mode
        w.pos += 1
    said, _ = action.read_tail(w, failed, 'bpf: Illegal "index"')
    gact.refused_again(said)
    if action.program is not None and action.program.uds is not None:
        _connect(action.program.uds,
                 lambda text: action_failed(text, w.left(), w.peek() or "(null)"))
    return action


def _mode(w: Words, prog_type: int, section: str) -> tuple[tuple[int, int, int, int], ...] | EbpfProgram:
    """``bpf_do_parse`` for a program of ``prog_type`` (``section``: its default), the cursor
    on the mode word; left on its last word. A pinned program is opened here, as tc does;
    an object file is loaded by :func:`_load`."""
    word = w.peek()
    if matches(word, "bytecode") or word == "bc":
        read = cbpf_ops
    elif matches(word, "bytecode-file") or word == "bcf":
        def read(path: str) -> tuple:
            return cbpf_ops(_bytecode_file(path))
    elif matches(word, "object-file") or word == "obj":
        return _ebpf(w, EbpfProgram(_ebpf_file(w), section, prog_type=prog_type))
    elif any(matches(word, name) for name in ("object-pinned", "pinned", "fd")):
        return _ebpf(w, EbpfProgram(_ebpf_file(w), prog_type=prog_type))
    else:
        raise CommandError(f'What mode is "{word}"?')
    w.pos += 1
    if w.peek() is None:
        raise incomplete()
    return read(w.peek())


#: tc's default section for an action (``bpf_prog_to_default_section(BPF_PROG_TYPE_SCHED_ACT)``).
_ACT_SECTION = "action"


def _ebpf_file(w: Words) -> str:
    """The eBPF modes' FILE, the cursor on the mode word, left on the FILE."""
    w.pos += 1
    return _arg(w)


def _ebpf(w: Words, program: EbpfProgram) -> EbpfProgram:
    """The eBPF modes' words after FILE, the cursor on it: ``[section NAME] [program NAME]
    [export UDS] [verbose]``, each read by a pinned program too, as tc reads them (a pinned
    program keeps no section: tc reads it but does not use it); a pinned program is then
    opened. (``verbose``: tc's libbpf log, which the package's loader does not print.)"""
    pinned = program.section is None
    w.pos += 1
    if w.peek() is not None and matches(w.peek(), "section"):
        w.pos += 1
        section = _arg(w)
        if not pinned:
            program.section = section
        w.pos += 1
    if w.peek() == "program":
        w.pos += 1
        program.name = _arg(w)
        w.pos += 1
    program.uds = os.environ.get("TC_BPF_UDS")  # BPF_ENV_UDS: the word is then not read
    if w.peek() is not None and program.uds is None and matches(w.peek(), "export"):
        w.pos += 1
        program.uds = _arg(w)
        w.pos += 1
    if w.peek() is not None and matches(w.peek(), "verbose"):
        w.pos += 1
    w.pos -= 1
    if pinned:
        _load(program)
    return program


def _load(program) -> None:
    """Open or load an eBPF ``program`` (not a classic one) through the reader's resolver,
    if it gives one; CommandError with the resolver's line."""
    resolve = PROGRAMS.get()
    if isinstance(program, EbpfProgram) and resolve is not None:
        try:
            program.fd(resolve)
        except NotFoundError as exc:
            raise CommandError(exc.message) from None


def _arg(w: Words) -> str:
    """tc's ``NEXT_ARG()`` having moved the cursor: the word there, or the line is incomplete."""
    if w.peek() is None:
        raise incomplete()
    return w.peek()


def _connect(path: str, failed) -> None:
    """tc's ``bpf_send_map_fds`` after the action or filter is read: a datagram socket
    connected to ``path`` (cut to ``sun_path``), on which nothing is sent; a failure is
    ``failed(tc's line)`` (the action's says tc's argc and word after the tail)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(path.encode(errors="surrogateescape")[:107])
        except OSError as exc:
            raise failed(f"Cannot connect to {path}: {os.strerror(exc.errno or 0)}") from None
