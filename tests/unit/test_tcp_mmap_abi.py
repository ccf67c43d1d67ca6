"""The ctypes ``struct tcp_zerocopy_receive`` against the kernel's UAPI layout."""

import ctypes
import shutil
import subprocess

import pytest

from bpfbatch.tcp_mmap._linux import TcpZerocopyReceive

# linux/tcp.h, Linux 5.11+: the 64-byte layout the kernel accepts in full.
OFFSETS = {"address": 0, "length": 8, "recv_skip_hint": 12, "inq": 16, "err": 20,
           "copybuf_address": 24, "copybuf_len": 32, "flags": 36, "msg_control": 40,
           "msg_controllen": 48, "msg_flags": 56, "reserved": 60}


def test_size_and_offsets():
    assert ctypes.sizeof(TcpZerocopyReceive) == 64
    assert {name: getattr(TcpZerocopyReceive, name).offset for name in OFFSETS} == OFFSETS


def test_layout_matches_the_installed_header(tmp_path):
    """Cross-check with the C compiler reading the system's linux/tcp.h."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to read linux/tcp.h")
    source = tmp_path / "layout.c"
    source.write_text(
        "#include <stdio.h>\n#include <stddef.h>\n#include <linux/tcp.h>\n"
        "int main(void) {\n"
        '  printf("size %zu\\n", sizeof(struct tcp_zerocopy_receive));\n'
        + "".join(f'  printf("{name} %zu\\n", offsetof(struct tcp_zerocopy_receive, {name}));\n'
                  for name in OFFSETS)
        + "  return 0;\n}\n")
    binary = tmp_path / "layout"
    built = subprocess.run([cc, "-o", str(binary), str(source)], capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip(f"linux/tcp.h not usable here: {built.stderr.strip()[:200]}")
    printed = dict(line.split() for line in subprocess.run(
        [str(binary)], capture_output=True, text=True, check=True).stdout.splitlines())
    assert int(printed.pop("size")) == ctypes.sizeof(TcpZerocopyReceive)
    assert {name: int(value) for name, value in printed.items()} == {
        name: getattr(TcpZerocopyReceive, name).offset for name in OFFSETS}
