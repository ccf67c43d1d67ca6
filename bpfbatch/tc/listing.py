"""Lines of a batch that tc answers by printing (``filter show``, ``actions list``, ...), and
``actions flush``: run by iproute2's ``tc`` itself at their point of the batch, after every
line before them is settled, so what they print is tc's own listing, text or JSON, byte for
byte, showing exactly the lines before them applied. Without ``tc`` on PATH such a line fails
with one line saying so."""

from __future__ import annotations

import sys

#: tc's exit status when it cannot run at all (as a shell says for a missing command).
NOT_FOUND = 127


def tc_printer(netns: str | None, *, json: bool = False):
    """A ``Session(on_listing=...)`` callback: runs the line as a one-line batch of
    ``tc [-j] [-n NETNS] -b -`` (so its exit status means what it means inside a batch: 0, 1
    for a failed command, 255 when tc's parser ended it), its listing on this process's
    stdout, its messages on stderr without tc's own ``Command failed -:1`` (the caller names
    the real line); returns that status."""
    options = ["-j"] if json else []
    enter: list[str] = []
    if netns is not None:
        if "/" in netns:  # a path: tc's -n takes only a name under /var/run/netns
            enter = ["nsenter", f"--net={netns}"]
        else:
            options += ["-n", netns]

    def print_listing(words: tuple[str, ...]) -> int:
        import shutil  # here: every tc -b makes a printer, few batches have a listing line
        import subprocess

        tc = shutil.which("tc")
        sys.stdout.flush()
        sys.stderr.flush()
        if tc is None:
            print(f"'{' '.join(words)}' is read by iproute2's tc, which is not installed",
                  file=sys.stderr)
            return NOT_FOUND
        line = " ".join(f'"{word}"' if not word or any(c.isspace() for c in word) else word
                        for word in words)
        run = subprocess.run([*enter, tc, *options, "-b", "-"], input=line + "\n", text=True,
                             stderr=subprocess.PIPE, check=False)
        said = run.stderr
        if said.endswith(_FAILED):
            said = said[:-len(_FAILED)]
        sys.stderr.write(said)
        return run.returncode

    return print_listing


#: What tc adds after a failed line of its batch on stdin.
_FAILED = "Command failed -:1\n"
