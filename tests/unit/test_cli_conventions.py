"""The CLI's conventions, as a user meets them: one-line errors with bpftool-like exit codes,
-h and -v/-q everywhere, --version, help written for the terminal, shell completion of every
value a shell can know. Commands are enumerated from the app (subcommands too), never listed
by hand: a new command is held to the conventions the day it appears."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from bpfbatch.cli.app import app
from bpfbatch.cli.argv import COMMANDS, MAP_KEYWORDS, MAP_WORD_ARGUMENTS

TOOLS = Path(__file__).resolve().parents[2] / "tools"
README = TOOLS.parent / "README.md"


def command_paths() -> list[tuple[list[str], object]]:
    """Every command and subcommand of the app: ``(["tc", "apply"], click command)``."""
    group = typer.main.get_group(app)
    ctx = group.make_context("bpfbatch", [], resilient_parsing=True)

    def walk(path, command):
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk([*path, name], sub)
    return [found for name in COMMANDS for found in walk([name], group.get_command(ctx, name))]


PATHS = command_paths()


def run(*args: str, exe=(sys.executable, "-m", "bpfbatch")) -> subprocess.CompletedProcess:
    return subprocess.run([*exe, *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "100"})


def assert_usage_error(proc, *fragments: str, prog: str = "bpfbatch") -> None:
    assert proc.returncode == 2, proc
    assert proc.stdout == ""
    assert proc.stderr.startswith(f"{prog}: error: ") and proc.stderr.count("\n") == 1, \
        proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr


@pytest.mark.parametrize("args,fragments", [
    (["dump", "993"], ["dump: got unexpected extra argument", "id ...", "pinned ..."]),
    (["dump", "--nope"], ["dump: no such option: --nope"]),
    (["count", "--map-id", "x"], ["count: invalid value for '--map-id'"]),
    (["load", "--map-id", "1"], ["load: missing argument"]),
    (["frobnicate"], ["no such command 'frobnicate'"]),
    (["top", "tcp", "--bogus"], ["top tcp: no such option: --bogus"]),
])
def test_usage_errors_are_one_line_with_exit_2(args, fragments):
    assert_usage_error(run(*args), *fragments)


def test_a_bad_option_value_found_by_the_library_is_a_usage_error_naming_the_flag():
    assert_usage_error(run("dump", "--map-id", "1", "--batch-size", "0"), "--batch-size")


def test_version_names_package_libbpf_and_kernel():
    proc = run("--version")
    assert proc.returncode == 0
    assert re.fullmatch(r"bpfbatch \d+\.\d+\.\d+ \(libbpf \d+\.\d+[.\d]*, Linux "
                        + re.escape(os.uname().release) + r"\)\n", proc.stdout)


@pytest.mark.parametrize("path", [path for path, _ in PATHS], ids=" ".join)
def test_every_command_has_h_and_plain_help(path):
    short, long = run(*path, "-h"), run(*path, "--help")
    assert short.returncode == 0 and short.stdout == long.stdout
    assert short.stdout.startswith(f"Usage: bpfbatch {' '.join(path)} ")
    for markup in ("<str>", "<bool>", "``", "╭", "[bold"):
        assert markup not in short.stdout, markup


def test_no_arguments_prints_the_help_and_exits_2():
    proc = run()
    assert proc.returncode == 2 and "Usage: bpfbatch" in proc.stderr


@pytest.mark.parametrize("flag", ["-v", "-q", "--verbose", "--quiet"])
def test_global_flags_are_taken_after_the_command_too(flag):
    # A usage error proves the flag was parsed (not rejected) and the command ran its checks.
    assert_usage_error(run("dump", flag, "--nope"), "no such option: --nope")
    assert_usage_error(run(flag, "dump", "--nope"), "no such option: --nope")


def test_a_flag_value_that_looks_like_a_global_flag_stays_a_value():
    proc = run("dump", "--name", "-q")  # the map named "-q": not found, rather than quiet
    assert proc.returncode == 1 and "'-q'" in proc.stderr


def test_tools_are_named_after_themselves():
    tool = (sys.executable, str(TOOLS / "tcptop.py"))
    proc = run("-h", exe=tool)
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: tcptop.py [OPTIONS]")
    assert_usage_error(run("--bogus", exe=tool), "no such option: --bogus", prog="tcptop.py")


def test_a_signal_python_wrapped_in_another_error_is_still_one_line_and_128_plus_n(capsys):
    """Python 3.11 wraps what a handler raised inside ``__set_name__`` in a RuntimeError."""
    from bpfbatch.cli import _run
    from bpfbatch.errors import Interrupted

    def wrapped():
        try:
            raise Interrupted(15)
        except Interrupted as exc:
            raise RuntimeError("Error calling __set_name__") from exc

    with pytest.raises(SystemExit) as done:
        _run(wrapped, restore=True)
    assert done.value.code == 143
    assert capsys.readouterr().err == "bpfbatch: interrupted (SIGTERM)\n"


#: The console script's end as a user's process meets it: a ``__del__`` of an object still
#: alive at the end prints only if the interpreter's teardown runs (Python does not promise it
#: even then, so only its absence is asserted); an ``atexit`` callback, or a thread that waits
#: for the main thread to end, must run before the process ends.
_ENDING = """
import atexit, sys, threading
from bpfbatch.cli import main

class TornDown:
    def __del__(self):
        print("torn down", flush=True)

probe = TornDown()
waiting = sys.argv.pop(1)
if waiting == "atexit":
    atexit.register(lambda: print("atexit ran", flush=True))
elif waiting == "thread":
    def late():
        threading.main_thread().join()  # returns once the main thread is done
        print("thread ran", flush=True)
    threading.Thread(target=late).start()
main()
"""


@pytest.mark.parametrize("args, status", [(["--version"], 0), (["no-such-command"], 2)],
                         ids=["done", "usage-error"])
@pytest.mark.parametrize("waiting", ["nothing", "atexit", "thread"])
def test_the_process_ends_without_teardown_only_when_nothing_waits_for_it(args, status,
                                                                           waiting):
    """Nothing waiting: the output, the status, and no teardown (``os._exit``). An ``atexit``
    callback or a live thread: each runs after the command, as Python's own exit runs them."""
    proc = subprocess.run([sys.executable, "-c", _ENDING, waiting, *args], capture_output=True,
                          text=True)
    assert proc.returncode == status, proc.stderr
    lines = proc.stdout.splitlines()
    if status == 0:
        assert lines[0].startswith("bpfbatch "), proc.stdout  # --version's line, flushed
        lines = lines[1:]
    else:
        assert proc.stderr.startswith("bpfbatch: error: "), proc.stderr
    if waiting == "nothing":
        assert lines == []  # not even "torn down"
    else:
        assert lines[0] == f"{waiting} ran", proc.stdout


#: Output still buffered in ``sys.stdout`` when the command fails: only the ending's flush
#: writes its last block (a failing command's outcome does not flush stdout).
_BUFFERED = """
import sys
from bpfbatch.cli import main
for i in range(20000):
    print(f"line {i}")
main()
"""


def test_what_is_buffered_when_a_command_fails_reaches_a_slow_pipe_whole():
    shell = f"{sys.executable} -c '{_BUFFERED}' no-such-command; echo status=$? >&2"
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.run(["sh", "-c", f"({shell}) | (sleep 0.3; cat)"], capture_output=True,
                          text=True, env=buffered)
    assert proc.stderr.startswith("bpfbatch: error: ") and proc.stderr.endswith("status=2\n")
    assert proc.stdout == "".join(f"line {i}\n" for i in range(20000))


#: Parameters whose values are a closed list or live objects a shell can offer, by name.
COMPLETED = {"map_id", "pinned", "name", "output", "decode", "fmt", "netns", "dev", "map_type",
             "key_type", "value_type", "action", "mode"}
#: Where one of those names holds a free value: (command, parameter) → what it is.
FREE = {("filter build", "output"): "the object file to write"}


def test_every_closed_or_live_value_completes():
    missing = [f"{' '.join(path)} {param.name}" for path, command in PATHS
               for param in command.params
               if param.name in COMPLETED and (" ".join(path), param.name) not in FREE
               and param._custom_shell_complete is None]
    assert not missing


def test_maps_given_as_arguments_complete_as_bpftools_words():
    """A command whose arguments are maps in bpftool's words (its help says ``pinned
    PATH``) completes them, and is one whose words the completion request leaves alone."""
    takers = {" ".join(path) for path, command in PATHS for param in command.params
              if param.param_type_name == "argument" and "pinned PATH" in (param.help or "")}
    assert takers == MAP_WORD_ARGUMENTS
    for path, command in PATHS:
        if " ".join(path) in takers:
            words = [p for p in command.params if p.param_type_name == "argument"][0]
            ctx = command.make_context(path[-1], ["id", "4", "./file"], resilient_parsing=True)
            offered = [c.value for c in words.shell_complete(ctx, "")]
            assert offered == list(MAP_KEYWORDS), path
            ctx = command.make_context(path[-1], ["./file", "id", "4", "pinned"],
                                       resilient_parsing=True)
            assert [c.value for c in words.shell_complete(ctx, "/no/such/")] == []


@pytest.mark.parametrize("line,expected", [
    ("diff -o ", ["table", "jsonl", "json"]),
    ("list -o ", ["table", "json", "jsonl", "csv"]),
    ("diff --format ", ["jsonl", "json", "csv", "bpftool-json", "parquet", "arrow"]),
    ("migrate --format p", ["parquet"]),
    ("load --format bpf", ["bpftool-json"]),
    ("migrate --decode key.a=ip", ["key.a=ipv4", "key.a=ipv6"]),
    ("diff --decode n", ["none"]),
    ("record -o j", ["json", "jsonl"]),
    ("list --type lru_h", ["lru_hash"]),
    ("diff ", ["id", "pinned", "name"]),
    ("migrate id 4 p", ["pinned"]),
    ("tc dump -n /", []),
])
def test_completion_of_fixed_values(line, expected):
    from typer._completion_classes import BashComplete

    words = line.split(" ")
    shell = BashComplete(typer.main.get_command(app), {}, "bpfbatch", "_BPFBATCH_COMPLETE")
    assert [c.value for c in shell.get_completions(words[:-1], words[-1])] == expected


def test_the_readme_names_every_command_up_front_and_gives_its_synopsis():
    """The opening list names each command (in a code span), and a line of the README
    begins with it: its synopsis, or a transcript's ``$ bpfbatch ...``."""
    text = README.read_text()
    opening = " ".join(re.findall(r"`([^`]*)`", text[:text.index("\n## ")], re.S))
    named = set(re.findall(r"[\w-]+", opening))
    unnamed = [" ".join(path) for path, _ in PATHS if path[-1] not in named]
    no_synopsis = [" ".join(path) for path, _ in PATHS if not re.search(
        rf"^(\$ )?bpfbatch {re.escape(' '.join(path))}\b", text, re.M)]
    assert not unnamed and not no_synopsis
