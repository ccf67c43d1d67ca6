"""bpftool's spelling of an element on the command line, and of its JSON.

The element commands take bpftool's words as bpftool parses them (``parse_elem`` and
``parse_bytes`` in bpftool's ``map.c``): ``key [hex] BYTES``, ``value [hex] BYTES`` (one
byte per word, C's ``strtoul`` base 0 — ``1``, ``0x1f``, ``017`` — or base 16 after
``hex``; exactly as many as the map's key or value has) and ``any | exist | noexist``; a
keyword may be shortened as bpftool allows (``k``, ``val``). A byte above 255 is refused
(bpftool would keep its low 8 bits). Without the words, a side is JSON text as ``dump -o
jsonl`` prints it (:func:`json_word`).

:func:`pretty` is bpftool's ``-p`` layout (iproute2's ``json_writer`` in pretty mode) of a
JSON value, so ``bpfbatch -p lookup ...`` prints what ``bpftool -p map lookup ...`` does.
"""

from __future__ import annotations

import json

from .._sys import abi

#: bpftool's update flags.
FLAGS = {"any": abi.BPF_ANY, "noexist": abi.BPF_NOEXIST, "exist": abi.BPF_EXIST}


class GrammarError(ValueError):
    """A command line that does not read as bpftool's element grammar (a usage error)."""


def is_prefix(word: str, full: str) -> bool:
    """bpftool's ``is_prefix``: ``word`` is a non-empty beginning of ``full``."""
    return bool(word) and full.startswith(word)


def uses_keywords(words: list[str], first: str) -> bool:
    """Whether ``words`` are bpftool's form: they start with the keyword ``first`` (``key``,
    ``value``), or its prefix, and give more than that word."""
    return len(words) > 1 and is_prefix(words[0], first)


def parse_element(words: list[str], sizes: dict[str, int], *, flags: bool = False
                  ) -> tuple[dict[str, bytes], int | None]:
    """``words`` read as bpftool reads them: ``{side: bytes}`` for each side of ``sizes``
    (``{"key": 4, "value": 8}``), and the flag given (``None``: none). Every side must be
    given once; ``flags`` allows ``any|exist|noexist``."""
    given: dict[str, bytes] = {}
    flag = None
    at = 0
    while at < len(words):
        word = words[at]
        side = next((s for s in sizes if is_prefix(word, s)), None)
        if side is not None:
            if side in given:
                raise GrammarError(f"{side} given twice")
            given[side], at = parse_bytes(words, at + 1, side, sizes[side])
            continue
        name = next((f for f in FLAGS if is_prefix(word, f)), None) if flags else None
        if name is not None:
            if flag is not None:
                raise GrammarError(f"flags given twice: {word}")
            flag, at = FLAGS[name], at + 1
            continue
        expected = " or ".join([*sizes, *(["any|exist|noexist"] if flags else [])])
        raise GrammarError(f"expected {expected}, got '{word}'")
    missing = [side for side in sizes if side not in given]
    if missing:
        raise GrammarError(f"no {missing[0]} given (bpftool's {missing[0]} [hex] BYTES)")
    return given, flag


def parse_bytes(words: list[str], at: int, side: str, size: int) -> tuple[bytes, int]:
    """``size`` bytes from ``words[at:]`` (``hex`` first: base 16); the bytes and where the
    words after them start."""
    base = 0
    if at < len(words) and is_prefix(words[at], "hex"):
        base, at = 16, at + 1
    taken = words[at:at + size]
    values = bytearray()
    for word in taken:
        value = strtoul(word, base)
        if value is None:
            raise GrammarError(f"{side}: '{word}' is not a byte"
                               + (" (after hex: 2 hex digits a word)" if base else ""))
        if value > 0xFF:
            raise GrammarError(f"{side}: '{word}' is more than a byte (one byte per word)")
        values.append(value)
    if len(values) != size:
        raise GrammarError(f"{side}: expected {size} bytes, got {len(values)} (the map's "
                           f"{side}s have {size}: one word per byte)")
    return bytes(values), at + size


def strtoul(word: str, base: int) -> int | None:
    """C's ``strtoul(word, &end, base)`` when it reads the whole word (base 0: ``0x`` hex,
    a leading ``0`` octal, else decimal); ``None`` otherwise."""
    text = word.strip().lower()
    if base == 16 and text.startswith("0x"):
        text = text[2:]
    elif base == 0:
        if text.startswith("0x"):
            base, text = 16, text[2:]
        elif text.startswith("0") and len(text) > 1:
            base, text = 8, text[1:]
        else:
            base = 10
    if not text or not all(c in "0123456789abcdef"[:base] for c in text):
        return None
    return int(text, base)


def json_word(text: str, side: str):
    """A side given as one word: JSON text (``5``, ``'{"saddr": "10.0.0.1"}'``), or, when it
    is not JSON, the word as a string (``10.0.0.1``, an enumerator, hex text)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise GrammarError(f"{side}: JSON nested deeper than the JSON reader allows") from None
    except ValueError:
        return text


def pretty(value) -> str:
    """``value`` as ``bpftool -p`` prints it: 4 spaces an indent level, each member on its
    own line, array elements on one line after ``[`` and the closing ``]`` on a line of its
    own (iproute2's ``json_writer`` in pretty mode)."""
    out: list[str] = []
    _pretty(value, 0, out)
    return "".join(out)


def pretty_text(compact: bytes) -> bytes:
    """bpftool's compact JSON text (``-j``) as ``-p`` prints it, with its line end."""
    return (pretty(json.loads(compact)) + "\n").encode()


def _pretty(value, depth: int, out: list[str]) -> None:
    if isinstance(value, dict):
        out.append("{")
        for i, (name, member) in enumerate(value.items()):
            out.append(("," if i else "") + "\n" + "    " * (depth + 1)
                       + json.dumps(name) + ": ")
            _pretty(member, depth + 1, out)
        out.append(("\n" + "    " * depth if value else "") + "}")
    elif isinstance(value, list):
        out.append("[")
        for i, element in enumerate(value):
            out.append("," if i else "")
            _pretty(element, depth + 1, out)
        out.append(("\n" + "    " * depth if value else "") + "]")
    else:
        out.append(json.dumps(value))
