"""One module per tc kind, as iproute2 keeps ``m_gact.c``, ``f_u32.c``, ``q_htb.c``: each holds
its kind's parser, usage text and error words, over the shared words of :mod:`..grammar`.

A module names its kind(s) in ``NAMES`` and defines a parser for each role it plays:
``parse_action(w, left)`` (``left``: tc's argc at the kind word, which some error lines print),
``parse_filter(w)``, ``parse_qdisc(w, name)`` or ``parse_class(w, name)``, each returning the
:mod:`..rules` object; a classifier reading its own ``handle`` (tc passes it to the kind)
defines ``parse_handle(text, classifier)`` (``text`` None when the line gives none); a
classifier reading the filter's protocol and parent as tc's message header holds them when the
kind parses (flower) marks its parser ``reads_header`` and is called ``parse_filter(w,
protocol, parent)``. Adding a kind is adding a module here; :func:`parsers` finds it.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable

ROLES = ("action", "filter", "qdisc", "class", "handle")


@functools.cache
def parsers(role: str) -> Parsers:
    """Every kind's parser for ``role`` (one of :data:`ROLES`), by kind word."""
    if role not in ROLES:
        raise ValueError(role)
    return Parsers(role)


class Parsers:
    """A role's parsers by kind word (``word in p``, ``p[word]``, ``p.get(word)``), each
    kind's module imported when its word is first looked up: a ``tc -b`` process pays for the
    kinds its lines name, not for every kind there is (each costs its import at every start).

    A word that is its module's name and among that module's ``NAMES`` is that module's
    (no word is named by two modules: a unit test holds it); any other word — an alias such
    as ``clsact``, or no kind at all — is looked up in the table of every kind, made once."""

    def __init__(self, role: str) -> None:
        self.role = role
        self._found: dict[str, Callable | None] = {}
        self._all: dict[str, Callable] | None = None

    def get(self, word: str, default=None):
        if word not in self._found:
            self._found[word] = self._own(word) or self.table().get(word)
        found = self._found[word]
        return default if found is None else found

    def __contains__(self, word: str) -> bool:
        return self.get(word) is not None

    def __getitem__(self, word: str) -> Callable:
        parse = self.get(word)
        if parse is None:
            raise KeyError(word)
        return parse

    def _own(self, word: str) -> Callable | None:
        """The parser of the module named ``word``, if it names that kind."""
        if not word.isidentifier() or word not in _MODULES:
            return None
        module = importlib.import_module(f"{__name__}.{word}")
        return getattr(module, f"parse_{self.role}", None) \
            if word in getattr(module, "NAMES", ()) else None

    def table(self) -> dict[str, Callable]:
        """Every kind's parser for the role, by kind word (imports every kind)."""
        if self._all is None:
            self._all = {}
            for name in sorted(_MODULES):
                module = importlib.import_module(f"{__name__}.{name}")
                parse = getattr(module, f"parse_{self.role}", None)
                if parse is not None:
                    self._all.update(dict.fromkeys(module.NAMES, parse))
        return self._all


#: The kind modules, by name (listed without importing them).
_MODULES = frozenset(info.name for info in pkgutil.iter_modules(__path__))
