"""``bpfbatch tc apply`` and ``tc dump`` against the kernel, judged by iproute2's ``tc``.

* dump round-trips: its file, run by ``tc -b`` on a fresh device, gives the same dump and the
  same ``tc -j`` state (hash tables, links, handles, priorities, actions and indexes);
* random desired states A and B: apply A then B leaves what ``tc -b B`` leaves on a fresh
  device, and the second apply sends exactly as many lines as the difference has steps;
* applying the state a device has sends no message (strace) and leaves counters running."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpfbatch.tc.apply import dump_lines, plan_for, send_plan
from tc_helpers import captured_messages, released_state, run, tc_batch, veth_netns

QUERIES = (["qdisc", "show", "dev", "vethA"], ["class", "show", "dev", "vethA"],
           ["filter", "show", "dev", "vethA", "parent", "1:"],
           ["filter", "show", "dev", "vethA", "ingress"], ["actions", "list", "action", "mirred"])

RICH = """\
qdisc add dev vethA root handle 1: htb default 10
class add dev vethA parent 1: classid 1:1 htb rate 10mbit burst 15k
class add dev vethA parent 1:1 classid 1:10 htb rate 1mbit ceil 5mbit prio 1
class add dev vethA parent 1:1 classid 1:20 htb rate 3mbit quantum 3000
qdisc add dev vethA ingress
actions add action mirred egress redirect dev vethB index 7
filter add dev vethA parent 1: protocol ip prio 5 handle 2: u32 divisor 16
filter add dev vethA parent 1: protocol ip prio 5 u32 ht 800:: match ip dst 10.0.0.0/8 hashkey mask 0x000000ff at 16 link 2:
filter add dev vethA parent 1: protocol ip prio 5 handle 2:3:1 u32 ht 2:3: match ip dst 10.0.0.3/32 flowid 1:10 action mirred egress redirect dev vethB index 7
filter add dev vethA parent 1: protocol ip prio 5 handle 2:4:9 u32 ht 2:4: match ip dst 10.0.0.4/32 match ip protocol 6 0xff flowid 1:20
filter add dev vethA parent ffff: protocol ip prio 1 handle ::5 u32 match ip src 1.2.3.4/32 action mirred egress mirror dev vethB index 9
"""


def state(netns: str) -> dict:
    """:func:`released_state`, the class listing (plain text) in sorted order: the kernel lists
    classes in its hash order, which depends on the history of adds and deletes."""
    read = released_state(netns, *QUERIES)
    read["class show dev vethA"] = sorted(line.strip() for line in read["class show dev vethA"])
    return read


def _apply(netns: str, text: str):
    plan, _live = plan_for(text.splitlines(keepends=True), "state", netns, [])
    return plan, send_plan(plan, netns, force=False, source="state")


def test_dump_round_trips_through_tc(tmp_path):
    path = tmp_path / "rich.tc"
    path.write_text(RICH)
    with veth_netns() as first, veth_netns() as second:
        assert tc_batch(first, path).returncode == 0
        dumped = dump_lines(first, ["vethA"])
        again = tmp_path / "dump.tc"
        again.write_text("".join(line + "\n" for line in dumped))
        replayed = tc_batch(second, again)
        assert replayed.returncode == 0, replayed.stderr
        assert dump_lines(second, ["vethA"]) == dumped
        assert state(second) == state(first)
        plan, _ = plan_for(RICH.splitlines(keepends=True), "rich", second, [])
        assert plan.lines == []  # the file and its dump describe one state


def _bpfbatch(*argv: str) -> list[str]:
    return [sys.executable, "-c", "from bpfbatch.cli import main; main()", *argv]


def _sent(argv: list[str]) -> int:
    """Requests that change something (qdisc/class/filter/action new or delete) ``argv`` sent."""
    return sum(1 for m in captured_messages(argv)
               if int.from_bytes(m[4:6], "little") in (36, 37, 40, 41, 44, 45, 48, 49))


#: Ten frames out of vethA through its qdisc: unclassified, so htb's default class 1:10.
_FRAMES = """
import socket
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("vethA", 0))
for _ in range(10):
    s.send(b"\\xff" * 6 + b"\\x02" * 6 + b"\\x88\\xb5" + b"x" * 100)
"""


def _class_bytes(netns: str) -> int:
    out = run(["ip", "netns", "exec", netns, "tc", "-s", "class", "show", "dev", "vethA",
               "classid", "1:10"]).stdout
    return int(re.search(r"Sent (\d+) bytes", out).group(1))


def test_nothing_to_change_sends_nothing_and_counters_run_on(tmp_path):
    path = tmp_path / "rich.tc"
    path.write_text(RICH)
    with veth_netns() as ns:
        assert _sent(_bpfbatch("tc", "apply", str(path), "-n", ns)) == 11
        run(["ip", "netns", "exec", ns, sys.executable, "-c", _FRAMES])
        before = _class_bytes(ns)
        assert before > 0
        assert _sent(_bpfbatch("tc", "apply", str(path), "-n", ns)) == 0
        assert _class_bytes(ns) >= before  # not reset: the class was not touched
        changed = tmp_path / "changed.tc"
        changed.write_text(RICH.replace("rate 1mbit ceil 5mbit", "rate 2mbit ceil 5mbit"))
        assert _sent(_bpfbatch("tc", "apply", str(changed), "-n", ns)) == 1
        assert _class_bytes(ns) >= before  # changed in place


def test_a_failing_line_stops_and_says_what_was_applied(tmp_path):
    path = tmp_path / "bad.tc"
    path.write_text("qdisc add dev vethA root handle 1: htb\n"
                    "class add dev vethA parent 1: classid 1:1 htb rate 1mbit\n"
                    "class add dev vethA parent 5: classid 5:2 htb rate 1mbit\n"
                    "class add dev vethA parent 1: classid 1:3 htb rate 1mbit\n")
    with veth_netns() as ns:
        proc = subprocess.run(_bpfbatch("tc", "apply", str(path), "-n", ns), capture_output=True,
                              text=True, check=False)
        assert proc.returncode == 1
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("bpfbatch: error: ") \
            and "2 applied, up to line 3" in lines[0], proc.stderr
        assert "1:3" not in run(["ip", "netns", "exec", ns, "tc", "class", "show", "dev",
                                 "vethA"]).stdout
        forced = subprocess.run(_bpfbatch("tc", "apply", str(path), "-n", ns, "--force"),
                                capture_output=True, text=True, check=False)
        assert forced.returncode == 1
        assert "1:3" in run(["ip", "netns", "exec", ns, "tc", "class", "show", "dev",
                             "vethA"]).stdout



#: Lines tc refuses, each as line 3 of an otherwise good desired state.
_REFUSED = ("class add dev vethA parent 1: classid 1:2 htb rate fast",
            "filter add dev vethA parent 1: protocol ip prio 1 u32 match ip dst 10.0.0.1/33 "
            "flowid 1:1",
            "class del dev vethA classid 1:10")


def test_a_line_tc_refuses_sends_nothing(tmp_path):
    """A FILE with a line tc would refuse: one line naming FILE:LINE, exit 1, and no message
    at all — not even the deletes the rest of the file would have planned."""
    rich = tmp_path / "rich.tc"
    rich.write_text(RICH)
    with veth_netns() as ns:
        assert tc_batch(ns, rich).returncode == 0
        before = state(ns)
        for refused in _REFUSED:
            path = tmp_path / "refused.tc"
            path.write_text("qdisc add dev vethA root handle 1: htb\n"
                            "class add dev vethA parent 1: classid 1:1 htb rate 1mbit\n"
                            f"{refused}\n")
            argv = _bpfbatch("tc", "apply", str(path), "-n", ns)
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            assert proc.returncode == 1
            [line] = proc.stderr.splitlines()
            assert line.startswith(f"bpfbatch: error: {path}:3: "), line
            assert _sent(argv) == 0
        assert state(ns) == before

# --- property: apply A then B == tc -b B on a fresh device ---------------------------------------

CLASSES = range(1, 6)
FILTERS = range(1, 6)


@st.composite
def states(draw):
    rates = draw(st.dictionaries(st.sampled_from(CLASSES), st.sampled_from((1, 2, 3)),
                                 min_size=1))
    # (rate, parent minor): under the qdisc (0) or, for others than 1:1, under 1:1
    classes = {c: (r, draw(st.sampled_from((0, 1))) if c != 1 and 1 in rates else 0)
               for c, r in rates.items()}
    filters = draw(st.dictionaries(st.sampled_from(FILTERS), st.tuples(
        st.sampled_from((8, 16)), st.sampled_from(sorted(classes)),
        st.sampled_from((None, 0, 1)))))
    actions = draw(st.dictionaries(st.sampled_from((1, 2, 3)), st.sampled_from(("mirror", "redirect"))))
    return {"default": draw(st.sampled_from((1, 2))), "classes": classes, "filters": filters,
            "actions": actions}


def batch(state) -> str:
    lines = [f"qdisc add dev vethA root handle 1: htb default {state['default']}"]
    lines += [f"class add dev vethA parent 1:{parent or ''} classid 1:{c} htb rate {r}mbit"
              for c, (r, parent) in sorted(state["classes"].items())]
    lines += [f"actions add action mirred egress {mode} dev vethB index {i}"
              for i, mode in sorted(state["actions"].items())]
    for n, (prefix, c, act) in sorted(state["filters"].items()):
        line = (f"filter add dev vethA parent 1: protocol ip prio 1 handle ::{n} u32 "
                f"match ip dst 10.{n}.0.0/{prefix} flowid 1:{c}")
        if act is not None:  # each form of a filter's action has its own index
            line += f" action mirred egress redirect dev vethB index {100 + 2 * n + act}"
        lines.append(line)
    return "".join(line + "\n" for line in lines)


def steps(a, b) -> int:
    """Lines the difference takes (plan's rules: one per object added, deleted or changed; a
    u32 instance that goes whole, one; a class that moves to another parent, two; a filter
    whose match changes or that points to a class deleted (or moved) in between, two: deleted first, added last; an htb qdisc that changes, deleted and added with all
    its classes and filters)."""
    if a["default"] != b["default"]:  # htb cannot change: the qdisc goes, and all in it
        return 2 + len(b["classes"]) + len(b["filters"]) + sum(
            1 for k in a["actions"].keys() | b["actions"].keys()
            if a["actions"].get(k) != b["actions"].get(k))
    count = sum(1 for k in a["actions"].keys() | b["actions"].keys()
                if a["actions"].get(k) != b["actions"].get(k))
    moved = {c for c in a["classes"].keys() & b["classes"].keys()
             if a["classes"][c][1] != b["classes"][c][1]}
    for c in a["classes"].keys() | b["classes"].keys():
        old, new = a["classes"].get(c), b["classes"].get(c)
        count += 2 if c in moved else int(old != new)
    if a["filters"] and not b["filters"]:
        return count + 1
    for n in a["filters"].keys() | b["filters"].keys():
        old, new = a["filters"].get(n), b["filters"].get(n)
        if old and new and (old[0] != new[0] or old[1] not in b["classes"] or old[1] in moved):
            count += 2
        elif old != new:
            count += 1
    return count


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(states(), states())
def test_apply_a_then_b_is_b(tmp_path_factory, a, b):
    path = tmp_path_factory.mktemp("prop") / "b.tc"
    path.write_text(batch(b))
    with veth_netns() as applied, veth_netns() as fresh:
        _apply(applied, batch(a))
        plan, report = _apply(applied, batch(b))
        assert report.ok and report.commands == len(plan.lines) == steps(a, b), plan.lines
        assert tc_batch(fresh, path).returncode == 0
        assert state(applied) == state(fresh)
        again, report = _apply(applied, batch(b))
        assert again.lines == [] and report.commands == 0


def test_a_signal_says_what_was_applied(tmp_path):
    """SIGTERM while an apply sends: one line naming how many lines were applied, and the
    kernel holds exactly those (the qdisc, then that many classes less one)."""
    path = tmp_path / "many.tc"
    path.write_text("qdisc add dev vethA root handle 1: htb\n" + "".join(
        f"class add dev vethA parent 1: classid 1:{i:x} htb rate {i}kbit\n"
        for i in range(1, 4001)))
    with veth_netns() as ns:
        proc = subprocess.Popen(_bpfbatch("tc", "apply", str(path), "-n", ns),
                                stderr=subprocess.PIPE, text=True)
        while not run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "vethA"]
                      ).stdout.startswith("qdisc htb"):
            assert proc.poll() is None
        proc.terminate()
        _, err = proc.communicate()
        classes = run(["ip", "netns", "exec", ns, "tc", "class", "show", "dev", "vethA"]
                      ).stdout.count("class htb")
        if proc.returncode == 0:  # done before the signal: all of it
            assert classes == 4000
            return
        assert proc.returncode == 143, err
        [line] = err.splitlines()
        said = re.fullmatch(r"bpfbatch: .*many\.tc.*: interrupted \(SIGTERM\) after (\d+) "
                            r"commands; (\d+) applied, up to line \d+.*", line)
        assert said, line
        assert classes == int(said.group(2)) - 1


# --- a signal between deletes and adds -----------------------------------------------------------

#: Classes the device holds (1:1000...) and classes the desired state wants instead (1:3000...):
#: the plan deletes every old one, then adds every new one.
_OLD, _NEW = 0x1000, 0x3000
_SWAPPED = 500


def _classes(first: int, count: int = _SWAPPED) -> str:
    return "".join(f"class add dev vethA parent 1: classid 1:{first + i:x} htb rate {i + 1}kbit\n"
                   for i in range(count))


def _class_counts(netns: str) -> tuple[int, int]:
    """(old classes, new classes) the kernel holds, by one netlink dump."""
    from bpfbatch.tc import specs as S
    from bpfbatch.tc.state import GETTCLASS, Dumper

    with Dumper(netns) as dumper:
        index = next(i for i, name in dumper.names.items() if name == "vethA")
        [bodies] = dumper.dump([(GETTCLASS, S.TCMSG.pack(0, index, 0, 0, 0))])
    minors = [S.TCMSG.unpack_from(body, 0)[2] & 0xFFFF for body in bodies]
    return (sum(_OLD <= m < _OLD + _SWAPPED for m in minors),
            sum(_NEW <= m < _NEW + _SWAPPED for m in minors))


def _wait_until(netns: str, proc: subprocess.Popen, moment: str) -> None:
    """Until ``moment``: at once; ``deleting`` (some old classes gone); ``adding`` (some new
    class there); or a number of seconds. A moment missed (the apply got past it) is fine:
    the promise holds at every moment."""
    if moment == "at once":
        return
    if moment[0].isdigit():
        time.sleep(float(moment))
        return
    while proc.poll() is None:
        old, new = _class_counts(netns)
        if moment == "deleting" and old < _SWAPPED or moment == "adding" and new:
            return


@pytest.mark.parametrize("moment", ["at once", "0.3", "deleting", "adding", "1.0"])
def test_a_signal_between_deletes_and_adds_says_what_the_kernel_holds(tmp_path, moment):
    """SIGTERM at a moment of an apply that deletes 500 classes then adds 500: exit 143 and
    one line whose "N applied" is exactly the plan's first N lines in the kernel (min(N,
    500) old classes gone, the rest of N new ones there); exit 0 and the whole state; or,
    before the interpreter reached the command, death by the signal and nothing sent."""
    old, new = tmp_path / "old.tc", tmp_path / "new.tc"
    head = "qdisc add dev vethA root handle 1: htb\n"
    old.write_text(head + _classes(_OLD))
    new.write_text(head + _classes(_NEW))
    with veth_netns() as ns:
        assert tc_batch(ns, old).returncode == 0
        proc = subprocess.Popen(_bpfbatch("tc", "apply", str(new), "-n", ns),
                                stderr=subprocess.PIPE, text=True)
        _wait_until(ns, proc, moment)
        proc.terminate()
        _, err = proc.communicate()
        kept, added = _class_counts(ns)
        if proc.returncode == -signal.SIGTERM:  # still starting Python: no handler yet
            assert (kept, added) == (_SWAPPED, 0)
            return
        if proc.returncode == 0:  # done before the signal: all of it
            assert (kept, added) == (0, _SWAPPED)
            return
        assert proc.returncode == 143, err
        [line] = err.splitlines()
        # before the command began (the CLI still starting) the line names no file: nothing
        said = re.fullmatch(r"bpfbatch: interrupted \(SIGTERM\)|bpfbatch: .*new\.tc.*: "
                            r"interrupted \(SIGTERM\) (?:after (\d+) commands; (\d+) applied, "
                            r"up to line \d+.*|before any line was sent)", line)
        assert said, line
        applied = int(said.group(2) or 0)
        assert (kept, added) == (_SWAPPED - min(applied, _SWAPPED),
                                 max(0, applied - _SWAPPED)), line


# --- another process changing the device during an apply ----------------------------------------


#: Classes on either side of the apply another process meddles with.
_MEDDLED = 200


def test_a_device_changed_during_an_apply_converges_on_the_next(tmp_path):
    """The promise when another process changes the device while an apply runs: the apply
    plans from one dump, so it either ends (exit 0) or stops at the first line the change
    made fail (EEXIST, ENOENT: exit 1, one line saying what was applied) — never a traceback,
    never a second line; and the next apply, once the other process is done, leaves exactly
    what ``tc -b FILE`` leaves on a fresh device. Here the other process adds classes the
    file wants (other rates) and classes it does not, then deletes them, over and over."""
    old, new = tmp_path / "old.tc", tmp_path / "new.tc"
    head = "qdisc add dev vethA root handle 1: htb\n"
    old.write_text(head + _classes(_OLD, _MEDDLED))
    new.write_text(head + _classes(_NEW, _MEDDLED))
    meddled = [c for c in range(_NEW, _NEW + _MEDDLED, 10)] + list(range(0x6000, 0x6014))
    adds, deletes = tmp_path / "meddle-add.tc", tmp_path / "meddle-del.tc"
    adds.write_text("".join(f"class add dev vethA parent 1: classid 1:{c:x} htb rate 7kbit\n"
                            for c in meddled))
    deletes.write_text("".join(f"class del dev vethA classid 1:{c:x}\n" for c in meddled))
    with veth_netns() as ns, veth_netns() as fresh:
        assert tc_batch(ns, old).returncode == 0
        assert tc_batch(fresh, new).returncode == 0
        proc = subprocess.Popen(_bpfbatch("tc", "apply", str(new), "-n", ns),
                                stderr=subprocess.PIPE, text=True)
        while proc.poll() is None:
            tc_batch(ns, adds, "-force")
            tc_batch(ns, deletes, "-force")
        _, err = proc.communicate()
        [line] = err.splitlines()
        if proc.returncode:
            assert proc.returncode == 1 and re.fullmatch(
                r"bpfbatch: error: .*new\.tc: apply: .* applied.*\((EEXIST|ENOENT)\)", line), line
        else:
            assert line.endswith("objects unchanged"), line
        tc_batch(ns, adds, "-force")  # once more, now that nothing else runs
        settled = subprocess.run(_bpfbatch("tc", "apply", str(new), "-n", ns),
                                 capture_output=True, text=True, check=False)
        assert settled.returncode == 0, settled.stderr
        assert state(ns) == state(fresh)
