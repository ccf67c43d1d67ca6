"""The CO-RE object loader against the real kernel: .rodata before load, hook choice, maps by
name, one-line failures with the verifier's log behind -v, and a clean close."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from bpfbatch._sys import libbpf
from bpfbatch.errors import BpfBatchError, InputError, KernelError, NotFoundError, NotSupportedError
from bpfbatch.loader import BpfObject
from bpfbatch.map import probes

PROGS = Path(__file__).resolve().parents[2] / "progs"
CLANG = shutil.which("clang-16") or shutil.which("clang")


def compile_object(tmp_path: Path, source: str) -> Path:
    """A one-off object built like progs/Makefile builds the package's."""
    if CLANG is None or not (PROGS / "vmlinux.h").exists():
        pytest.skip("needs clang and progs/vmlinux.h (make -C progs)")
    src = tmp_path / "probe.bpf.c"
    src.write_text('#include "vmlinux.h"\n#include <bpf/bpf_helpers.h>\n' + source +
                   '\nchar LICENSE[] SEC("license") = "GPL";\n')
    out = tmp_path / "probe.bpf.o"
    subprocess.run([CLANG, "-g", "-O2", "-target", "bpf", f"-I{PROGS}", "-c", str(src), "-o",
                    str(out)], check=True, capture_output=True)
    return out


def unchecked_lookup(before: str = "") -> str:
    """A program the verifier refuses (a map value used without its NULL check), with
    ``before`` (C statements adding to ``sum``) ahead of the bad access."""
    return """
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 1);
         __type(key, __u32); __type(value, __u64); } counts SEC(".maps");
SEC("raw_tp/sock_send_length")
int bad(void *ctx)
{
    __u32 key = 0;
    __u64 sum = 0, *value;
    %s
    value = bpf_map_lookup_elem(&counts, &key);
    return *value + sum;  /* no NULL check: the verifier refuses */
}
""" % before


def failed_load(path: Path) -> tuple[str, list[str]]:
    """Load an object the kernel refuses, libbpf's log captured: ``(error line, messages)``."""
    log: list[str] = []
    with BpfObject(path) as obj:
        libbpf.set_log_sink(log.append)
        try:
            with pytest.raises(KernelError) as raised:
                obj.load()
        finally:
            libbpf.set_log_sink(None)
    return str(raised.value), log


def test_rodata_set_before_load_is_what_the_kernel_holds():
    with BpfObject.package("tcptop") as obj:
        obj.set_rodata(target_pid=4242, target_family=10)
        obj.load()
        assert obj.global_value(".rodata", "target_pid") == 4242
        assert obj.global_value(".rodata", "target_family") == 10
        assert obj.global_value(".bss", "dropped_events") == 0


def test_rodata_errors_name_the_variable():
    with BpfObject.package("tcptop") as obj:
        with pytest.raises(InputError, match="no such variable.*target_pid"):
            obj.set_rodata(nope=1)
        with pytest.raises(InputError, match="target_family.*does not fit"):
            obj.set_rodata(target_family=1 << 16)
        obj.load()
        with pytest.raises(BpfBatchError, match="frozen"):
            obj.set_rodata(target_pid=1)


def test_hook_choice_prefers_tp_btf_and_can_be_forced_to_raw_tp():
    with BpfObject.package("tcptop") as obj:
        obj.load()
        expected = "tp_btf" if probes.tp_btf("sock_send_length") else "raw_tp"
        assert obj.hooks == {"sock_send_length": expected, "sock_recv_length": expected}
    with BpfObject.package("tcptop") as obj:
        obj.load(hook_kinds=("raw_tp",))
        obj.attach()
        assert obj.hooks == {"sock_send_length": "raw_tp", "sock_recv_length": "raw_tp"}
        loaded = {p.name for p in obj.programs() if libbpf.lib.bpf_program__autoload(p.handle)}
        assert loaded == {"send_raw", "recv_raw"}


def test_maps_by_name_and_close_releases_every_fd():
    with BpfObject.package("slabratetop") as obj:
        with pytest.raises(BpfBatchError, match="not loaded"):
            obj.map("slabs_a")
        obj.load()
        obj.attach()
        slabs = obj.map("slabs_a")
        assert slabs.info.key_size == 8 and slabs.info.value_size == obj.struct("slab_value").size
        with pytest.raises(NotFoundError, match="no_such_map"):
            obj.map("no_such_map")
        fds = [slabs.fd] + [libbpf.lib.bpf_program__fd(p.handle) for p in obj.programs()
                            if libbpf.lib.bpf_program__autoload(p.handle)]
        assert all(os.fstat(fd) for fd in fds)
    for fd in fds:  # the kernel frees the objects asynchronously; our references are gone
        with pytest.raises(OSError) as raised:
            os.fstat(fd)
        assert raised.value.errno == errno.EBADF
    obj.close()  # a second close is harmless


def test_structs_and_sections_are_found_by_kind_and_name():
    with BpfObject.package("tcptop") as obj:
        assert obj.struct("tcptop_key").size == obj.dtype("tcptop_key").itemsize
        with pytest.raises(NotFoundError, match="tcptop.bpf.o: no_such: no such struct"):
            obj.struct("no_such")
        with pytest.raises(NotFoundError, match="tcptop.bpf.o: .nope: the object has no such "
                                                "data section"):
            obj.global_value(".nope", "x")


def test_missing_package_object_says_how_to_build():
    with pytest.raises(NotFoundError, match="make -C progs"):
        BpfObject.package("no_such_tool")


def test_verifier_rejection_is_one_line_and_the_log_goes_to_the_sink(tmp_path):
    message, log = failed_load(compile_object(tmp_path, unchecked_lookup()))
    assert "\n" not in message
    assert message.startswith("probe.bpf.o: load object: the verifier rejected program bad: ")
    assert "invalid mem access" in message and "-v" in message
    assert "invalid mem access 'map_value_or_null'" in "".join(log)


def test_unknown_tracepoint_says_why_each_hook_failed(tmp_path):
    path = compile_object(tmp_path, """
SEC("tp_btf/no_such_tracepoint") int a(void *ctx) { return 0; }
SEC("raw_tp/no_such_tracepoint") int b(void *ctx) { return 0; }
""")
    with BpfObject(path) as obj:
        with pytest.raises(NotSupportedError) as raised:
            obj.load()
    message = str(raised.value)
    assert "no_such_tracepoint" in message
    assert "tp_btf: " in message and "raw_tp: " in message and "ENOENT" in message


def test_verifier_log_longer_than_4k_still_names_the_reason(tmp_path):
    """libbpf hands the whole verifier log over as one message; 200 unrolled helper calls
    before the bad access make it far longer than any fixed formatting buffer."""
    message, log = failed_load(compile_object(tmp_path, unchecked_lookup(
        "#pragma unroll\n    for (int i = 0; i < 200; i++)\n        sum += bpf_get_prandom_u32();")))
    assert max(len(line) for line in log) > 8192
    assert message.startswith("probe.bpf.o: load object: the verifier rejected program bad: ")
    assert "invalid mem access" in message


def test_an_exception_in_the_log_sink_reaches_the_caller():
    """ctypes drops what a callback raises; the loader re-raises it after the native call."""
    class Stop(Exception):
        pass

    def sink(line: str) -> None:
        raise Stop(line)

    with BpfObject.package("tcptop") as obj:
        libbpf.set_log_sink(sink)
        try:
            with pytest.raises(Stop):
                obj.load()
        finally:
            libbpf.set_log_sink(None)


def test_no_sink_means_libbpf_never_calls_into_python():
    libbpf.set_log_sink(None)
    installed = libbpf.lib.libbpf_set_print(None)
    assert installed is None


def test_ctrl_c_during_native_calls_is_raised_after_them():
    raised_inside = False
    with pytest.raises(KeyboardInterrupt):
        with libbpf.signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            try:
                BpfObject.package("tcptop").close()
            except KeyboardInterrupt:
                raised_inside = True
    assert not raised_inside


def test_hook_kinds_the_object_lacks_are_named(tmp_path):
    path = compile_object(tmp_path, 'SEC("raw_tp/sock_send_length") int a(void *ctx) { return 0; }')
    with BpfObject(path) as obj:
        with pytest.raises(NotFoundError) as raised:
            obj.load(hook_kinds=("tp_btf",))
    assert str(raised.value) == ("probe.bpf.o: the object has no tp_btf program for tracepoint "
                                 "sock_send_length")
