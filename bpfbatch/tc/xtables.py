"""Where libxtables (iptables 1.8, the library tc's ``xt`` action and ``ipt`` ematch call) looks
for an extension, and what it prints on the way, so that a line naming an extension that is
not installed fails as tc's does.

An extension that *is* installed cannot be read here: its options are parsed by its own
shared object through libxtables, so such a line is refused naming it (:class:`Installed`).
"""

from __future__ import annotations

import errno
import os
import sysconfig

from .grammar import BATCH_STATE, CommandError

#: The libprefix of each family (``afinfo->libprefix``), then the family-neutral one.
_PREFIXES = {4: ("libipt_", "libxt_"), 6: ("libip6t_", "libxt_")}
#: ``XT_EXTENSION_MAXNAMELEN``: a match name this long or longer is an error (exit 2).
_MAX_NAME = 29


class Installed(CommandError):
    """The extension exists: its options would need libxtables itself."""


def init(said: list[str]) -> None:
    """``xtables_init()``'s lines about deprecated variables (it runs on every
    ``xtables_init_all()``), into ``said``."""
    if "XTABLES_LIBDIR" in os.environ:
        return
    for name in ("IPTABLES_LIB_DIR", "IP6TABLES_LIB_DIR"):
        if name in os.environ:
            said.append(f"{name} is deprecated, use XTABLES_LIBDIR.")
            return


def libdir() -> str:
    """``xtables_libdir``: the first of the variables set, else the compiled-in directory
    (Debian's multiarch one)."""
    for name in ("XTABLES_LIBDIR", "IPTABLES_LIB_DIR", "IP6TABLES_LIB_DIR"):
        if name in os.environ:
            return os.environ[name]
    return f"/usr/lib/{sysconfig.get_config_var('MULTIARCH') or 'x86_64-linux-gnu'}/xtables"


def find_target(name: str, said: list[str]) -> bool:
    """``xtables_find_target(name, XTF_TRY_LOAD)``: False where it finds nothing (what it
    printed on the way in ``said``); Installed where the extension exists. A name not found
    is remembered for the batch (libxtables' ``notargets`` list), so later lookups of it look
    nowhere, and print nothing."""
    if name in ("", "ACCEPT", "DROP", "QUEUE", "RETURN"):
        name = "standard"
    else:
        kept = BATCH_STATE.get()
        missing = set() if kept is None else kept.setdefault(__name__, set())
        if name in missing:
            return False
        _load(name, 4, "target", said)
        missing.add(name)
        return False
    _load(name, 4, "target", said)
    return False


def find_match(name: str, family: int, said: list[str]) -> bool:
    """``xtables_find_match(name, XTF_TRY_LOAD, NULL)`` for ``family`` (4 or 6): as
    :func:`find_target` (no list of names not found); a name too long ends tc, exit 2, in
    ``basic_exit_err``'s words."""
    if len(name.encode(errors="surrogateescape")) >= _MAX_NAME:
        raise CommandError("".join(f"{line}\n" for line in said)
                           + f'tc-em-ipt v0.1: Invalid match name "{name}" ({_MAX_NAME - 1} '
                           "chars max)\nTry `tc-em-ipt -h' or 'tc-em-ipt --help' for more "
                           "information.", fatal=True, status=2)
    if name in ("icmpv6", "ipv6-icmp"):
        name = "icmp6"
    _load(name, family, "match", said)
    return False


def _load(name: str, family: int, what: str, said: list[str]) -> None:
    """``load_extension()``: each directory of the search path, each prefix; a path that
    cannot be examined (other than absent) ends the search with its error printed."""
    for directory in libdir().split(":"):
        for prefix in _PREFIXES[family]:
            path = f"{directory}/{prefix}{name}.so"
            try:
                os.stat(path)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    continue
                said.append(f"{path}: {os.strerror(exc.errno or 0)}")
                return
            raise Installed(f"xtables {what} {name} is installed ({path}): its options are "
                            "read by libxtables, which this package does not load")
