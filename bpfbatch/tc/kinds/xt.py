"""xt (``m_xt.c``): ``xt -j TARGET [TARGET-OPTIONS] [index N]``, an iptables target for the
kernel's act_ipt, its words read by glibc's getopt (:mod:`..getopt`) and the target found by
libxtables (:mod:`..xtables`). Reproduced: every way tc fails on a line whose target's
extension is not installed (none is on a machine without iptables' extensions), in tc's words.
A target whose extension is installed, and ``xt index N`` naming no target (which tc sends,
printing a table and hook on stdout), are refused naming what they are."""

from __future__ import annotations

import os
from typing import NoReturn

from .. import getopt, xtables
from ..action_list import action_failed
from ..grammar import CommandError, Words, matches
from ..numbers import unsigned

NAMES = ("xt",)


def parse_action(w: Words, left: int) -> NoReturn:
    """tc's ``parse_ipt``, the cursor on ``xt``: it reads the words up to the next ``action``
    (``argc``), though getopt and its ``index`` may look further into the line (``argv``)."""
    argv = w.words[w.pos:-1]  # without the end sentinel
    said: list[str] = []
    xtables.init(said)  # xtables_init_all(), then tc's set_lib_dir()
    if "XTABLES_LIBDIR" not in os.environ and "IPTABLES_LIB_DIR" in os.environ:
        said.append("using deprecated IPTABLES_LIB_DIR")

    def failed(text: str) -> CommandError:
        return action_failed("".join(f"{line}\n" for line in said) + text, left, argv[0])

    argc = next((n for n, word in enumerate(argv) if word == "action"), len(argv))
    if argc <= 2:
        raise failed("too few arguments for xt, need at least '-j <target>'")
    scan = getopt.Scan(argv, argc, "j:", {"jump": (True, "j")}, said)
    while (c := scan.next()) is not None:
        if c == "j":
            xtables.find_target(scan.optarg, said)
            raise failed(f" failed to find target {scan.optarg}\n")
        # any other option: tc has no target to hand it to (glibc's optarg: NULL for a bad
        # option, the word itself for one read past argc)
        raise failed(f"failed to find target {scan.optarg or '(null)'}\n")
    at = scan.optind
    if argc > at and matches(argv[at], "index"):
        if unsigned(argv[at + 1] if at + 1 < len(argv) else None, 10) is None:
            raise failed('Illegal "index"')
        getopt.reset()  # tc's success path stores 0 in optind
        raise CommandError("xt: an action naming no target (xt index N) is not sent by this "
                           "package")
    raise failed(f" ipt Parser BAD!! ({argv[0]})")
