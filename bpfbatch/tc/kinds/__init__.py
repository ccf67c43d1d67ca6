"""One module per tc kind, as iproute2 keeps ``m_gact.c``, ``f_u32.c``, ``q_htb.c``: each holds
its kind's parser, usage text and error words, over the shared words of :mod:`..grammar`.

A module names its kind(s) in ``NAMES`` and defines a parser for each role it plays:
``parse_action(w, left)`` (``left``: tc's argc at the kind word, which some error lines print),
``parse_filter(w)``, ``parse_qdisc(w, name)`` or ``parse_class(w, name)``, each returning the
:mod:`..rules` object; a classifier reading its own ``handle`` (tc passes it to the kind)
defines ``parse_handle(text, classifier)`` (``text`` None when the line gives none). Adding a kind is adding a module here; :func:`parsers` finds it.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable

ROLES = ("action", "filter", "qdisc", "class", "handle")


@functools.cache
def parsers(role: str) -> dict[str, Callable]:
    """Every kind's parser for ``role`` (one of :data:`ROLES`), by kind word."""
    if role not in ROLES:
        raise ValueError(role)
    table = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        parse = getattr(module, f"parse_{role}", None)
        if parse is not None:
            table.update(dict.fromkeys(module.NAMES, parse))
    return table
