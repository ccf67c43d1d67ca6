"""The error and signal contract of every command (README, "Exit status and signals").

- a usage error exits 2 with one line; a runtime error exits 1 with one line naming the thing
  (``diff`` exits 2, diff(1)'s "trouble": its 1 means the two differ — a row's third item);
- SIGINT, SIGTERM and SIGHUP at start-up, and mid-run for the long-running commands, end the
  command with one line saying what was done and 128 + the signal, its output never torn;
- a reader that leaves (EPIPE), before the records or before a trailer, is one line and 141.

Driven by tables with a row per command, enumerated from the typer app and the thin entry
point: a new command without a row fails :func:`test_every_command_has_a_row`.

Signals are sent at a sweep of moments and judged by what was said against what happened,
never by timing: a trial that was interrupted must say so in one line whose count matches the
output (or the map); one whose signal came once the outcome was decided must be the command's
own outcome; one signalled before the entry point installed its handling (the interpreter's
own start-up, visible in /proc/PID/status) may die of the signal, having written nothing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from bpfbatch.map import cursor, whole
from fault_helpers import (bpfbatch_argv, communicate, fill, reaped, run_with_signal,
                           run_with_signal_after_output, typed_map)
from tc_helpers import veth_netns

SIGS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: A map id no map has (ids are allocated upwards from 1).
NO_MAP = 2**31 - 1


def leaf_commands() -> set[tuple[str, ...]]:
    """Every command path the CLI runs (``("top", "tcp")``): the typer app's, walked through
    its lazy registry, and the thin entry point's declared ones."""
    import typer

    from bpfbatch.cli import argv, fastpath
    from bpfbatch.cli.app import app

    group = typer.main.get_group(app)
    ctx = group.make_context("bpfbatch", [], resilient_parsing=True)
    paths = set()
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        subs = getattr(command, "commands", None)
        paths |= {(name, sub) for sub in subs} if subs else {(name,)}
        if subs and command.invoke_without_command:  # tc -b FILE, beside tc apply/dump
            paths.add((name,))
    assert {name for name in argv.COMMANDS if fastpath.declared(name)} <= \
        {path[0] for path in paths}
    return paths


# -- the tables ------------------------------------------------------------------------------
# {m}: a 1000-entry u32 -> u64 map; {file}: its records as JSONL; {no}: a map id nobody has;
# {no_map_toml}: an exporter configuration naming that map.

#: argv → a fragment of the one line. Found by click, or by the command before it touches
#: anything (an option's value, a missing MAP), or by the library (--batch-size 0).
USAGE = {
    ("list",): [["list", "-o", "yaml"], "--output: unknown format 'yaml'"],
    ("dump",): [["dump"], "MAP: name the map"],
    ("count",): [["count", "id", "abc"], "invalid value for '--map-id'"],
    ("load",): [["load", "id", "{m}", "{file}", "--jobs", "0"], "'--jobs'"],
    ("delete",): [["delete", "id", "{m}", "{file}", "--batch-size", "0"], "--batch-size"],
    ("clear",): [["clear"], "MAP: name the map"],
    ("drain",): [["drain", "id", "{m}", "-o", "yaml"], "--output: unknown format"],
    ("lookup",): [["lookup", "id", "{m}"], "missing argument"],
    ("update",): [["update", "id", "{m}", "1"], "expected KEY VALUE"],
    ("getnext",): [["getnext", "id", "{m}", "--nope"], "no such option"],
    ("pin",): [["pin", "id", "{m}"], "missing argument"],
    ("freeze",): [["freeze"], "MAP: name the map"],
    ("peek",): [["peek"], "MAP: name the map"],
    ("push",): [["push", "id", "{m}"], "missing argument"],
    ("pop",): [["pop"], "MAP: name the map"],
    ("exec",): [["exec", "id", "{m}", "--where", "value > 1", "--action", "nuke"],
                "--action: unknown action 'nuke'"],
    ("prune",): [["prune", "id", "{m}", "--field", "value", "--older-than", "soon"],
                 "--older-than"],
    ("prune-demo",): [["prune-demo", "--flows", "0"], "--flows"],
    ("top", "tcp"): [["top", "tcp", "0"], "INTERVAL: must be positive"],
    ("top", "slab"): [["top", "slab", "-r", "0"], "-r/--maxrows"],
    ("top", "maps"): [["top", "maps", "0"], "INTERVAL"],
    ("tc",): [["tc", "-b", "-", "--batch-bytes", "100"], "--batch-bytes"],
    ("tc", "apply"): [["tc", "apply"], "FILE"],
    ("tc", "dump"): [["tc", "dump"], "--dev"],
    ("tcp-mmap",): [["tcp-mmap"], "-s/-H"],
    ("export",): [["export"], "missing option '--config'"],
    ("record",): [["record", "id", "{m}", "--rotate-size", "1M"], "--rotate-size: rotates"],
    ("demo",): [["demo", "--entries", "0"], "--entries"],
    ("bench",): [["bench", "--rounds", "0"], "--rounds"],
    ("filter", "build"): [["filter", "build"], "missing argument 'SOURCE'"],
    ("migrate",): [["migrate", "id", "{m}"], "FROM TO: expected FROM and TO"],
    ("diff",): [["diff", "id", "{m}", "{file}", "-o", "yaml"], "--output: unknown format"],
}

_NONE = "no map id no map has"
#: argv → a fragment of the one line naming what does not exist, or why the command has no
#: runtime error a user can provoke (then its start-up row runs it as given in START).
RUNTIME = {
    **{(c,): [[c, "id", "{no}", *extra], f"map id {NO_MAP}: no such map"] for c, extra in [
        ("dump", []), ("count", []), ("load", ["{file}"]), ("delete", ["{file}"]),
        ("clear", []), ("drain", []), ("lookup", ["1"]), ("update", ["1", "2"]),
        ("getnext", []), ("pin", ["/sys/fs/bpf/never"]), ("freeze", []), ("peek", []),
        ("push", ["1"]), ("pop", []), ("exec", ["--where", "value > 1"]),
        ("prune", ["--field", "value", "--older-than", "1s"]), ("record", [])]},
    ("migrate",): [["migrate", "id", "{no}", "id", "{m}"], f"map id {NO_MAP}: no such map"],
    ("list",): "lists whatever there is",
    ("prune-demo",): "builds everything it uses",
    ("top", "tcp"): "traces whatever there is",
    ("top", "slab"): "traces whatever there is",
    ("top", "maps"): "counts whatever there is",
    ("tc",): [["tc", "-b", "/nonexistent/batch.tc"],
              'Cannot open file "/nonexistent/batch.tc" for reading'],  # tc's own line
    ("tc", "apply"): [["tc", "apply", "/nonexistent/state.tc"],
                      "/nonexistent/state.tc: cannot open"],
    ("tc", "dump"): [["tc", "dump", "--dev", "nosuchdev0"], 'Cannot find device "nosuchdev0"'],
    ("tcp-mmap",): [["tcp-mmap", "-H", "127.0.0.1", "-p", "{port}"], "127.0.0.1"],
    ("export",): [["export", "--config", "{no_map_toml}"], f"map id {NO_MAP}: no such map"],
    ("demo",): "builds everything it uses",
    ("bench",): "builds everything it uses",
    ("filter", "build"): [["filter", "build", "/nonexistent/f.bpf.c"],
                          "/nonexistent/f.bpf.c: no such file"],
    # diff(1)'s contract: 0 same, 1 differ, 2 trouble (a runtime error too)
    ("diff",): [["diff", "id", "{no}", "{file}"], f"map id {NO_MAP}: no such map", 2],
}

#: What the start-up trials run where RUNTIME has no argv: (argv, its exit status).
START = {
    ("list",): (["list", "-o", "json"], 0),
    ("prune-demo",): (["prune-demo", "--flows", "0"], 2),  # nothing to build up and tear down
    ("top", "tcp"): (["top", "tcp", "0.05", "1"], 0),
    ("top", "slab"): (["top", "slab", "0.05", "1"], 0),
    ("top", "maps"): (["top", "maps", "0.05", "1"], 0),
    ("demo",): (["demo", "--entries", "2000"], 0),
    ("bench",): (["bench", "--entries", "2000", "--rounds", "1"], 0),
}


def test_every_command_has_a_row():
    commands = leaf_commands()
    assert set(USAGE) == commands, "a command without a usage row (or a row for none)"
    assert set(RUNTIME) == commands, "a command without a runtime row"
    assert {p for p, row in RUNTIME.items() if isinstance(row, str)} == set(START)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The values the tables' argv name."""
    tmp = tmp_path_factory.mktemp("contract")
    path = tmp / "in.jsonl"
    path.write_text("".join(f'{{"key":{k},"value":{k}}}\n' for k in range(1000)))
    with typed_map(1000, name="bb_contract") as m:
        fill(m, 1000)
        import socket

        with socket.socket() as s:  # a port nothing listens on: connection refused
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        toml = tmp / "no_map.toml"
        toml.write_text(f'listen = "127.0.0.1:0"\n[[metric]]\nname = "x"\ntype = "gauge"\n'
                        f'map = {{ id = {NO_MAP} }}\naggregate = "count"\n')
        yield {"m": m.info.id, "file": str(path), "no": NO_MAP, "port": port,
               "no_map_toml": str(toml)}


def filled(argv: list[str], env: dict) -> list[str]:
    return [arg.format(**env) for arg in argv]


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(bpfbatch_argv(*argv), capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, **kw)


#: Commands that are drop-ins for a peer's and say its errors in its words: ``tc -b``, as
#: iproute2's tc prints them (the README's promise), with no ``bpfbatch: error:`` before.
PEER_WORDS = {("tc",)}


def one_error_line(proc, prefix: str = "bpfbatch: error: ") -> str:
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), proc.stderr
    return lines[0]


@pytest.mark.parametrize("path", sorted(USAGE), ids=" ".join)
def test_a_usage_error_exits_2_with_one_line(path, env):
    argv, fragment = USAGE[path]
    proc = run(filled(argv, env))
    assert proc.returncode == 2, proc
    assert fragment in one_error_line(proc) and proc.stdout == ""


@pytest.mark.parametrize("path", sorted(p for p, r in RUNTIME.items() if not isinstance(r, str)),
                         ids=" ".join)
def test_a_runtime_error_exits_1_with_one_line_naming_the_thing(path, env):
    argv, fragment, *status = RUNTIME[path]
    proc = run(filled(argv, env))
    assert proc.returncode == (status[0] if status else 1), proc
    line = one_error_line(proc, "" if path in PEER_WORDS else "bpfbatch: error: ")
    assert fragment in line and proc.stdout == ""


# -- signals ---------------------------------------------------------------------------------

def _handling(pid: int, sig: int) -> str:
    """``"raised"`` once the entry point's handlers are in (SIGHUP, installed last, is
    caught), ``"ignored"`` once the outcome is decided, ``"default"`` before either."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "ignored"  # gone: it had decided its outcome
    masks = dict(re.findall(r"^(SigCgt|SigIgn):\s+([0-9a-f]+)$", status, re.M))
    bit = 1 << (signal.SIGHUP - 1)
    if int(masks["SigIgn"], 16) & bit:
        return "ignored"
    return "raised" if int(masks["SigCgt"], 16) & bit else "default"


def interrupted_line(stderr: str, sig: int) -> re.Match:
    """The one line that says the command was interrupted by ``sig``: the last one, no other
    line like it, no traceback."""
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    lines = stderr.splitlines()
    name = signal.Signals(sig).name
    said = [line for line in lines if "interrupted (" in line]
    assert len(said) == 1 and said[0] == lines[-1], stderr
    found = re.fullmatch(rf"bpfbatch: (?:.+: )?interrupted \({name}\)(?: (.*))?", said[0])
    assert found, said[0]
    return found


def judge_start(proc: subprocess.Popen, out: str, err: str, sig: int, handling: str,
                normal: int) -> str:
    """One start-up trial; returns which outcome it was."""
    rc = proc.returncode
    if rc == 128 + sig:
        interrupted_line(err, sig)
        assert handling != "ignored", err  # a decided outcome does not change
        return "interrupted"
    if handling == "default" and out == "" and (
            rc == -sig and err == ""
            or sig == signal.SIGINT and err.rstrip().endswith("KeyboardInterrupt")):
        # Before the entry point ran: the signal's default action (SIGINT's is Python's, a
        # KeyboardInterrupt in the interpreter's start-up), nothing done.
        return "before"
    assert rc == normal and "interrupted" not in err and "Traceback" not in err, (rc, err)
    return "decided"


#: Seconds after the entry point installed its handling (None: right after the process
#: started, in the interpreter's own start-up); a command starts in ~60-150 ms here. Each
#: command gets every delay, the signals taken in turn (so every signal meets every moment
#: across the commands).
START_DELAYS = (None, 0.0, 0.01, 0.04)


def _after_handling(proc: subprocess.Popen, delay: float | None) -> None:
    """Wait ``delay`` seconds from the moment ``proc``'s handlers are in (None: do not wait)."""
    if delay is None:
        return
    deadline = time.monotonic() + 30
    while _handling(proc.pid, signal.SIGHUP) == "default" and time.monotonic() < deadline:
        time.sleep(0.0005)
    time.sleep(delay)


@pytest.mark.parametrize("path", sorted(RUNTIME), ids=" ".join)
def test_a_signal_at_start_up_is_one_line_and_128_plus_n(path, env):
    row = RUNTIME[path]
    argv, normal = (row[0], row[2] if len(row) > 2 else 1) if not isinstance(row, str) \
        else START[path]
    turn = sorted(RUNTIME).index(path)
    seen = []
    for i, delay in enumerate(START_DELAYS):
        sig = SIGS[(turn + i) % len(SIGS)]
        proc = subprocess.Popen(bpfbatch_argv(*filled(argv, env)), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        _after_handling(proc, delay)
        handling = _handling(proc.pid, sig)
        proc.send_signal(sig)
        out, err = communicate(proc, 120)
        seen.append(f"{signal.Signals(sig).name}:"
                    f"{judge_start(proc, out, err, sig, handling, normal)}")
    print(f"CONTRACT start-up {' '.join(path)}: {seen}")  # which moments the sweep met


# -- mid-run ---------------------------------------------------------------------------------

BIG = 300_000
#: Seconds after the command opened the map (or started its work).
MID_DELAYS = (0.0, 0.03, 0.12)


@pytest.fixture(scope="module")
def big():
    with typed_map(BIG, name="bb_contract_big") as m:
        fill(m, BIG)
        yield m


def _count_said(stderr: str, sig: int, rc: int, what: str) -> int | None:
    """The count the interrupted line says (``after N <what>``), None when not interrupted."""
    if rc != 128 + sig:
        assert rc == 0 and "interrupted" not in stderr, (rc, stderr)
        return None
    found = interrupted_line(stderr, sig)
    said = re.search(rf"after (\d+) {what}", found.group(1) or "")
    assert said, found.group(0)
    return int(said.group(1))


def _jsonl(path: Path) -> list:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), "a torn last line"
    return [json.loads(line) for line in data.splitlines()]


def _records(path: Path, fmt: str, said: int | None) -> list:
    """The records of a dump's output, checking it is whole: complete lines, or one JSON
    document (nothing at all when it was stopped before its output began)."""
    if fmt == "jsonl":
        return _jsonl(path)
    text = path.read_text()
    return json.loads(text) if text or said != 0 else []


@pytest.mark.parametrize("sig", SIGS, ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_dump_interrupted_says_how_many_records_the_whole_output_holds(big, tmp_path, sig, fmt):
    for delay in MID_DELAYS:
        path = tmp_path / f"out.{fmt}"
        argv = bpfbatch_argv("dump", "id", big.info.id, "-o", fmt, "--batch-size", 4096)
        rc, err = run_with_signal(argv, path, big, sig, delay)
        said = _count_said(err, sig, rc, "records written")
        assert len(_records(path, fmt, said)) == (BIG if said is None else said), err


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_exec_dump_interrupted_says_how_many_records_it_wrote(big, tmp_path, fmt):
    for sig, delay in zip(SIGS, (0.0, 0.05, 0.2)):
        path = tmp_path / f"out.{fmt}"
        argv = bpfbatch_argv("exec", "id", big.info.id, "--where", "value >= 0", "--action",
                             "dump", "--mode", "user", "-o", fmt)
        rc, err = run_with_signal(argv, path, big, sig, delay)
        said = _count_said(err, sig, rc, "records written")
        assert len(_records(path, fmt, said)) == (BIG if said is None else said), err


def test_drain_and_load_interrupted_say_what_the_map_holds(tmp_path):
    n = 100_000
    records = tmp_path / "in.jsonl"
    records.write_text("".join(f'{{"key":{k},"value":{k}}}\n' for k in range(n)))
    with typed_map(n, name="bb_contract_dl") as m:
        for sig, delay in zip(SIGS, (0.0, 0.02, 0.08)):
            fill(m, n)
            path = tmp_path / "out.jsonl"
            argv = bpfbatch_argv("drain", "id", m.info.id, "-o", "jsonl", "--batch-size", 2048)
            rc, err = run_with_signal(argv, path, m, sig, delay)
            said = _count_said(err, sig, rc, "entries delivered")
            delivered = len(_jsonl(path))
            assert delivered == (n if said is None else said)
            assert sum(b.count for b in cursor.BatchCursor(m)) == n - delivered
        for sig, delay in zip(SIGS, (0.0, 0.02, 0.08)):
            whole.clear(m)
            argv = bpfbatch_argv("load", "id", m.info.id, records, "--batch-size", 2048)
            rc, err = run_with_signal(argv, tmp_path / "load.out", m, sig, delay)
            said = _count_said(err, sig, rc, "entries loaded")
            held = sum(b.count for b in cursor.BatchCursor(m))
            assert held == (n if said is None else said), err


def test_migrate_interrupted_says_what_it_wrote_into_to(tmp_path):
    n = 100_000
    with typed_map(n, name="bb_contract_mf") as src, typed_map(n, name="bb_contract_mt") as dst:
        fill(src, n)
        for sig, delay in zip(SIGS, (0.0, 0.05, 0.15)):
            whole.clear(dst)
            argv = bpfbatch_argv("migrate", "id", src.info.id, "id", dst.info.id,
                                 "--batch-size", 2048)
            rc, err = run_with_signal(argv, tmp_path / "migrate.out", dst, sig, delay)
            said = _count_said(err, sig, rc, "entries copied")
            held = sum(b.count for b in cursor.BatchCursor(dst))
            assert held == (n if said is None else said), err


@pytest.mark.parametrize("sig", SIGS, ids=lambda s: signal.Signals(s).name)
def test_drain_json_interrupted_closes_its_document(tmp_path, sig):
    """``drain -o json`` stopped mid-drain ends its array as dump does: the output is one
    JSON document of exactly the entries it says it delivered, and the map holds the rest.
    The signal comes once the output began, hundreds of batches before the drain could end."""
    n = 20_000
    with typed_map(n, name="bb_contract_dj") as m:
        for delay in (0.0, 0.02):
            fill(m, n)
            path = tmp_path / "out.json"
            argv = bpfbatch_argv("drain", "id", m.info.id, "-o", "json", "--batch-size", 16)
            rc, err = run_with_signal_after_output(argv, path, sig, delay)
            said = _count_said(err, sig, rc, "entries delivered")
            assert said is not None and 0 < said < n, err
            assert len(json.loads(path.read_text())) == said, err
            assert sum(b.count for b in cursor.BatchCursor(m)) == n - said


def test_prune_every_interrupted_says_its_rounds(big):
    for sig, delay in zip(SIGS, (0.0, 0.05, 0.3)):
        argv = bpfbatch_argv("prune", "id", big.info.id, "--field", "value", "--older-than",
                             "1s", "--every", "20ms", "--dry-run")
        rc, err = run_with_signal(argv, Path(os.devnull), big, sig, delay)
        assert rc == 128 + sig, err
        said = re.search(r"after (\d+) rounds?: would delete (\d+)",
                         interrupted_line(err, sig).group(1))
        rounds = re.findall(r"^round \d+: would delete (\d+)", err, re.M)
        assert said and int(said.group(1)) == len(rounds), err
        assert int(said.group(2)) == sum(map(int, rounds)), err


def _until_line(proc: subprocess.Popen, stream, fragment: bytes) -> None:
    """Read ``stream`` until a line holding ``fragment`` (the command is running)."""
    for line in iter(stream.readline, b""):
        if fragment in line:
            return
    raise AssertionError(f"never said {fragment!r}: rc={proc.wait()}")


def _after_line(argv, fragment, sig, delay, *, on_stdout=False):
    with reaped(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)) as proc:
        _until_line(proc, proc.stdout if on_stdout else proc.stderr, fragment)
        time.sleep(delay)
        proc.send_signal(sig)
        out, err = communicate(proc, 60)
    return proc.returncode, out.decode(), err.decode()


def test_export_and_top_interrupted_exit_128_plus_n(big, tmp_path):
    config = tmp_path / "x.toml"
    config.write_text(f'listen = "127.0.0.1:0"\n[[metric]]\nname = "x"\ntype = "gauge"\n'
                      f'map = {{ id = {big.info.id} }}\naggregate = "count"\n')
    for sig, delay in zip(SIGS, (0.0, 0.05, 0.2)):
        rc, _, err = _after_line(bpfbatch_argv("export", "--config", config), b"serving", sig,
                                 delay)
        assert rc == 128 + sig, err
        assert re.search(r"after \d+ scrapes", interrupted_line(err, sig).group(0)), err
    for sig, delay in zip(SIGS, (0.0, 0.07, 0.15)):
        rc, out, err = _after_line(bpfbatch_argv("top", "slab", "-C", "0.05"), b"Tracing",
                                   sig, delay, on_stdout=True)
        assert rc == 128 + sig, err
        found = re.search(r"after (\d+) intervals?", interrupted_line(err, sig).group(0))
        # every interval's table whole: its header, then at most -r rows
        assert found and out.count("CACHE") == int(found.group(1)), (out, err)


def test_tc_batch_interrupted_exits_128_plus_n(tmp_path):
    path = tmp_path / "big.tc"
    path.write_text("".join(f"actions add action mirred egress redirect dev vethB index {i}\n"
                            for i in range(1, 30_001)))
    with veth_netns() as ns:
        for sig, delay in zip(SIGS, (0.0, 0.05, 0.15)):
            subprocess.run(["ip", "netns", "exec", ns, "tc", "actions", "flush", "action",
                            "mirred"], capture_output=True)
            proc = subprocess.Popen(bpfbatch_argv("tc", "-b", path, "-n", ns, "--batch-bytes",
                                                  16384), stderr=subprocess.PIPE, text=True)
            _after_handling(proc, 0.1 + delay)  # into the import of tc, the parse, the sends
            proc.send_signal(sig)
            _, err = communicate(proc, 120)
            if proc.returncode == 0:
                continue  # finished first
            assert proc.returncode == 128 + sig, err
            interrupted_line(err, sig)


# -- the reader leaves -----------------------------------------------------------------------

def _closed_reader_run(argv):
    """``argv`` with stdout a pipe whose reader is gone before it starts."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run(argv, stdout=w, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(w)


@pytest.mark.parametrize("fmt", ["json", "arrow"])
def test_a_reader_gone_before_the_trailer_is_one_line_and_141(fmt):
    """An empty map writes nothing but its trailer (JSON's ``[]``, Arrow's schema and end
    of stream): the reader that left is found there."""
    pytest.importorskip("pyarrow") if fmt == "arrow" else None
    with typed_map(16, name="bb_contract_e") as m:
        proc = _closed_reader_run(bpfbatch_argv("dump", "id", m.info.id, "-o", fmt))
    assert proc.returncode == 141, proc
    assert "after all 0 records were written" in one_error_line(proc)
    assert "(EPIPE)" in proc.stderr


@pytest.mark.parametrize("argv", [["dump", "id", "{m}", "-o", "jsonl"], ["count", "id", "{m}"],
                                  ["list"], ["lookup", "id", "{m}", "1"]], ids=lambda a: a[0])
def test_a_reader_gone_is_one_line_and_141(argv, env):
    proc = _closed_reader_run(bpfbatch_argv(*filled(argv, env)))
    assert proc.returncode == 141, proc
    assert "(EPIPE)" in one_error_line(proc)
