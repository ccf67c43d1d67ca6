"""The wheel a user installs: built from a clean clone, it carries the BPF objects (stripped
of DWARF, BTF kept), and an install in a fresh venv outside the repository runs ``dump``,
``exec --mode kernel`` and ``top``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy
import pytest

from bpfbatch.labs.demo import create_flow_table, fill_flow_table

REPO = Path(__file__).resolve().parents[2]


def run(*args, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A venv outside the repository with the wheel of a clean clone of HEAD installed."""
    tmp = tmp_path_factory.mktemp("wheel")
    head = run("git", "-C", REPO, "rev-parse", "HEAD").stdout.strip()
    clone = tmp / "clone"
    run("git", "clone", "-q", "--no-checkout", REPO, clone)
    run("git", "-C", clone, "checkout", "-q", head)
    assert not list((clone / "bpfbatch").glob("progs/*.o"))  # nothing prebuilt
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "dist", clone)
    wheel = next((tmp / "dist").glob("bpfbatch-*.whl"))
    venv = tmp / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout
    # The dependencies come from this interpreter's site-packages (a plain path: its .pth
    # files, the repository's editable install among them, are not processed).
    (Path(site.strip()) / "deps.pth").write_text(str(Path(numpy.__file__).parents[1]) + "\n")
    run(python, "-m", "pip", "install", "-q", "--no-deps", wheel)
    return tmp, wheel, venv


def test_wheel_carries_stripped_objects_with_btf(installed):
    tmp, wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    objects = sorted(n for n in names if n.endswith(".bpf.o"))
    assert {Path(n).name for n in objects} >= {"map_exec.bpf.o", "tcptop.bpf.o",
                                                "slabratetop.bpf.o"}
    zipfile.ZipFile(wheel).extractall(tmp / "unzipped")
    for name in objects:
        sections = run("readelf", "-S", "--wide", tmp / "unzipped" / name).stdout
        assert ".BTF" in sections and ".BTF.ext" in sections, name
        assert ".debug_info" not in sections, name


def test_installed_commands_run_outside_the_repository(installed):
    tmp, _, venv = installed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = run(venv / "bin" / "python", "-c", "import bpfbatch; print(bpfbatch.__file__)",
                cwd=tmp, env=env).stdout
    assert where.startswith(str(venv))
    bpfbatch = venv / "bin" / "bpfbatch"
    path = f"/sys/fs/bpf/bb_whl_{os.getpid()}"
    with create_flow_table(256, name=f"bb_whl_{os.getpid():x}") as m:
        fill_flow_table(m, 100)
        m.pin(path)
        try:
            records = run(bpfbatch, "dump", "pinned", path, "-o", "jsonl", cwd=tmp, env=env)
            assert len([json.loads(line) for line in records.stdout.splitlines()]) == 100
            selected = run(bpfbatch, "exec", "pinned", path, "--where", "packets >= 1",
                           "--mode", "kernel", cwd=tmp, env=env)
            assert selected.stdout == "100\n" and "(kernel," in selected.stderr
        finally:
            os.unlink(path)
    # Loading and attaching tcptop's object succeeds (without it: "run make -C progs").
    top = run(bpfbatch, "top", "tcp", "-C", "-S", "1", "1", cwd=tmp, env=env)
    assert top.stdout.startswith("Tracing... Output every 1 secs") and top.stderr == ""


def test_installed_wheel_builds_and_runs_a_filter(installed):
    """The README's own-filter recipe for a wheel user without bpftool: the headers it
    includes come with the package, vmlinux.h is generated from the kernel's BTF by libbpf
    into an empty cache, clang is found by name (Debian's clang-16), and the object selects
    in the kernel."""
    tmp, wheel, venv = installed
    names = {Path(n).name for n in zipfile.ZipFile(wheel).namelist()}
    assert {"bpfbatch_filter.h", "map_exec.h", "flowtable.h", "bpf_helpers.h",
            "bpf_helper_defs.h", "bpf_endian.h"} <= names
    work = tmp / "filter"
    work.mkdir()
    source = work / "f.bpf.c"
    source.write_text((REPO / "progs" / "example_filter.bpf.c").read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CLANG")}
    env.update(XDG_CACHE_HOME=str(tmp / "cache"), BPFTOOL=str(tmp / "no-bpftool"))
    bpfbatch = venv / "bin" / "bpfbatch"
    built = run(bpfbatch, "filter", "build", source, cwd=work, env=env)
    assert built.stderr == f"built {work / 'f.bpf.o'}\n"
    assert list((tmp / "cache" / "bpfbatch").glob("vmlinux-*/vmlinux.h"))
    with create_flow_table(256, name=f"bb_wf_{os.getpid():x}") as m:
        fill_flow_table(m, 200)
        small = sum(1 for _, v in m.items() if v["packets"] < 10)
        selected = run(bpfbatch, "exec", "id", m.info.id, "--filter-obj", work / "f.bpf.o",
                       "--filter-prog", "small_flows", cwd=work, env=env)
        assert selected.stdout == f"{small}\n"
