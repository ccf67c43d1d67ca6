"""The thin entry point against typer: for any argv, the fast path either declines (typer
reads it) or makes exactly the call typer makes — same command body, same keyword values, same
global flags. Both paths run with the command bodies and the global flags replaced by
recorders, so what is compared is the parse alone; tests/kernel/test_cli_fastpath.py compares
whole processes on a real map."""

import contextlib
import io
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from bpfbatch.cli import argv as cli_argv
from bpfbatch.cli import fastpath, typer_main
from bpfbatch.cli.load import commands as load_commands
from bpfbatch.cli.maps import commands as map_commands
from bpfbatch.cli.tcbatch import commands as tc_commands

#: Every command the fast path may run.
DECLARED = {**map_commands, **load_commands, **tc_commands}

#: What users and typos put on these command lines: every option of the four commands in
#: each spelling click takes, near misses, global flags alone and run together, bpftool's
#: keywords, values that look like options, numbers click's int() takes and refuses, files.
TOKENS = [
    "--map-id", "--pinned", "--name", "--batch-size", "-o", "--output", "--limit", "--decode",
    "--sum", "--type", "--match", "-f", "--bpffs", "--pinned-only",
    "--format", "--if-absent", "--if-present", "--per-key", "--default-zero", "--jobs", "-j",
    "-j2", "-j0", "--jobs=1", "--jobs=0", "in.jsonl", "in.parquet",
    "--map", "--batch", "--out", "--pinned-", "--map_id", "-O", "-F", "--no-sum", "-x", "-m",
    "-v", "-q", "--verbose", "--quiet", "-vq", "-fv", "-qf", "--version", "-h", "--help",
    "-p", "--json", "--pretty", "-jq", "--key-type", "--value-type=u8", "--btf", "u32",
    "-ff", "-fo", "-of", "-fojson", "-ojson", "-o=json", "-otable", "-o=", "--output=table",
    "--output=", "--sum=1", "--sum=", "--bpffs=yes", "--map-id=3", "--map-id=", "--limit=-1",
    "--decode=key=hex", "--decode=", "-f=x", "--pinned=/sys/fs/bpf/x", "--name=flows",
    "id", "pinned", "name", "-b", "--netns", "-n", "--coalesce", "--batch-bytes", "-force",
    "-netns", "-ba", "apply", "dump",
    "3", "-1", "0", " 7", "+4", "1_0", "0x10", "\u0663", "x", "", "json", "table", "csv", "yaml",
    "/sys/fs/bpf/x", "key.a=hex", "--", "-", "=",
]
COMMAND_NAMES = ["count", "list", "dump", "load", "tc", "cnt", "-v", "--help"]

GLOBALS = ["-v", "-q", "--verbose", "--quiet", "-j", "-p", "--json", "--pretty"]
VALUES = ["3", "-1", "0", " 7", "+4", "1_0", "0x10", "\u0663", "x", "", "json", "table", "csv",
          "yaml", "/sys/fs/bpf/x", "key.a=hex", "--", "-", "=", "-v", "-q", "--help", "id"]
values = st.one_of(st.sampled_from(VALUES), st.integers(-5, 10**6).map(str), st.text(max_size=6))
noise = st.one_of(st.sampled_from(TOKENS), st.text(max_size=4))


@st.composite
def command_lines(draw):
    """A command line made of one of the three commands' own options, each in a spelling
    click takes (``--opt v``, ``--opt=v``, ``-o v``, ``-ov``, ``-ff``), with global flags
    and bpftool's MAP form mixed in, and sometimes a noise token anywhere."""
    name = draw(st.sampled_from(["count", "list", "dump", "load", "tc"]))
    command = DECLARED[name]
    args = [*draw(st.lists(st.sampled_from(GLOBALS), max_size=2)), name]
    if command.takes_map and draw(st.booleans()):
        args += [draw(st.sampled_from(list(cli_argv.MAP_KEYWORDS))), draw(values)]
    options_start = len(args)
    flagged = [option for option in command.options if option.flags]
    for _ in range(draw(st.integers(0, 5))):
        option = draw(st.sampled_from(flagged))
        flag = draw(st.sampled_from(option.flags))
        if not option.takes_value:
            args.append(flag + flag[1] * draw(st.integers(0, 1)) if flag[1] != "-" else flag)
        else:
            value = draw(values)
            joined = f"{flag}={value}" if flag[1] == "-" else flag + value
            args += draw(st.sampled_from([[flag, value], [joined]]))
        args += draw(st.lists(st.sampled_from(GLOBALS), max_size=1))
    for _ in command.arguments:  # anywhere after the MAP form, as click takes them
        args.insert(draw(st.integers(options_start, len(args))),
                    draw(st.sampled_from(["in.jsonl", "-", "x y", "3"])))
    for _ in range(draw(st.integers(0, 1))):
        args.insert(draw(st.integers(1, len(args))), draw(noise))
    return args


#: Any tokens at all after a command name, or none (no command).
anything = st.builds(lambda head, name, tail: [*head, name, *tail],
                     st.lists(st.sampled_from([*GLOBALS, "-vq", "-h"]), max_size=2),
                     st.sampled_from(COMMAND_NAMES), st.lists(noise, max_size=8))
argvs = st.one_of(command_lines(), anything, st.lists(noise, max_size=3))


@contextlib.contextmanager
def recorded():
    """Command bodies and global flags replaced by recorders: ``(calls, flags)``."""
    calls, flags = [], []
    saved = {name: command.body for name, command in DECLARED.items()}
    real_flag = cli_argv.set_global_flag
    for name, command in DECLARED.items():
        command.body = lambda _name=name, **values: calls.append((_name, values))
    cli_argv.set_global_flag = flags.append
    try:
        yield calls, flags
    finally:
        cli_argv.set_global_flag = real_flag
        for name, command in DECLARED.items():
            command.body = saved[name]


def typer_call(args: list[str]):
    """What typer parses ``args`` to: ``(command, values, set of flags)``, or ``None`` when
    it runs no command (help, a usage error, another command's)."""
    with recorded() as (calls, flags), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        try:
            typer_main(list(args))
        except SystemExit:
            pass
    assert len(calls) <= 1
    return (*calls[0], set(flags)) if calls else None


def fast_call(args: list[str]):
    call = fastpath.parse(list(args))
    return None if call is None else (call.command.name, call.values, set(call.flags))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argvs)
@example(["count", "--pinned", "--", "-v"])
@example(["dump", "-o", "-o", "-v"])
@example(["list", "-ff", "-o=", "--type", "-q"])
def test_the_fast_path_declines_or_parses_as_typer_does(args):
    fast = fast_call(args)
    event("fast path" if fast is not None else "typer")
    if fast is not None:
        assert fast == typer_call(args), args


# Forms the fast path must take itself (else it would be a decline-everything no-op), each
# checked against typer's reading of it.
ACCEPTED = [
    ["count", "id", "3"],
    ["count", "--map-id=3", "--batch-size", "16"],
    ["count", "pinned", "/sys/fs/bpf/x", "-q"],
    ["-v", "count", "name", "flows"],
    ["count", "-v", "id", " +1_0 "],
    ["count", "id", "3", "--map-id", "4"],
    ["count", "--pinned", "-v"],
    ["count", "--pinned", "--"],
    ["list"],
    ["-q", "list", "-o", "json", "--type", "hash", "--match", "flow*"],
    ["list", "-ff", "--pinned-only", "-ojsonl"],
    ["list", "-fo", "csv", "--bpffs"],
    ["list", "-o=json"],
    ["dump", "id", "3"],
    ["dump", "id", "3", "-o", "table", "--limit", "-1", "--sum"],
    ["dump", "--name=flows", "--output=csv", "--decode", "key=hex", "--decode=value=str"],
    ["dump", "--map-id", "3", "--batch-size=0", "-q", "--quiet", "--verbose"],
    ["dump", "--map-id", "x", "--map-id", "3"],
    ["dump", "id", "3", "--decode", "--decode"],
    ["load", "id", "3", "f"],
    ["load", "f", "--pinned", "/sys/fs/bpf/x", "--jobs", "2", "--if-absent", "--per-key"],
    ["-j", "dump", "id", "3"], ["dump", "id", "3", "-p"], ["-p", "list"], ["list", "-j", "-o", "csv"],
    ["--key-type", "u32", "dump", "id", "3", "--value-type=u64"],
    ["load", "id", "3", "f", "--btf", "x.o", "--value-type", "struct v"],
    ["load", "--map-id=3", "-", "--format", "parquet", "--decode", "key=hex", "-v"],
    ["load", "name", "flows", "--jobs=1", "--default-zero", "--batch-size", "-5", "f"],
    ["tc", "-b", "f"], ["tc", "-force", "-b", "f", "-netns", "ns"], ["tc", "-fb", "-", "-j"],
    ["tc", "--batch=f", "-n", "ns", "--batch-bytes", "4096", "--coalesce", "-v"],
    ["-q", "tc", "-b", "f", "--json", "-j"], ["tc", "-ba", "f", "-json"],
]

DECLINED = [
    [], ["--version"], ["-h"], ["count", "--help"], ["count", "-h"],
    ["count", "id"], ["count", "3"], ["count", "id", "3", "--"], ["count", "--", "id", "3"],
    ["count", "--map", "3"], ["count", "--map-id"], ["count", "--map-id", "x"],
    ["count", "--map-id", "0x10"], ["count", "-vq", "id", "3"], ["-vq", "count"],
    ["list", "--sum"], ["list", "id", "3"], ["list", "-fv"], ["list", "--bpffs=yes"],
    ["dump", "--sum=1"], ["dump", "-o"], ["dump", "--limit", "ten"],
    ["dump", "-x"], ["dump", "pinned", "/x", "name", "y"], ["dump", "--decode", "--decode", "id", "3"],
    ["load", "id", "3"], ["load", "id", "3", "f", "g"], ["load", "id", "3", "--", "f"],
    ["load", "id", "3", "f", "-j", "0"], ["load", "id", "3", "f", "--jobs=-1"],
    ["load", "id", "3", "-f"], ["load", "f", "id", "3"],
    ["tc"], ["tc", "-f"], ["tc", "apply", "f"], ["tc", "dump", "--dev", "vethA"],
    ["tc", "-b", "f", "apply", "g"], ["tc", "-b", "f", "--batch-bytes", "10"], ["tc", "-b"],
    ["tc", "-b", "f", "-h"], ["-v", "tc", "-force", "-b", "f"], ["-q", "tc", "-ba", "f"],
]


@pytest.mark.parametrize("args", ACCEPTED, ids=" ".join)
def test_the_fast_path_takes_these_as_typer_does(args):
    fast = fast_call(args)
    assert fast is not None
    assert fast == typer_call(args)


@pytest.mark.parametrize("args", DECLINED, ids=" ".join)
def test_the_fast_path_leaves_these_to_typer(args):
    assert fast_call(args) is None


def test_a_parsed_call_sets_the_flags_then_runs_the_body():
    with recorded() as (calls, flags):
        fastpath.parse(["dump", "-q", "id", "7", "-o", "table"])()
    assert flags == ["quiet"]
    assert calls == [("dump", {"map_id": 7, "pinned": None, "name": None, "output": "table",
                               "batch_size": 8192, "limit": None, "decode": None,
                               "sum_cpus": False, "recursive": False})]


@pytest.mark.parametrize("args", [["count", "id", "1"], ["list", "-o", "json"],
                                  ["dump", "id", "1", "-o", "table"],
                                  ["load", "id", "1", "in.parquet", "--jobs", "2"],
                                  ["tc", "-force", "-b", "in.tc", "-n", "ns"]])
def test_parsing_a_quick_command_imports_no_typer(args):
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from bpfbatch.cli import fastpath; "
         "assert fastpath.parse(sys.argv[1:]) is not None; "
         "print(sorted({m.split('.')[0] for m in sys.modules} & {'typer', 'click', 'rich'}))",
         *args], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout == "[]\n"
