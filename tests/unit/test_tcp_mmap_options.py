"""``bpfbatch tcp-mmap`` (and tools/tcp_mmap.py): every bad option is refused with one line
naming it."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bpfbatch.cli.tcp_mmap import parse_args
from bpfbatch.errors import InputError
from bpfbatch.tcp_mmap import Config, default_alignment, parse_size
from bpfbatch.tcp_mmap._linux import huge_page_size
from bpfbatch.tcp_mmap.receiver import Report
from bpfbatch.tcp_mmap.sockets import resolve

TOOL = Path(__file__).resolve().parents[2] / "tools" / "tcp_mmap.py"


@pytest.mark.parametrize("argv, option, words", [
    ([], "-s/-H", "-s to receive"),
    (["-s", "-4", "-6"], "-4/-6", "mutually exclusive"),
    (["-s", "-C", "lots"], "-C", "not a size"),
    (["-s", "-C", "0"], "-C", "out of range"),
    (["-s", "-z", "-C", "1000"], "-C", "multiple of the page size"),
    (["-s", "-a", "3000"], "-a", "power of two"),
    (["-s", "-a", "12K"], "-a", "power of two"),
    (["-s", "-M", "40"], "-M", "out of range"),
    (["-s", "-p", "70000"], "-p", "out of range"),
    (["-s", "-p", "eighty"], "-p", "valid int"),  # typer: "valid int" or "valid integer"
    (["-H", "::1", "-p", "0"], "-p", "out of range"),
    (["-H", "::1", "-n", "0"], "-n", "must be positive"),
    (["-H", "::1", "--connections", "2"], "--connections", "only a server"),
    (["-s", "--connections", "0"], "--connections", "must be positive"),
    (["-s", "--frobnicate"], None, "no such option: --frobnicate"),
    (["-s", "-C"], None, "'-C' requires an argument"),
    (["-s", "extra"], None, "unexpected extra argument"),
])
def test_bad_options_are_refused_naming_the_option(argv, option, words):
    with pytest.raises(InputError) as caught:
        parse_args(argv)
    assert caught.value.obj == option
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)


def test_defaults_are_the_selftests():
    config = parse_args(["-s"])
    assert (config.family, config.port, config.chunk_size) == (socket.AF_INET6, 8787, 512 << 10)
    assert config.mapping_align == default_alignment()
    assert not (config.zerocopy or config.hash or config.mss or config.pacing_rate)


def test_options_reach_the_config():
    config = parse_args(["-4", "-H", "127.0.0.1", "-z", "-C", "1M", "-a", "4096", "-M", "4108",
                         "-x", "-P", "100M", "-n", "64M", "-p", "9000"])
    assert config == Config(server=False, host="127.0.0.1", port=9000, family=socket.AF_INET,
                            zerocopy=True, chunk_size=1 << 20, align=4096, mss=4108, hash=True,
                            pacing_rate=100 << 20, size=64 << 20)


def test_a_zerocopy_client_may_send_any_chunk_size():
    assert parse_args(["-H", "::1", "-z", "-C", "1000"]).chunk_size == 1000


@pytest.mark.parametrize("text, value", [("4096", 4096), ("512K", 512 << 10), ("2m", 2 << 20),
                                         ("1G", 1 << 30), ("3MiB", 3 << 20), ("1T", 1 << 40)])
def test_sizes(text, value):
    assert parse_size(text, "-C") == value


def test_huge_page_size_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nHugepagesize:       1048576 kB\n")
    assert huge_page_size(str(meminfo)) == 1 << 30
    meminfo.write_text("MemTotal:       24000000 kB\n")
    assert huge_page_size(str(meminfo)) is None
    assert huge_page_size(str(tmp_path / "absent")) is None


@pytest.mark.parametrize("host, family, switch", [("::1", socket.AF_INET, "-6"),
                                                  ("127.0.0.1", socket.AF_INET6, "-4")])
def test_an_address_of_the_other_family_names_the_switch(host, family, switch):
    with pytest.raises(InputError, match=f"{switch} switches the family") as caught:
        resolve(host, 8787, family)
    assert caught.value.obj == f"host {host!r}"


def test_report_is_the_selftests_line():
    report = Report(peer="[::1]:1", received=256 << 20, mapped=128 << 20, seconds=0.5,
                    user=0.25, sys=0.5, voluntary_switches=42, rcv_mss=4096)
    assert report.format() == (
        "received 256 MB (50 % mmap'ed) in 0.5 s, 4.29497 Gbit\n"
        "  cpu usage user:0.25 sys:0.5, 2929.69 usec per MB, 42 c-switches, rcv_mss 4096")


@pytest.mark.parametrize("argv, words", [
    (["-C", "abc", "-s"], "-C: not a size"),
    (["-s", "-z", "-a", "5"], "-a: alignment 5"),
    (["-x"], "-s/-H: say -s"),
])
@pytest.mark.parametrize("entry", [[str(TOOL)], ["-m", "bpfbatch", "tcp-mmap"]],
                         ids=["tool", "bpfbatch"])
def test_the_tool_prints_one_line_and_exits_non_zero(argv, words, entry):
    done = subprocess.run([sys.executable, *entry, *argv], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2  # a usage error, as for every command (the selftest says 1)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bpfbatch: error: ") and words in lines[0]
