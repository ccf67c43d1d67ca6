"""The build hook: a wheel carries the package's BPF objects, compiled and stripped.

``build_py`` runs ``make -C progs`` (clang, and bpftool for the running kernel's
``vmlinux.h``) before the package is copied, so the objects are in any wheel built from a
clean clone, and then strips their DWARF from the built copies (``llvm-strip -g``: ``.BTF`` and
``.BTF.ext``, which CO-RE and the filter contract need, stay). Without clang or bpftool the
build stops saying what is missing: a wheel that silently lacks the objects would make ``top``
fail and ``exec`` fall back to user space after installation.
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithBpfObjects(build_py):
    def run(self):
        clang = os.environ.get("CLANG", "clang-16")
        strip = os.environ.get("LLVM_STRIP") or next(
            (tool for tool in ("llvm-strip-16", "llvm-strip") if shutil.which(tool)), "llvm-strip")
        missing = [tool for tool in (clang, os.environ.get("BPFTOOL", "bpftool"), strip)
                   if shutil.which(tool) is None]
        if missing:
            raise SystemExit(f"bpfbatch: building the wheel compiles the BPF objects in progs/: "
                             f"{', '.join(missing)} not found (Debian: apt install clang-16 "
                             f"llvm-16 bpftool; or set CLANG, LLVM_STRIP, BPFTOOL)")
        subprocess.run(["make", "-s", "-C", str(ROOT / "progs"), f"CLANG={clang}"], check=True)
        super().run()
        # An editable install (`pip install -e`, what `make` sets up) runs the package from the
        # source tree: the objects stay where progs/ built them, DWARF and all.
        built = ROOT if self.editable_mode else Path(self.build_lib)
        objects = sorted((built / "bpfbatch" / "progs").glob("*.bpf.o"))
        if not objects:
            raise SystemExit("bpfbatch: no BPF objects reached the build (progs/ built none)")
        if not self.editable_mode:
            subprocess.run([strip, "-g", *map(str, objects)], check=True)


setup(cmdclass={"build_py": BuildWithBpfObjects})
