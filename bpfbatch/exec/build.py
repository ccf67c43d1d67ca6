"""Compiling a filter for ``exec --filter-obj`` from its C source (``bpfbatch filter build``).

A filter is compiled as ``progs/`` compiles the package's own objects (``clang -g -O2 -target
bpf``, CO-RE: ``-g`` because the runner reads the filter's arguments from its BTF), against the
headers the package installs next to its objects: the contract (``bpfbatch_filter.h``,
``map_exec.h``), the flow table's layout (``flowtable.h``) and libbpf's ``bpf/bpf_helpers.h``
and ``bpf/bpf_endian.h`` as the package was built with them. So an installed wheel needs clang
and nothing else of a development set-up:

- clang is ``--clang``, else ``$CLANG``, else ``clang`` on ``PATH``, else the newest
  ``clang-NN`` there (Debian installs ``clang-16`` without a plain ``clang``);
- ``vmlinux.h`` is the source's folder's or an ``-I`` folder's when one holds it, else generated
  once per kernel from ``/sys/kernel/btf/vmlinux`` (``bpftool btf dump ... format c``, as
  ``progs/`` does, or the same from libbpf when bpftool is not installed) into
  ``$XDG_CACHE_HOME/bpfbatch`` (``~/.cache/bpfbatch``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from ..errors import InputError, NotFoundError
from ..loader import PROGS_DIR

#: The kernel's BTF, the source of a generated ``vmlinux.h``.
KERNEL_BTF = Path("/sys/kernel/btf/vmlinux")
#: ``uname -m`` → libbpf's ``__TARGET_ARCH_*`` (what ``bpf_tracing.h``'s PT_REGS macros need).
_TARGET_ARCH = {"x86_64": "x86", "aarch64": "arm64", "s390x": "s390", "ppc64le": "powerpc",
                "riscv64": "riscv", "loongarch64": "loongarch"}
_VERSIONED_CLANG = re.compile(r"clang-(\d+)")


def find_clang(given: str | None = None) -> str:
    """The clang to compile with (see the module doc for the order)."""
    wanted = given or os.environ.get("CLANG")
    if wanted:
        found = shutil.which(wanted)
        if found is None:
            raise NotFoundError("not found (not a file, nor a command on PATH)", obj=wanted)
        return found
    plain = shutil.which("clang")
    if plain:
        return plain
    versions = {}
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        for name in names:
            match = _VERSIONED_CLANG.fullmatch(name)
            path = os.path.join(folder, name)
            if match and os.access(path, os.X_OK):
                versions.setdefault(int(match[1]), path)
    if not versions:
        raise NotFoundError("no clang or clang-NN on PATH (Debian: apt install clang-16; or "
                            "--clang / $CLANG)", obj="clang")
    return versions[max(versions)]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bpfbatch"


#: What ``bpftool btf dump ... format c`` puts around the types: an include guard, and CO-RE
#: relocations for every struct and union member a program reads.
_HEADER_START = b"""#ifndef __VMLINUX_H__
#define __VMLINUX_H__

#ifndef BPF_NO_PRESERVE_ACCESS_INDEX
#pragma clang attribute push (__attribute__((preserve_access_index)), apply_to = record)
#endif

"""
_HEADER_END = b"""
#ifndef BPF_NO_PRESERVE_ACCESS_INDEX
#pragma clang attribute pop
#endif

#endif /* __VMLINUX_H__ */
"""


def _kernel_types_in_c(bpftool: str | None) -> bytes:
    """``vmlinux.h``'s text: bpftool's when it is on PATH (~0.5 s), else the same types from
    libbpf's ``btf_dump`` through ctypes (~10 s: a Python call per printf), for an install
    that has libbpf but no bpftool."""
    tool = shutil.which(bpftool or os.environ.get("BPFTOOL") or "bpftool")
    if tool is None:
        from .._sys import libbpf

        return _HEADER_START + libbpf.btf_c_types(str(KERNEL_BTF)) + _HEADER_END
    done = subprocess.run([tool, "btf", "dump", "file", str(KERNEL_BTF), "format", "c"],
                          capture_output=True)
    if done.returncode != 0:
        raise InputError(f"bpftool btf dump failed: {done.stderr.decode(errors='replace')}"
                         .strip(), obj="vmlinux.h")
    return done.stdout


def vmlinux_header(bpftool: str | None = None) -> Path:
    """The folder of a ``vmlinux.h`` for the running kernel, generated on first use and kept
    per kernel release and BTF size (a new kernel gets its own)."""
    try:
        size = KERNEL_BTF.stat().st_size
    except FileNotFoundError:
        raise NotFoundError("the kernel has no BTF (CONFIG_DEBUG_INFO_BTF): put a vmlinux.h "
                            "beside the source or in an -I folder", obj=str(KERNEL_BTF)) from None
    folder = _cache_dir() / f"vmlinux-{os.uname().release}-{size}"
    header = folder / "vmlinux.h"
    if header.exists():
        return folder
    text = _kernel_types_in_c(bpftool)
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".vmlinux.h.{os.getpid()}"
    try:
        partial.write_bytes(text)
        os.replace(partial, header)  # whole or absent, for a build running beside this one
    finally:
        partial.unlink(missing_ok=True)
    return folder


def default_output(source: Path) -> Path:
    """``f.bpf.c`` → ``f.bpf.o`` beside it (any ``.c`` → ``.o``)."""
    return source.with_suffix(".o") if source.suffix == ".c" else source.with_name(source.name + ".o")


def command(source: Path, output: Path, *, clang: str, includes: list[Path]) -> list[str]:
    """The clang command line: the user's ``-I`` folders first (their headers win), then a
    generated ``vmlinux.h``'s folder when neither they nor the source's folder hold one, then
    the package's headers."""
    folders = list(includes)
    if not any((folder / "vmlinux.h").exists() for folder in [source.parent, *folders]):
        folders.append(vmlinux_header())
    folders.append(PROGS_DIR)
    arch = _TARGET_ARCH.get(os.uname().machine)
    return [clang, "-g", "-O2", "-target", "bpf",
            *([f"-D__TARGET_ARCH_{arch}"] if arch else []),
            *(f"-I{folder}" for folder in folders), "-c", str(source), "-o", str(output)]


def build(source: str, output: str | None = None, *, clang: str | None = None,
          includes: tuple[str, ...] = ()) -> Path:
    """Compile ``source`` into a filter object; the compiler's own messages go to stderr as it
    prints them, and a failed compile is an :class:`InputError` naming the source."""
    src = Path(source)
    if not src.is_file():  # /dev/null exists: say what it is not
        raise NotFoundError("not a regular file" if src.exists() else "no such file",
                            obj=source)
    folders = [Path(folder) for folder in includes]
    for folder in folders:
        if not folder.is_dir():
            raise NotFoundError("no such folder", obj=f"-I {folder}")
    out = Path(output) if output else default_output(src)
    argv = command(src, out, clang=find_clang(clang), includes=folders)
    if subprocess.run(argv).returncode != 0:
        raise InputError(f"{Path(argv[0]).name} failed (its messages are above)", obj=source)
    return out
