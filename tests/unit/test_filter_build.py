"""``bpfbatch filter build``'s parts: which clang it picks, the C text of a BTF (libbpf's
dump through ctypes, against bpftool's), and the clang command line."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from bpfbatch._sys import libbpf
from bpfbatch.errors import BpfBatchError, NotFoundError
from bpfbatch.exec import build
from bpfbatch.loader import PROGS_DIR


def _tools(folder: Path, *names: str) -> None:
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(0o755)


@pytest.fixture
def path(tmp_path, monkeypatch):
    """An empty PATH of two folders, filled by the test; no $CLANG."""
    monkeypatch.delenv("CLANG", raising=False)
    a, b = tmp_path / "a", tmp_path / "b"
    _tools(a)
    _tools(b)
    monkeypatch.setenv("PATH", f"{a}{os.pathsep}{b}")
    return a, b


def test_clang_is_the_newest_versioned_one_when_there_is_no_plain_clang(path):
    a, b = path
    _tools(a, "clang-14", "clang-cpp-19", "clang-format-18")
    _tools(b, "clang-16", "clang-9")
    assert build.find_clang() == str(b / "clang-16")  # numerically newest, not "clang-9"
    _tools(b, "clang")
    assert build.find_clang() == str(b / "clang")


def test_clang_given_or_from_the_environment_wins(path, monkeypatch):
    a, b = path
    _tools(a, "clang", "mine")
    monkeypatch.setenv("CLANG", "mine")
    assert build.find_clang() == str(a / "mine")
    assert build.find_clang(str(a / "clang")) == str(a / "clang")
    with pytest.raises(NotFoundError, match="not found"):
        build.find_clang("clang-99")


def test_no_clang_names_the_package_to_install(path):
    _tools(path[0], "clang-format-16", "clang-16.bak")
    with pytest.raises(NotFoundError, match="apt install clang-16"):
        build.find_clang()


@pytest.mark.parametrize("source,output", [("f.bpf.c", "f.bpf.o"), ("dir/x.c", "dir/x.o"),
                                           ("noext", "noext.o")])
def test_default_output(source, output):
    assert build.default_output(Path(source)) == Path(output)


def test_command_searches_the_users_folders_then_vmlinux_then_the_package(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setattr(build, "vmlinux_header", lambda: cache)
    mine = tmp_path / "inc"
    mine.mkdir()
    source = tmp_path / "src" / "f.bpf.c"
    argv = build.command(source, tmp_path / "f.o", clang="clang", includes=[mine])
    assert [a for a in argv if a.startswith("-I")] == [f"-I{mine}", f"-I{cache}", f"-I{PROGS_DIR}"]
    assert argv[:5] == ["clang", "-g", "-O2", "-target", "bpf"]
    (mine / "vmlinux.h").write_text("")  # the user's own vmlinux.h: none generated
    argv = build.command(source, tmp_path / "f.o", clang="clang", includes=[mine])
    assert f"-I{cache}" not in argv


@pytest.mark.parametrize("name", ["map_exec.bpf.o", "tcptop.bpf.o", "flowtable.bpf.o"])
def test_btf_as_c_is_bpftools(name):
    """libbpf's btf_dump through ctypes prints the types bpftool prints (bpftool's guard and
    pragmas aside; an older libbpf may spell an empty parameter list ``()`` for ``(void)``)."""
    obj = PROGS_DIR / name
    if not obj.exists():
        pytest.skip("BPF objects not built (make -C progs)")
    theirs = subprocess.run(["bpftool", "btf", "dump", "file", str(obj), "format", "c"],
                            capture_output=True, text=True, check=True).stdout
    body = theirs[theirs.index("#endif\n\n") + len("#endif\n\n"):theirs.rindex("\n#ifndef")]
    ours = libbpf.btf_c_types(str(obj)).decode()
    assert re.sub(r"\(void\)", "()", ours).strip() == re.sub(r"\(void\)", "()", body).strip()
    assert ours.count("struct ") > 3


def test_btf_as_c_of_a_file_that_is_not_btf(tmp_path):
    bad = tmp_path / "not.btf"
    bad.write_bytes(b"\0" * 64)
    with pytest.raises(BpfBatchError, match="parse BTF"):
        libbpf.btf_c_types(str(bad))


def test_a_source_that_is_not_a_regular_file_is_named_so(tmp_path):
    with pytest.raises(NotFoundError) as missing:
        build.build(str(tmp_path / "nope.bpf.c"))
    assert str(missing.value) == f"{tmp_path / 'nope.bpf.c'}: no such file"
    with pytest.raises(NotFoundError) as device:
        build.build("/dev/null")
    assert str(device.value) == "/dev/null: not a regular file"
