"""glibc's ``getopt_long`` as tc's xtables parsers call it (``m_xt.c``, ``em_ipt.c``), so that
what they print and where they stop is tc's.

tc never resets getopt between the lines of a batch when those parsers fail (only ``xt``'s
success path stores 0 in ``optind``), so a line starts from the state the last such line left
— its ``optind``, the range of non-options it had permuted — and may permute the new line's
words or stop at once. That state is kept per batch (:data:`~.grammar.BATCH_STATE`) and shared
by both parsers, as tc's one global is. Where it would make glibc read past the words it was
given (tc then reads a NULL or stale pointers, and mostly crashes), or go on inside an element
of an earlier line (its ``nextchar`` points into tc's reused line buffer), the line is refused
saying so (:class:`Unreadable`).
"""

from __future__ import annotations

import dataclasses
import os

from .grammar import BATCH_STATE, CommandError


class Unreadable(CommandError):
    """Where tc's getopt would read memory the line does not define: tc mostly crashes there
    (SIGSEGV), ending the batch, so this ends it too (exit 1)."""

    def __init__(self, text: str) -> None:
        super().__init__(text, fatal=True, status=1)


@dataclasses.dataclass(slots=True)
class _State:
    """glibc's ``struct _getopt_data`` and ``optind`` as they persist between calls."""

    optind: int = 1
    initialized: bool = False
    first_nonopt: int = 1
    last_nonopt: int = 1
    #: The rest of the element being scanned ("" or None: none).
    nextchar: str | None = None
    permute: bool = True


def state() -> _State:
    """The batch's getopt state (a fresh one outside a batch)."""
    kept = BATCH_STATE.get()
    if kept is None:
        return _State()
    return kept.setdefault(__name__, _State())


def reset() -> None:
    """``optind = 0``: the next scan starts afresh."""
    state().optind = 0


class Scan:
    """``getopt_long(argc, argv, optstring, longopts, NULL)`` called until it returns -1:
    ``argv`` is tc's array (permuted in place, as glibc permutes it; its length is what tc's
    array holds, which may be more than ``argc``), ``longopts`` maps each long name to
    ``(has_arg, val)`` in tc's order. What glibc prints is appended to ``said``, a line each."""

    def __init__(self, argv: list[str], argc: int, optstring: str,
                 longopts: dict[str, tuple[bool, str]], said: list[str]) -> None:
        self.argv, self.argc, self.optstring, self.longopts = argv, argc, optstring, longopts
        self.d = state()
        self.optarg: str | None = None
        self.said = said
        if self.d.nextchar:
            raise Unreadable(f"{argv[0]}: getopt would go on inside a word of an earlier line "
                             "(tc reads its reused line buffer here)")

    @property
    def optind(self) -> int:
        return self.d.optind

    def word(self, index: int) -> str:
        """``argv[index]``, refused where tc's array holds no word there."""
        if index >= len(self.argv):
            raise Unreadable(f"{self.argv[0]}: getopt's position, left by an earlier line, lies "
                             "past this line's words (tc reads beyond its array here)")
        return self.argv[index]

    def _nonoption(self, index: int) -> bool:
        text = self.word(index)
        return not text.startswith("-") or text == "-"

    def _exchange(self) -> None:
        d = self.d
        bottom, middle, top = d.first_nonopt, d.last_nonopt, d.optind
        if top > middle > bottom:
            self.word(top - 1)  # the block swap touches every slot up to top
            self.argv[bottom:top] = self.argv[middle:top] + self.argv[bottom:middle]
        d.first_nonopt += d.optind - d.last_nonopt
        d.last_nonopt = d.optind

    def next(self) -> str | None:
        """The next option character (``"?"`` for a bad one), or None (glibc's -1)."""
        d, argc = self.d, self.argc
        self.optarg = None
        if d.optind == 0 or not d.initialized:
            d.optind = d.optind or 1
            d.first_nonopt = d.last_nonopt = d.optind
            d.nextchar = None
            d.permute = "POSIXLY_CORRECT" not in os.environ
            d.initialized = True
        if not d.nextchar:
            d.last_nonopt = min(d.last_nonopt, d.optind)
            d.first_nonopt = min(d.first_nonopt, d.optind)
            if d.permute:
                if d.first_nonopt != d.last_nonopt and d.last_nonopt != d.optind:
                    self._exchange()
                elif d.last_nonopt != d.optind:
                    d.first_nonopt = d.optind
                while d.optind < argc and self._nonoption(d.optind):
                    d.optind += 1
                d.last_nonopt = d.optind
            if d.optind != argc and self.word(d.optind) == "--":
                d.optind += 1
                if d.first_nonopt != d.last_nonopt and d.last_nonopt != d.optind:
                    self._exchange()
                elif d.first_nonopt == d.last_nonopt:
                    d.first_nonopt = d.optind
                d.last_nonopt = argc
                d.optind = argc
            if d.optind == argc:
                if d.first_nonopt != d.last_nonopt:
                    d.optind = d.first_nonopt
                return None
            if self._nonoption(d.optind):
                if not d.permute:
                    return None
                self.optarg = self.argv[d.optind]
                d.optind += 1
                return "\1"
            if self.argv[d.optind][1] == "-":
                d.nextchar = self.argv[d.optind][2:]
                return self._long()
            d.nextchar = self.argv[d.optind][1:]
        return self._short()

    def _short(self) -> str:
        d = self.d
        c, d.nextchar = d.nextchar[0], d.nextchar[1:]
        at = self.optstring.find(c)
        if not d.nextchar:
            d.optind += 1
        if at < 0 or c in ":;":
            self.said.append(f"{self.argv[0]}: invalid option -- '{c}'")
            return "?"
        if self.optstring[at + 1:at + 2] == ":":
            if d.nextchar:
                self.optarg = d.nextchar
                d.optind += 1
            elif d.optind == self.argc:
                self.said.append(f"{self.argv[0]}: option requires an argument -- '{c}'")
                c = "?"
            else:
                self.optarg = self.word(d.optind)
                d.optind += 1
            d.nextchar = None
        return c

    def _long(self) -> str:
        """glibc's ``process_long_option`` for a ``--`` element (no abbreviation is ambiguous
        between options with the same has_arg and val; tc's have different ones)."""
        d = self.d
        name, eq, value = d.nextchar.partition("=")
        found = name if name in self.longopts else None
        if found is None:
            candidates = [option for option in self.longopts if option.startswith(name)]
            if len(candidates) > 1:
                shown = " ".join(f"'--{option}'" for option in candidates)
                self.said.append(f"{self.argv[0]}: option '--{d.nextchar}' is ambiguous; "
                                 f"possibilities: {shown}")
                d.nextchar = ""
                d.optind += 1
                return "?"
            if not candidates:
                self.said.append(f"{self.argv[0]}: unrecognized option '--{d.nextchar}'")
                d.nextchar = None
                d.optind += 1
                return "?"
            found = candidates[0]
        has_arg, val = self.longopts[found]
        d.optind += 1
        d.nextchar = None
        if eq:
            if not has_arg:
                self.said.append(f"{self.argv[0]}: option '--{found}' doesn't allow an argument")
                return "?"
            self.optarg = value
        elif has_arg:
            if d.optind < self.argc:
                self.optarg = self.word(d.optind)
                d.optind += 1
            else:
                self.said.append(f"{self.argv[0]}: option '--{found}' requires an argument")
                return "?"
        return val
