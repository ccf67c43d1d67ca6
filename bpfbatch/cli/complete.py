"""Shell completion's values: what a word of a command line can be, offered live.

Map ids (with each map's type and name as help), map names and pinned paths come from the
system at the moment of the <TAB>, and so do network namespaces and devices; formats,
decoders, actions and modes are the fixed lists. Each function takes the word typed so far
(and, where what came before matters, click's context: ``ctx``) and returns ``(value,
help)`` pairs, as typer's ``autocompletion=`` wants. A failure to read the system (not
root, no libbpf) completes nothing rather than failing the shell; so does a word that is a
file's, which the shell then completes as one.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator

from ..errors import BpfBatchError
from .argv import MAP_KEYWORDS
from .options import DECODE_KINDS, DIFF_FORMATS, INPUT_FORMATS, LIST_FORMATS, OUTPUT_FORMATS

Candidates = list[tuple[str, str]]


def _words(text: str) -> list[str]:
    """``"a, b or c"`` as ``["a", "b", "c"]``."""
    return text.replace(" or ", ", ").replace(",", " ").split()


def choices(text: str, help_: str = "") -> Callable[[str], Candidates]:
    """Completion over the words of ``text`` (``"count, dump or delete"``)."""
    words = _words(text)
    return lambda incomplete: [(w, help_) for w in words if w.startswith(incomplete)]


def _live(read: Callable[[], Iterator[tuple[str, str]]]) -> Callable[[str], Candidates]:
    def complete(incomplete: str) -> Candidates:
        try:
            return [(value, help_) for value, help_ in read() if value.startswith(incomplete)]
        except (BpfBatchError, OSError):
            return []
    return complete


def _ids() -> Iterator[tuple[str, str]]:
    from ..map.handle import iter_infos

    for info in iter_infos():
        yield str(info.id), f"{info.type_name} '{info.name}'"


def _names() -> Iterator[tuple[str, str]]:
    from ..map.handle import iter_infos

    for info in iter_infos():
        if info.name:
            yield info.name, f"id {info.id} {info.type_name}"


def _pins() -> Iterator[tuple[str, str]]:
    from ..map.handle import pinned_paths

    for map_id, paths in pinned_paths().items():
        for path in paths:
            yield path, f"map id {map_id}"


def _map_types() -> Iterator[tuple[str, str]]:
    from .._sys.abi import MapType

    for kind in MapType:
        yield kind.label, ""


def _netns() -> Iterator[tuple[str, str]]:
    from ..tc.netns import NETNS_RUN_DIR

    for name in sorted(os.listdir(NETNS_RUN_DIR)):
        yield name, "network namespace"


def _devices(netns: str | None) -> Iterator[tuple[str, str]]:
    from ..tc.netns import entered

    with entered(netns):
        found = socket.if_nameindex()
    for index, name in found:
        yield name, f"ifindex {index}"


map_ids = _live(_ids)
map_names = _live(_names)
pinned_paths = _live(_pins)
map_types = _live(_map_types)
netns_names = _live(_netns)
output_formats = choices(OUTPUT_FORMATS)
input_formats = choices(INPUT_FORMATS)
list_formats = choices(LIST_FORMATS)
diff_formats = choices(DIFF_FORMATS)
actions = choices("count, dump or delete")
modes = choices("auto, kernel, kernel-fast or user")
c_types = choices("u8, u16, u32, u64, s8, s16, s32, s64, __be16, __be32, __be64, float, "
                  "double or bool")


def decoders(incomplete: str) -> Candidates:
    """``FIELD=KIND``: the kinds after the ``=`` (and ``none``)."""
    field, eq, kind = incomplete.partition("=")
    if not eq:
        return [("none", "no automatic decoding")] if "none".startswith(field) else []
    return [(f"{field}={k}", "") for k in _words(DECODE_KINDS) if k.startswith(kind)]


def devices(ctx, incomplete: str) -> Candidates:
    """Network devices: the namespace's that ``-n NAME``, given before, names."""
    return _live(lambda: _devices(ctx.params.get("netns")))(incomplete)


#: What follows each of bpftool's ``MAP`` keywords.
_MAP_VALUES = {"id": map_ids, "pinned": pinned_paths, "name": map_names}


def any_map(incomplete: str) -> Candidates:
    """One word naming a map: its id, pinned path or name (``diff --like``)."""
    return [found for values in _MAP_VALUES.values() for found in values(incomplete)]


def map_words(ctx, incomplete: str) -> Candidates:
    """Maps in bpftool's words as a command's arguments (``diff id 4 pinned PATH``,
    ``migrate FROM TO``): after ``id``, ``pinned`` or ``name`` that kind's live values;
    elsewhere those keywords, or nothing for a word none of them begins (a file's)."""
    typed = next((ctx.params.get(p.name) or () for p in ctx.command.params
                  if p.param_type_name == "argument"), ())
    pending, at = None, 0
    while at < len(typed):
        pending = typed[at] if typed[at] in MAP_KEYWORDS and at + 1 == len(typed) else None
        at += 2 if typed[at] in MAP_KEYWORDS else 1
    if pending is not None:
        return _MAP_VALUES[pending](incomplete)
    return [(word, f"a map by {word}") for word in MAP_KEYWORDS if word.startswith(incomplete)]
