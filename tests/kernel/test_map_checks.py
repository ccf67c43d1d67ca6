"""The per-key API refuses wrong-sized buffers before any syscall (the kernel would copy
key_size / value_size bytes from whatever it is handed), and the errors of frozen maps, pins
this user may not open and unreadable BTF say what happened."""

import ctypes
import json
import os
import subprocess
import sys

import pytest

from bpfbatch import Map
from bpfbatch.map import writes
from bpfbatch._sys.abi import MapType
from bpfbatch.btf import BtfBuilder
from bpfbatch.errors import FROZEN, InputError, KernelError

BPF_MAP_FREEZE = 22


@pytest.fixture
def wide(maps):
    """A hash map with 4-byte keys and 96-byte values, holding key 1."""
    m = maps(MapType.HASH, 4, 96, 8)
    m.update((1).to_bytes(4, "little"), b"v" * 96)
    return m


def heap_guard(m: Map) -> bytes:
    """What key 1 holds, read through bpftool (another path than ours)."""
    out = subprocess.run(["bpftool", "-j", "map", "lookup", "id", str(m.info.id), "key",
                          "1", "0", "0", "0"], capture_output=True, text=True, check=True)
    return bytes(int(b, 16) for b in json.loads(out.stdout)["value"])


@pytest.mark.parametrize("call,message", [
    (lambda m: m.update((1).to_bytes(4, "little"), b"Z"), "update element: value has 1 bytes"),
    (lambda m: m.update((1).to_bytes(4, "little"), b"Z" * 97), "value has 97 bytes"),
    (lambda m: m.update(b"\1", b"Z" * 96), "update element: key has 1 bytes"),
    (lambda m: m.lookup(b"\1\0"), "lookup element: key has 2 bytes"),
    (lambda m: m.delete(b"\1\0\0\0\0"), "delete element: key has 5 bytes"),
    (lambda m: m.next_key(b""), "get next key: key has 0 bytes"),
    (lambda m: m.lookup(None), "lookup element: a 4-byte key is needed"),
    (lambda m: m.update(1, b"Z" * 96), "expected a bytes-like object, got int"),
])
def test_wrong_sizes_are_refused_before_the_syscall(wide, call, message):
    with pytest.raises(InputError, match=message) as info:
        call(wide)
    assert "\n" not in str(info.value)
    assert heap_guard(wide) == b"v" * 96  # nothing written
    assert wide.next_key(None) == (1).to_bytes(4, "little") and wide.next_key(
        (1).to_bytes(4, "little")) is None


def test_exact_sizes_accept_any_buffer(wide):
    key = bytearray((2).to_bytes(4, "little"))
    wide.update(memoryview(key), bytearray(b"w" * 96))
    assert wide.lookup(bytes(key)) == b"w" * 96
    assert wide.delete(memoryview(key)) and wide.lookup(key) is None


def test_keyless_maps_take_no_key(maps):
    queue = maps(MapType.QUEUE, 0, 8, 4)
    queue.update(None, b"12345678")
    with pytest.raises(InputError, match="queue maps have no keys, got 4 bytes"):
        queue.update(b"\0\0\0\0", b"12345678")
    with pytest.raises(InputError, match="value has 4 bytes"):
        queue.update(None, b"1234")
    assert queue.lookup(None) == b"12345678"  # a peek
    assert queue.pop() == b"12345678" and queue.pop() is None


def freeze(m: Map) -> None:
    attr = (ctypes.c_uint32 * 32)(m.fd)
    assert ctypes.CDLL(None, use_errno=True).syscall(321, BPF_MAP_FREEZE, attr, 128) == 0, \
        os.strerror(ctypes.get_errno())


def test_frozen_map_says_frozen(maps):
    m = maps(MapType.HASH, 4, 4, 8)
    m.update(b"\1\0\0\0", b"\2\0\0\0")
    freeze(m)
    for write in (lambda: m.update(b"\1\0\0\0", b"\3\0\0\0"), lambda: m.delete(b"\1\0\0\0"),
                  lambda: writes.update(m, b"\5\0\0\0", b"\6\0\0\0", 1)):
        with pytest.raises(KernelError) as info:
            write()
        assert info.value.errno == 1 and FROZEN in str(info.value)
        assert "needs root" not in str(info.value)
    assert m.lookup(b"\1\0\0\0") == b"\2\0\0\0"


def run_as_nobody(*args: str) -> subprocess.CompletedProcess:
    """``python -m bpfbatch ARGS`` as uid/gid 65534 (the package must be readable by it)."""
    def drop():
        os.setgid(65534)
        os.setuid(65534)
    return subprocess.run([sys.executable, "-m", "bpfbatch", *args], capture_output=True,
                          text=True, preexec_fn=drop, env={**os.environ, "HOME": "/"})


@pytest.fixture
def pinned(maps):
    """A map with BTF pinned at a unique path, the directory on the way open to everyone."""
    with BtfBuilder() as b:
        u32 = b.integer("unsigned int", 4)
        m = maps(MapType.HASH, 4, 4, 8, btf_fd=b.load(), btf_key_type_id=u32,
                 btf_value_type_id=u32)
    m.update(b"\1\0\0\0", b"\2\0\0\0")
    directory = f"/sys/fs/bpf/bb_perm_{os.getpid()}"
    os.mkdir(directory)
    os.chmod(directory, 0o755)
    path = f"{directory}/m"
    m.pin(path)
    yield path
    os.unlink(path)
    os.rmdir(directory)


def test_pin_this_user_may_not_open_says_so(pinned):
    os.chmod(pinned, 0o600)
    run = run_as_nobody("dump", "--pinned", pinned)
    assert run.returncode == 1, run.stderr
    assert run.stderr == (f"bpfbatch: error: {pinned}: open pinned object: permission denied "
                          f"by the pinned file's mode (0600, owner uid 0): uid 65534 may not "
                          f"read it (EACCES)\n")


def test_btf_this_user_may_not_read_says_so(pinned):
    os.chmod(pinned, 0o644)
    run = run_as_nobody("dump", "--pinned", pinned)
    assert run.returncode == 1 and run.stdout == ""
    assert "load BTF: the type information a map's keys and values are decoded with could " \
           "not be read: operation not permitted" in run.stderr, run.stderr
    assert "this map type" not in run.stderr


def test_list_json_omits_btf_id_like_bpftool(maps):
    plain = maps(MapType.HASH, 4, 4, 8, name="bb_nobtf")
    with BtfBuilder() as b:
        u32 = b.integer("unsigned int", 4)
        typed = maps(MapType.HASH, 4, 4, 8, name="bb_btf", btf_fd=b.load(),
                     btf_key_type_id=u32, btf_value_type_id=u32)
    ours = {r["id"]: r for r in json.loads(subprocess.run(
        [sys.executable, "-m", "bpfbatch", "list", "-o", "json"], capture_output=True,
        text=True, check=True).stdout)}
    for m in (plain, typed):
        theirs = json.loads(subprocess.run(["bpftool", "-j", "map", "show", "id",
                                            str(m.info.id)], capture_output=True, text=True,
                                           check=True).stdout)
        assert ("btf_id" in ours[m.info.id]) == ("btf_id" in theirs) == bool(m.info.btf_id)
        for field, value in ours[m.info.id].items():
            assert theirs[field] == value, field
