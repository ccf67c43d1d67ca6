"""The CLI spells out a few library facts so that starting a command does not import the
whole library; these tests keep the two in step."""

import importlib
import re
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from bpfbatch import tc
from bpfbatch.cli.app import app
from bpfbatch.cli.argv import COMMANDS
from bpfbatch.cli.options import (
    DEFAULT_BATCH,
    DIFF_FORMATS,
    INPUT_FORMATS,
    LIST_FORMATS,
    OUTPUT_FORMATS,
)
from bpfbatch.map import handle
from bpfbatch.formats import read, render


def test_output_help_lists_exactly_the_renderers():
    assert re.split(r", | or ", OUTPUT_FORMATS) == list(render.RENDERERS)


def test_the_other_format_lists_are_exactly_the_librarys():
    """What --format, list -o and diff -o say and complete is what each one takes."""
    from bpfbatch.cli import maps
    from bpfbatch.compare import render as diff_render

    for spelled, taken in ((INPUT_FORMATS, read.READ_FORMATS), (LIST_FORMATS, maps.LIST_FORMATS),
                           (DIFF_FORMATS, diff_render.FORMATS)):
        assert re.split(r", | or ", spelled) == list(taken)


def test_tc_batch_bytes_help_states_the_senders_default():
    result = CliRunner().invoke(app, ["tc", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert f"default {tc.DEFAULT_BATCH_BYTES >> 10} KiB" in result.output


def test_default_batch_is_the_librarys():
    assert DEFAULT_BATCH == handle.DEFAULT_BATCH


@pytest.mark.parametrize("name", list(COMMANDS))
def test_registry_names_each_commands_module_and_its_help(name):
    module_name, short_help = COMMANDS[name]
    importlib.import_module(f"bpfbatch.cli.{module_name}")  # the registry's module loads
    command = typer.main.get_group(app).get_command(None, name)
    assert " ".join((command.help or "").replace("`", "").split()).startswith(short_help.rstrip("."))


def test_top_level_help_lists_every_command():
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for name in COMMANDS:
        assert re.search(rf"\b{re.escape(name)}\b", result.output)


# Make libbpf.so.1 fail to load, as on a machine without it, then run the CLI.
_NO_LIBBPF = """
import ctypes, sys
real = ctypes.CDLL
def refuse(name, *args, **kwargs):
    if name and "libbpf" in str(name):
        raise OSError(f"{name}: cannot open shared object file")
    return real(name, *args, **kwargs)
ctypes.CDLL = refuse
from bpfbatch.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("argv", [["tc", "--help"], ["--help"]])
def test_runs_without_libbpf(argv):
    done = subprocess.run([sys.executable, "-c", _NO_LIBBPF, *argv], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Usage: bpfbatch" in done.stdout
    assert "Traceback" not in done.stderr


def test_without_libbpf_the_map_side_fails_in_one_line():
    done = subprocess.run([sys.executable, "-c", _NO_LIBBPF, "count", "--map-id", "1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith("bpfbatch: error: cannot load libbpf.so.1")
    assert done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize("argv", [["dump", "--map-id", "4294967295", "-o", "yaml"],
                                  ["drain", "--map-id", "4294967295", "-o", "yaml"],
                                  ["exec", "--map-id", "4294967295", "--where", "a == 1",
                                   "--action", "delete", "-o", "yaml"]])
def test_output_format_is_checked_before_any_map_is_opened(argv):
    """The map does not exist: the error is about -o, so the map was never looked up."""
    result = CliRunner().invoke(app, argv)
    assert result.exit_code != 0
    assert "--output: unknown format 'yaml'" in str(result.exception)


def test_library_errors_are_worded_with_the_flags():
    done = subprocess.run([sys.executable, "-m", "bpfbatch", "count", "--map-id", "1",
                           "--batch-size", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == "bpfbatch: error: --batch-size: must be a positive number, got 0\n"
