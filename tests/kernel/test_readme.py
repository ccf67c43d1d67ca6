"""The README is executed: every fenced block of README.md runs as a reader would run it, and
a block that shows its output is compared with what it prints now.

Blocks are found anew on each run, so a new block is tested without a change here. What a
block is decides what happens to it:

- ``sh``: run by bash (``-e -o pipefail``) in a working folder shared by the blocks, with the
  package's ``bpfbatch`` and ``python`` first on PATH; it must exit 0.
- ``console``: a transcript; each ``$ command`` runs as typed in an interactive bash (a
  pipeline's status is its last command's) and what it prints
  (stdout and stderr, as a terminal shows them) must equal the lines shown under it, once both
  are normalised: ids (``id N``, ``map N``) and timings (``0.7 ms``) always; with
  ``<!-- output: shape -->`` before the block, every number and enumerator name too (a table
  of any rows of a hash map, whose order is the kernel's). A command whose shown output holds
  a ``bpfbatch: error:`` line must fail; the others must exit 0.
- ``python``: run by the package's interpreter, after ``from bpfbatch import Map`` (the
  first snippet's import, which the later ones take as given); it must exit 0.
- ``text``, or no language: not code (a synopsis, a tree), unless its first line starts with
  ``$ `` (a transcript, as ``console``). A synopsis line ``bpfbatch CMD ...`` may name only
  options that ``bpfbatch CMD --help`` lists.
- anything else (``c``, ``toml``, ``yaml``): a file, written into the working folder before
  each run when ``<!-- file: NAME -->`` precedes it.

``<!-- not run: REASON -->`` right before a block skips it (and says why); ``<!-- interrupt
after: 2s -->`` sends SIGINT that long after the start and expects the exit status 130 of a
command stopped by Ctrl-C. A block that runs nowhere (a ``c`` block without a ``file:`` name)
and is not marked fails.

Each block gets the world the README's narrative assumes, made fresh and the same every time:
a folder of its own on bpffs that stands for ``/sys/fs/bpf`` (every ``/sys/fs/bpf/NAME`` of the
block is in it; whatever the block pins there is removed after), the demo's flow table
(``bpfbatch demo --entries 1000 --pin /sys/fs/bpf/flows``: 1000 flows
from the demo's seed), a ``u32 → u64`` map ``counts`` holding ``pid → count``, a bcc program
``b`` with a ``counts`` table (for blocks that use ``b[...]``) and a network namespace ``lab``
with a veth pair ``vethA``/``vethB`` (for blocks that name it). Names are global, so each
run's own replace the README's (:data:`README_NAMES`) in the block before it runs and back in
what it prints. A failure names the block by its README line.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from bpfbatch import Map
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.cli.argv import COMMANDS
from bpfbatch.labs.demo import create_flow_table, fill_flow_table
from bpfbatch.map import writes

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
BIN = Path(sys.executable).parent
TIMEOUT = 120
FLOWS = 1000

_FENCE = re.compile(r"^```(\S*)\s*$")
_MARKER = re.compile(r"^<!--\s*([a-z ]+):\s*(.*?)\s*-->$")
_RUN = {"sh", "console", "python"}


@dataclass(frozen=True)
class Block:
    line: int            # the README line of the opening fence
    lang: str
    text: str
    markers: dict[str, str]

    @property
    def where(self) -> str:
        return f"README.md:{self.line} ({self.lang or 'no language'})"


def blocks(text: str) -> list[Block]:
    """Every fenced block, with the ``<!-- key: value -->`` lines right above its fence."""
    found, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start, lang = i, match[1]
        if not lang:  # a transcript, else a synopsis or a tree
            lang = "console" if lines[i + 1:i + 2] and lines[i + 1].startswith("$ ") else "text"
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        markers, above = {}, start - 1
        while above >= 0 and (marker := _MARKER.match(lines[above].strip())):
            markers[marker[1]] = marker[2]
            above -= 1
        found.append(Block(start + 1, lang, "\n".join(lines[start + 1:end]) + "\n", markers))
        i = end + 1
    return found


BLOCKS = blocks(README.read_text())


# -- the world the narrative assumes -----------------------------------------------------------

@dataclass
class World:
    """This run's names for what the README calls by its own."""

    bpffs: str           # this run's folder on bpffs, for every /sys/fs/bpf/NAME of a block
    flows_name: str
    flows_id: int
    counts_name: str
    netns: str

    @property
    def pin(self) -> str:
        return f"{self.bpffs}/flows"

    def into(self, text: str) -> str:
        """The block as this run runs it."""
        text = re.sub(r"/sys/fs/bpf/(?=\w)", f"{self.bpffs}/", text)
        text = text.replace(README_NAMES["flows_name"], self.flows_name)
        text = re.sub(r"\bid (\d+)", f"id {self.flows_id}", text)
        text = re.sub(r"\bid=(\d+)", f"id={self.flows_id}", text)
        text = text.replace('name="counts"', f'name="{self.counts_name}"')
        return re.sub(r'netns="lab"|-n lab\b', lambda m: m[0].replace("lab", self.netns), text)

    def back(self, text: str) -> str:
        """What the block printed, in the README's names."""
        text = text.replace(f"{self.bpffs}/", "/sys/fs/bpf/")
        for ours, theirs in ((self.flows_name, "flows_name"), (self.counts_name, "counts_name"),
                             (self.netns, "netns")):
            text = text.replace(ours, README_NAMES[theirs])
        return text


#: The names the README uses, which each run replaces by its own.
README_NAMES = {"flows_name": "bb_demo_flows",
                "counts_name": "counts", "netns": "lab"}


def _counts_map(name: str) -> Map:
    """``counts``: pid (u32) → count (u64), with BTF, a few pids counted."""
    with BtfBuilder() as b:
        u32, u64 = b.integer("__u32", 4), b.integer("__u64", 8)
        m = Map.create(MapType.HASH, 4, 8, 1024, name=name, btf_fd=b.load(),
                       btf_key_type_id=u32, btf_value_type_id=u64)
    pids = np.arange(1, 21, dtype=np.uint32)
    writes.update(m, pids, (pids.astype(np.uint64) * 7) % 23, len(pids))
    return m


@pytest.fixture
def world():
    tag = uuid.uuid4().hex[:6]
    bpffs = f"/sys/fs/bpf/bb_readme_{tag}"
    os.mkdir(bpffs)
    flows = create_flow_table(4 * FLOWS, name=f"bb_rdf_{tag}")
    counts = _counts_map(f"bb_rdc_{tag}")
    netns = f"bb_rd_{tag}"
    try:
        fill_flow_table(flows, FLOWS)
        flows.pin(f"{bpffs}/flows")
        subprocess.run(["ip", "netns", "add", netns], check=True)
        subprocess.run(["ip", "-n", netns, "link", "add", "vethA", "type", "veth", "peer", "name",
                        "vethB"], check=True)
        yield World(bpffs, flows.info.name, flows.info.id, counts.info.name, netns)
    finally:
        subprocess.run(["ip", "netns", "del", netns], capture_output=True)
        shutil.rmtree(bpffs)  # the pins the blocks left too
        flows.close()
        counts.close()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("readme")


#: A bcc tool's start, for the blocks that use its ``b``: a ``counts`` table keyed by a
#: struct with a ``pid``, holding a few counts.
BCC_PRELUDE = '''\
import ctypes
from bcc import BPF
b = BPF(text="struct key_t { u32 pid; }; BPF_HASH(counts, struct key_t, u64);")
for pid in range(1, 6):
    b["counts"][b["counts"].Key(pid)] = b["counts"].Leaf(pid * 10)
'''


def _environment(folder: Path | None = None) -> dict[str, str]:
    """The reader's shell: the package's commands first on PATH, and (in ``folder``) a cache
    of its own, so ``filter build`` generates its vmlinux.h as on a first use."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    if folder is not None:
        env["XDG_CACHE_HOME"] = str(folder / ".cache")
    env.pop("COLUMNS", None)
    return env


def _write_files(folder: Path, world: World) -> None:
    for block in BLOCKS:
        if "file" in block.markers:
            (folder / block.markers["file"]).write_text(world.into(block.text))


def _run(argv: list[str], block: Block, folder: Path, **kw) -> subprocess.CompletedProcess:
    after = block.markers.get("interrupt after")
    proc = subprocess.Popen(argv, cwd=folder, env=_environment(folder), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=bool(after), **kw)
    try:
        out, err = proc.communicate(timeout=float(after.rstrip("s")) if after else TIMEOUT)
    except subprocess.TimeoutExpired:
        if not after:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"{block.where}: still running after {TIMEOUT} s\n{err[-3000:]}")
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
        out, err = proc.communicate(timeout=TIMEOUT)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _check_status(proc: subprocess.CompletedProcess, block: Block, what: str) -> None:
    wanted = 130 if "interrupt after" in block.markers else 0
    assert proc.returncode == wanted, (
        f"{block.where}: {what} exited {proc.returncode}, not {wanted}\n"
        f"--- stdout\n{proc.stdout[-3000:]}--- stderr\n{proc.stderr[-3000:]}")


# -- output comparison ---------------------------------------------------------------------

def normalise(text: str, shape: bool) -> list[str]:
    """Lines as compared: ids and timings (and with ``shape`` every number and enumerator
    name) replaced by placeholders, runs of spaces and of dashes as one."""
    text = re.sub(r"\b(id|map) \d+", r"\1 N", text)
    text = re.sub(r"\b\d+(\.\d+)? (ns|µs|us|ms|s)\b", "T", text)
    if shape:
        text = re.sub(r"\d+(\.\d+)?", "#", text)
        text = re.sub(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b", "ENUM", text)
    lines = [re.sub(r"-+", "-", re.sub(r" +", " ", line.strip())) for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def transcript(text: str) -> list[tuple[str, str]]:
    """``$ command`` lines and the output shown under each."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        elif line.strip():
            raise AssertionError(f"output before the first '$ ' command: {line!r}")
    return [(command, "\n".join(shown) + "\n") for command, shown in steps]


# -- the tests ---------------------------------------------------------------------------

def _runnable() -> list:
    params = []
    for block in BLOCKS:
        if block.lang not in _RUN:
            continue
        marks = [pytest.mark.skip(reason=f"not run: {block.markers['not run']}")] \
            if "not run" in block.markers else []
        params.append(pytest.param(block, id=f"line{block.line}-{block.lang}", marks=marks))
    return params


@pytest.mark.parametrize("block", _runnable())
def test_readme_block_runs(block: Block, world: World, folder: Path):
    _write_files(folder, world)
    code = world.into(block.text)
    if block.lang == "sh":
        _check_status(_run(["bash", "-e", "-o", "pipefail", "-c", code], block, folder),
                      block, "the block")
    elif block.lang == "python":
        if re.search(r'^[^#\n]*\bb\["', code, re.M):
            code = BCC_PRELUDE + code
        code = "from bpfbatch import Map\n" + code  # as the first snippet imports it
        _check_status(_run([sys.executable, "-c", code], block, folder), block, "the snippet")
    else:
        shape = block.markers.get("output") == "shape"
        for command, shown in transcript(code):
            proc = _run(["bash", "-c", command], block, folder)  # as typed: no pipefail
            if any(line.startswith("bpfbatch: error: ") for line in shown.splitlines()):
                assert proc.returncode not in (0, 130), (
                    f"{block.where}: $ {world.back(command)} shows an error but exited 0")
            else:
                _check_status(proc, block, f"$ {world.back(command)}")
            got = normalise(world.back(proc.stdout + proc.stderr), shape)
            assert got == normalise(world.back(shown), shape), (
                f"{block.where}: $ {world.back(command)}\nprinted:\n"
                + world.back(proc.stdout + proc.stderr))


def test_every_block_is_run_written_or_marked():
    """A block the harness would silently pass over is an error: give it a ``file:`` name or
    a ``not run:`` reason."""
    for block in BLOCKS:
        if "not run" in block.markers:
            assert block.markers["not run"], f"{block.where}: 'not run:' needs a reason"
            continue
        assert block.lang in _RUN | {"text"} or "file" in block.markers, (
            f"{block.where}: a {block.lang} block runs nowhere: mark it <!-- file: NAME --> "
            "for a block a later one uses, or <!-- not run: REASON -->")


@functools.cache
def _help(command: tuple[str, ...]) -> str:
    proc = subprocess.run([str(BIN / "bpfbatch"), *command, "--help"], capture_output=True,
                          text=True, env=dict(_environment(), COLUMNS="200"))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


_OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z0-9][\w-]*)")


def _synopses() -> list[tuple[Block, list[str], list[str]]]:
    """``(block, command words, options)`` of each ``bpfbatch CMD ...`` line of the ``text``
    blocks, with the indented lines that continue it (``[--opt ...]``, ``| --opt ...``)."""
    found: list[tuple[Block, list[str], list[str]]] = []
    for block in BLOCKS:
        if block.lang != "text":
            continue
        current = None
        for line in block.text.splitlines():
            words = line.split("#")[0].split()
            if current is not None and line[:1].isspace() and words and words[0][0] in "[|-":
                current[2].extend(_OPTION.findall(" ".join(words)))
                continue
            current = None
            words = [w for i, w in enumerate(words) if not (i in (1, 2) and w in ("-v", "-q"))]
            if len(words) < 2 or words[0] != "bpfbatch":
                continue
            command = words[1:3] if words[1] in GROUPS and len(words) > 2 \
                and not words[2].startswith("-") else words[1:2]
            current = (block, command, _OPTION.findall(" ".join(words[1 + len(command):])))
            found.append(current)
    return found


#: Commands with subcommands (``bpfbatch top tcp``).
GROUPS = {"top", "filter", "tc"}
#: Groups that also run on their own (``tc -b FILE`` beside ``tc apply``).
SELF_RUNNING = {"tc"}


def _options(help_text: str) -> list[list[str]]:
    """Each option of a ``--help`` text, as its spellings (``["-o", "--output"]``)."""
    found = []
    for line in help_text.splitlines():
        if re.match(r"^\s+-", line):
            head = re.split(r"\s{2,}", line.strip())[0]
            found.append([w for w in re.findall(r"--?[\w-]+", head)])
    return found


def _commands() -> list[list[str]]:
    """Every command, subcommands of a group as ``[group, name]``."""
    found = []
    for name in COMMANDS:
        if name not in GROUPS or name in SELF_RUNNING:
            found.append([name])
        if name not in GROUPS:
            continue
        text = _help((name,)).split("Commands:", 1)[1]
        found += [[name, line.split()[0]] for line in text.splitlines() if line.strip()]
    return found


def test_every_option_is_documented():
    """Each option of each command's ``--help`` is spelled somewhere in the README (one of
    its spellings: ``-o`` or ``--output``)."""
    readme = README.read_text()
    missing = []
    for command in _commands():
        for spellings in _options(_help(tuple(command))):
            if "--help" in spellings:
                continue
            if not any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", readme)
                       for o in spellings):
                missing.append(f"bpfbatch {' '.join(command)} {'/'.join(spellings)}")
    assert not missing, "options the README never names:\n" + "\n".join(missing)


def test_synopsis_options_exist():
    """A ``bpfbatch CMD [--opt]`` synopsis line names only options CMD takes."""
    for block, command, options in _synopses():
        if command[0] not in COMMANDS:
            raise AssertionError(f"{block.where}: no command {command[0]!r}")
        text = _help(tuple(command))
        listed = set(_OPTION.findall(text))
        # iproute2's single-dash spelling of a long option (tc's -force, -netns).
        missing = [o for o in options if o not in listed and "-" + o not in listed]
        assert not missing, f"{block.where}: bpfbatch {' '.join(command)} has no {missing}"


def test_every_command_is_documented():
    """Each command of ``bpfbatch --help`` is shown in a README block as ``bpfbatch CMD``."""
    shown = {word for block in BLOCKS for word in
             re.findall(r"\bbpfbatch(?:\s+-[vq])*\s+([a-z][\w-]*)", block.text)}
    missing = sorted(set(COMMANDS) - shown)
    assert not missing, f"commands no README block shows: {missing}"


def test_the_harness_reads_blocks_and_markers():
    """The extraction itself: fences, markers right above (not further), transcripts."""
    text = ("intro\n<!-- not run: needs a second host -->\n```sh\nssh there\n```\n\n"
            "<!-- file: f.c -->\n\n```c\nint x;\n```\n```console\n$ echo 1\n1\n$ true\n```\n")
    found = blocks(text)
    assert [(b.line, b.lang, b.markers) for b in found] == [
        (3, "sh", {"not run": "needs a second host"}), (9, "c", {}), (12, "console", {})]
    assert [b.lang for b in blocks("```\n$ ls\n```\n```\nbpfbatch x\n```\n")] == ["console",
                                                                                "text"]
    assert transcript(found[2].text) == [("echo 1", "1\n"), ("true", "\n")]
    assert normalise("map 12 'x': 3 of 5 in 0.7 ms\n\n", False) == ["map N 'x': 3 of 5 in T"]
    assert normalise("10.0.0.4   IPPROTO_TCP  ----  ---", True) == ["#.# ENUM - -"]


def test_help_examples_run(world: World, folder: Path):
    """The examples the ``--help`` texts give: exec's ``--where`` predicate runs on the demo
    table, and tcp-mmap's loopback recipe is the pair a README block runs (plus ``-x``)."""
    where = re.search(r"e\.g\.\s+'([^']+)'", " ".join(_help(("exec",)).split()))[1]
    proc = subprocess.run([str(BIN / "bpfbatch"), "exec", "pinned", world.pin, "--where", where],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip().isdigit(), proc.stderr
    recipe = re.findall(r"'(-[^']+)'", " ".join(_help(("tcp-mmap",)).split()))
    assert len(recipe) == 2
    executed = [line for block in BLOCKS if block.lang == "sh" and "not run" not in block.markers
                for line in block.text.splitlines() if line.startswith("bpfbatch tcp-mmap ")]
    for flags in recipe:
        assert any(line.split("#")[0].split()[2:2 + len(flags.split())] == flags.split()
                   for line in executed), f"tcp-mmap --help recipe {flags!r} is run by no README block"


def _c_code(text: str) -> list[str]:
    """C without comments, one token run per line, blank lines gone."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def test_the_filter_shown_is_the_shipped_example():
    """"progs/example_filter.bpf.c is the filter above": the same code, comments aside."""
    [shown] = [b for b in BLOCKS if b.markers.get("file") == "f.bpf.c"]
    assert _c_code(shown.text) == _c_code((REPO / "progs" / "example_filter.bpf.c").read_text())
