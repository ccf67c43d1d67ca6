"""bpf: the classifier (``f_bpf.c``: a pinned program, classic BPF bytecode or an object file,
``da``) and the action (``m_bpf.c``: classic BPF bytecode, given inline or in a file, or an
eBPF program from an object file or pinned)."""

from __future__ import annotations

import dataclasses
import os
import socket
import struct

from .. import rules as R
from .. import specs as S
from ..action_list import action_failed, incomplete
from ..encoding import encode, strz
from ...errors import NotFoundError
from ..grammar import PROGRAMS, CommandError, Words, matches
from ..resolve import BPF_PROG_TYPE_SCHED_ACT, Resolver
from . import gact
from .common import classifier_options
from .tail import Tail

NAMES = ("bpf",)

USAGE = """\
Usage: ... bpf ... [ index INDEX ]

BPF use case:
 bytecode BPF_BYTECODE
 bytecode-file FILE

eBPF use case:
 object-file FILE [ section ACT_NAME ] [ export UDS_FILE ] [ verbose ]
 object-pinned FILE

Where BPF_BYTECODE := 's,c t f k,c t f k,c t f k,...'
c,t,f,k and s are decimals; s denotes number of 4-tuples

Where FILE points to a file containing the BPF_BYTECODE string,
an ELF file containing eBPF map definitions and bytecode, or a
pinned eBPF program.

Where ACT_NAME refers to the section name containing the
action (default 'action').

Where UDS_FILE points to a unix domain socket file in order
to hand off control of all created eBPF maps to an agent.

Where optionally INDEX points to an existing action, or
explicitly specifies an action index upon creation."""

# linux/tc_act/tc_bpf.h TCA_ACT_BPF_*
_PARMS, _OPS_LEN, _OPS, _FD, _NAME = 2, 3, 4, 5, 6
_KIND = encode((strz(S.ActAttr.KIND, "bpf"),))
_BPF_MAXINSNS = 4096
#: bpf_parse_string's buffer for a bytecode file: "4096," and 4096 of "65535 255 255 4294967295,"
#: (sizeof counts each NUL); a file that fills it is refused.
_FILE_MAX = len("4096,") + 1 + _BPF_MAXINSNS * (len("65535 255 255 4294967295,") + 1)


def parse_filter(w: Words) -> R.BpfProg:
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

    return R.BpfProg(**classifier_options(w, "bpf", extra))


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
class EbpfProgram:
    """An eBPF program as tc's ``bpf_do_parse`` names it for an action: the ``section`` (or
    the program called ``name``) of object file ``path``, or (``section`` None) the program
    pinned at ``path``; ``uds``: the socket tc's ``export`` hands the object's maps to."""

    path: str
    section: str | None = None
    name: str | None = None
    uds: str | None = None

    def fd(self, resolve: Resolver) -> int:
        """Its fd, loaded (or opened) once per batch; NotFoundError in tc's words."""
        if self.section is None:
            return resolve.program_fd(self.path)
        return resolve.object_program_fd(self.path, self.section, BPF_PROG_TYPE_SCHED_ACT,
                                         self.name)

    def annotation(self) -> bytes:
        """tc's ``TCA_ACT_BPF_NAME``: ``snprintf("%s:[%s]", basename(FILE), SECTION)`` into
        256 bytes (``*fsobj`` for a pinned program)."""
        text = f"{os.path.basename(self.path)}:[{self.section or '*fsobj'}]"
        return text.encode(errors="surrogateescape")[:255]


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
            options += [(_OPS_LEN, struct.pack("=H", len(self.ops))),
                        (_OPS, b"".join(_SOCK_FILTER.pack(*op) for op in self.ops))]
        elif self.program is not None:
            try:
                fd = self.program.fd(resolve)
            except NotFoundError as exc:  # loaded here when the reader did not while parsing
                raise NotFoundError(str(action_failed(exc.message, self.tc_argc, "bpf"))) from None
            options += [(_FD, struct.pack("=I", fd)), (_NAME, self.program.annotation() + b"\0")]
        options.append((_PARMS, self.parms()))
        return self.action_attrs(_KIND, options)


_SOCK_FILTER = struct.Struct("=HBBI")


def parse_action(w: Words, left: int) -> BpfAction:
    """tc's ``m_bpf.c`` ``bpf_parse_opt``, the cursor on ``bpf``: ``[run] MODE ARG ...`` once,
    then ``[CONTROL] [index N]``. An eBPF program is loaded (or opened) here, as tc does, where
    the reader gives a resolver (:data:`~..grammar.PROGRAMS`); ``export``'s socket is connected
    after the tail, as tc does, and nothing is sent on it (tc's libbpf loader keeps no maps for
    it to hand over)."""
    def failed(text: str) -> CommandError:
        return action_failed(text, left, "bpf")

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
            mode = _mode(w)
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
        _connect(action.program.uds, w)
    return action


def _mode(w: Words) -> tuple[tuple[int, int, int, int], ...] | EbpfProgram:
    """``bpf_do_parse`` for the action, the cursor on the mode word; left on its last word."""
    word = w.peek()
    if matches(word, "bytecode") or word == "bc":
        read = cbpf_ops
    elif matches(word, "bytecode-file") or word == "bcf":
        def read(path: str) -> tuple:
            return cbpf_ops(_bytecode_file(path))
    elif matches(word, "object-file") or word == "obj":
        return _ebpf(w, pinned=False)
    elif any(matches(word, name) for name in ("object-pinned", "pinned", "fd")):
        return _ebpf(w, pinned=True)
    else:
        raise CommandError(f'What mode is "{word}"?')
    w.pos += 1
    if w.peek() is None:
        raise incomplete()
    return read(w.peek())


#: tc's default section for an action (``bpf_prog_to_default_section(BPF_PROG_TYPE_SCHED_ACT)``).
_ACT_SECTION = "action"


def _ebpf(w: Words, pinned: bool) -> EbpfProgram:
    """The eBPF modes' words, the cursor on the mode: ``FILE [section NAME] [program NAME]
    [export UDS] [verbose]``, each read by a pinned program too, as tc reads them; then the
    program loaded (a pinned one opened, its section kept by tc but not used). (``verbose``: tc's libbpf log, which
    the package's loader does not print.)"""
    w.pos += 1
    program = EbpfProgram(_arg(w))
    section = _ACT_SECTION
    w.pos += 1
    if w.peek() is not None and matches(w.peek(), "section"):
        w.pos += 1
        section = _arg(w)
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
    program.section = None if pinned else section
    resolve = PROGRAMS.get()
    if resolve is not None:
        try:
            program.fd(resolve)
        except NotFoundError as exc:
            raise CommandError(exc.message) from None
    return program


def _arg(w: Words) -> str:
    """tc's ``NEXT_ARG()`` having moved the cursor: the word there, or the line is incomplete."""
    if w.peek() is None:
        raise incomplete()
    return w.peek()


def _connect(path: str, w: Words) -> None:
    """tc's ``bpf_send_map_fds`` after the action is read: a datagram socket connected to
    ``path`` (cut to ``sun_path``), on which nothing is sent; a failure is the action's, tc's
    argc and word then being those after the tail."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(path.encode(errors="surrogateescape")[:107])
        except OSError as exc:
            raise action_failed(f"Cannot connect to {path}: {os.strerror(exc.errno or 0)}",
                                w.left(), w.peek() or "(null)") from None
