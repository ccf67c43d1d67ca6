"""bpf (``f_bpf.c``): a pinned program, classic BPF bytecode or an object file, ``da``."""

from __future__ import annotations

from .. import rules as R
from .. import specs as S
from ..grammar import CommandError, Words
from .common import classifier_options

NAMES = ("bpf",)


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
