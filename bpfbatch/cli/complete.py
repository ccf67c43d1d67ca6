"""Shell completion's values: what a word of a command line can be, offered live.

Map ids (with each map's type and name as help), map names and pinned paths come from the
system at the moment of the <TAB>; formats, decoders, actions and modes are the fixed
lists. Each function takes the word typed so far and returns ``(value, help)`` pairs, as
typer's ``autocompletion=`` wants. A failure to read the system (not root, no libbpf)
completes nothing rather than failing the shell.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..errors import BpfBatchError
from .options import DECODE_KINDS, OUTPUT_FORMATS

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


map_ids = _live(_ids)
map_names = _live(_names)
pinned_paths = _live(_pins)
output_formats = choices(OUTPUT_FORMATS)
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
