"""ipt (``em_ipt.c``): ``ipt([-6] -m MATCH [MATCH-OPTIONS])``, an xtables match, its words
read by glibc's getopt (:mod:`..getopt`, the state shared with the ``xt`` action's) and the
match found by libxtables (:mod:`..xtables`). Reproduced: every way tc fails on a term whose
match's extension is not installed, in tc's words; a match whose extension is installed is
refused naming it (its options are read by the extension itself)."""

from __future__ import annotations

from typing import NoReturn

from .. import getopt, xtables
from . import Arg, EmError

KIND, KIND_NUM = "ipt", 9
USAGE = """\
Usage: ipt([-6] -m MATCH_NAME [MATCH_OPTS])
Example: 'ipt(-m policy --reqid 1 --pol ipsec --dir in)'
"""
_LONGOPTS = {"match": (True, "m"), "ipv6": (False, "6")}


def parse_argv(args: list[Arg]) -> NoReturn:
    """``em_ipt_parse_eopt_argv``: ``args`` is the term's words, its kind first (tc hands
    getopt the kind as its program name)."""
    argv = [arg.cstr().decode("utf-8", "surrogateescape") for arg in args]
    said: list[str] = []

    def failed(text: str) -> EmError:
        return EmError("".join(f"{line}\n" for line in said) + text, report=False)

    family = 4
    scan = getopt.Scan(argv, len(argv), "6m:", _LONGOPTS, said)
    while (c := scan.next()) is not None:
        if c == "6":
            family = 6
            continue
        if c == "m":
            xtables.init(said)  # xtables_init_all(), at each -m
            xtables.find_match(scan.optarg, family, said)
            raise failed(f" failed to find match {scan.optarg}\n\n")
        raise failed(f"failed to find match {scan.optarg or '(null)'}\n\n")
    raise failed(f" failed to parse parameters ({argv[0]})\n")
