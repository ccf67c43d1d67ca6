"""``bpfbatch tc`` through the console entry point, for what needs no privileges: bad files and
bad lines are refused before anything is sent."""

from __future__ import annotations

import subprocess
import sys


def _bpfbatch(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from bpfbatch.cli import main; main()", *argv],
                          input=stdin, capture_output=True, text=True, check=False)


def test_missing_file(tmp_path):
    done = _bpfbatch("tc", "-b", str(tmp_path / "nope.tc"))
    assert done.returncode == 1
    assert done.stderr == (f'Cannot open file "{tmp_path / "nope.tc"}" for reading: No such '
                           "file or directory\n")  # tc's line


def test_bad_first_line_from_stdin_is_refused_like_tc():
    done = _bpfbatch("tc", "-b", "-", stdin="# rules\nfilter add dev lo ingress foo\n")
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines == ["unsupported filter option or classifier 'foo'", "Command failed -:2"]


def test_iproute2_single_dash_options_are_accepted():
    from bpfbatch.cli.argv import iproute2_argv

    assert iproute2_argv(["-force", "-batch", "f", "-netns", "x", "-j", "-b", "g", "-fo", "-ba"]) == \
        ["--force", "--batch", "f", "--netns", "x", "-j", "-b", "g", "--force", "--batch"]
    done = _bpfbatch("tc", "-force", "-batch", "-", stdin="filter add dev lo ingress fw\n")
    assert done.returncode == 1 and done.stderr.endswith("Command failed -:1\n")


def test_batch_bytes_below_minimum_is_a_usage_error(tmp_path):
    done = _bpfbatch("tc", "-b", "-", "--batch-bytes", "100", stdin="")
    assert done.returncode == 2
    assert "--batch-bytes" in done.stderr
