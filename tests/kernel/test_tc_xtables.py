"""The xtables kinds (the ``xt`` action, the ``ipt`` ematch) as tc reads them with glibc's
getopt and libxtables: the getopt state one line leaves to the next (tc never resets it when
they fail), the library path from the environment, and an installed extension refused by
name. The single-line forms are probes (``data/tc_probes/xt.txt``, ``ipt.txt``)."""

from __future__ import annotations

import pytest

from tc_helpers import bpfbatch_tc, side_by_side, veth_netns

_MIRRED = "actions add action mirred egress redirect dev vethB index 5\n"
_BASIC = "filter add dev vethA parent ffff: basic match"


def _same(batch, mode=("-force",)):
    theirs, their_state, ours, our_state = side_by_side(batch, mode)
    assert (ours.returncode, ours.stdout, ours.stderr, our_state) == \
        (theirs.returncode, theirs.stdout, theirs.stderr, their_state)
    return ours


def test_getopt_state_carries_from_line_to_line(tmp_path):
    """Each failing line leaves getopt's position and permuted range to the next, xt's and
    ipt's alike: the second ``-j`` line stops at once, later ones permute their words."""
    batch = tmp_path / "xt.tc"
    batch.write_text("actions add action xt -j NOSUCH\n"
                     "actions add action xt -j NOSUCH\n"
                     f"{_BASIC} 'ipt(-m nosuch)'\n"
                     "actions add action xt a b c -j NOSUCH\n"
                     "actions add action xt -x foo --jump 1 2 3 4\n"
                     f"{_BASIC} 'ipt(a b c -6 d -m nosuch e f g)'\n"
                     "actions add action xt index 3 a b --jump NOSUCH c d e f g\n" + _MIRRED)
    ours = _same(batch)
    assert ours.stderr.count("ipt Parser BAD!!") == 3


def test_getopt_position_past_the_words_ends_the_batch(tmp_path):
    """A position left past the next line's words: tc reads beyond its array and crashes;
    bpfbatch ends the batch there saying so, nothing after it applied in either."""
    batch = tmp_path / "xt.tc"
    batch.write_text("actions add action xt a b c d e -j NOSUCH\n"
                     "actions add action xt -j NOSUCH\n" + _MIRRED)
    theirs, their_state, ours, our_state = side_by_side(batch, ("-force",))
    assert theirs.returncode == -11  # SIGSEGV
    assert ours.returncode == 1 and our_state == their_state
    assert ours.stderr.splitlines()[-1] == (
        "xt: getopt's position, left by an earlier line, lies past this line's words (tc reads "
        "beyond its array here)")


@pytest.mark.parametrize("variable", ["XTABLES_LIBDIR", "IPTABLES_LIB_DIR"])
def test_library_path_from_the_environment(tmp_path, monkeypatch, variable):
    """Each directory of the path is looked in; one that cannot be examined ends the search
    with its error; a target not found is not looked for again; the deprecated variable is
    named on each lookup (by libxtables, and for xt by tc too)."""
    monkeypatch.setenv(variable, f"{tmp_path}/none:/etc/passwd")
    batch = tmp_path / "xt.tc"
    batch.write_text("actions add action xt -j NOSUCH\n"
                     "actions add action xt a b -j NOSUCH\n"
                     f"{_BASIC} 'ipt(-m nosuch a b c)'\n" + _MIRRED)
    ours = _same(batch)
    assert ours.stderr.count("/etc/passwd/libipt_NOSUCH.so: Not a directory") == 1


def test_installed_extension_refused_by_name(tmp_path, monkeypatch):
    """An extension that exists would parse its own options through libxtables: the line is
    refused naming it (the rest of the batch goes on with -force)."""
    (tmp_path / "libxt_FAKE.so").touch()
    (tmp_path / "libipt_fakem.so").touch()
    monkeypatch.setenv("XTABLES_LIBDIR", str(tmp_path))
    batch = tmp_path / "xt.tc"
    batch.write_text("qdisc add dev vethA ingress\n"
                     f"{_BASIC} 'ipt(-m fakem)'\n"
                     "actions add action xt a b -j FAKE\n" + _MIRRED)
    with veth_netns() as ns:
        ours = bpfbatch_tc(ns, batch, "-force")
    assert ours.returncode == 1
    assert f"xtables target FAKE is installed ({tmp_path}/libxt_FAKE.so)" in ours.stderr
    assert f"xtables match fakem is installed ({tmp_path}/libipt_fakem.so)" in ours.stderr
    assert ours.stderr.count("Command failed") == 2
