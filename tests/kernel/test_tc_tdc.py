"""The kernel's own tc-testing (tdc) cases as an external suite: every case this kernel can run
(``data/tdc/<dir>-<kind>.json``, one file per file of the kernel's
``tools/testing/selftests/tc-testing/tc-tests/``, ids kept) goes through ``tc -b`` and ``bpfbatch tc -b`` in fresh
network namespaces after the same setup, with and without ``-force``. Compared: exit status,
``tc -j`` state (counters, timestamps, reference counts and kernel-assigned ids left out: see
``tc_helpers._VOLATILE``) and stderr.

Outcomes: *same* (status, stdout, stderr and state equal) is the only one accepted; *refused*
(both fail with the same status and state, the words differ) and *differs* (anything else)
fail the test. ``python tests/kernel/test_tc_tdc.py [FILE.json ...]`` prints the tally (of the
named files' cases instead, for converted cases not in the suite).

Each case's ``cmdUnderTest`` became its batch lines ($DEV1/$DUMMY → vethA, shell loops
expanded), its setup tc commands. Left out: show/list commands (no batch effect), object-file
cases (they need the suite's action.o), cases needing qdiscs this kernel lacks (drr). Kinds this
kernel lacks (gact, flower, ...) stay in: both tools must refuse them alike."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from tc_helpers import side_by_side

DATA = Path(__file__).parent / "data" / "tdc"
CASES = [(path.stem.replace("-", "/", 1) + ".json", case)
         for path in sorted(DATA.glob("*.json"))
         for case in json.loads(path.read_text())["cases"]]


def outcome(tmp_path: Path, case: dict, mode: tuple[str, ...], extra: tuple[str, ...] = ()
            ) -> tuple[str, str]:
    """("same" | "refused" | "differs", what differs); ``extra``: options for bpfbatch only."""
    batch = tmp_path / f"tdc-{case['id']}.tc"
    batch.write_text("".join(line + "\n" for line in case["batch"]))
    setup = [shlex.split(line) for line in case["setup"]]  # bytecode '...' is one word
    theirs, their_state, ours, our_state = side_by_side(batch, mode, extra, setup=setup)
    if our_state != their_state:
        return "differs", f"state: tc {their_state} / ours {our_state}"
    if ours.returncode != theirs.returncode:
        return "differs", f"status: tc {theirs.returncode} / ours {ours.returncode}: {ours.stderr!r} vs {theirs.stderr!r}"
    if ours.stdout != theirs.stdout:
        return "differs", f"stdout: tc {theirs.stdout!r} / ours {ours.stdout!r}"
    if ours.stderr == theirs.stderr:
        return "same", ""
    if theirs.returncode:
        return "refused", f"tc: {theirs.stderr!r} / ours: {ours.stderr!r}"
    return "differs", f"stderr: tc {theirs.stderr!r} / ours {ours.stderr!r}"


@pytest.mark.parametrize("mode", [(), ("-force",)], ids=["stop", "force"])
@pytest.mark.parametrize("source,case", CASES, ids=[f"{s.split('/')[-1][:-5]}-{c['id']}" for s, c in CASES])
def test_tdc_case(tmp_path, source, case, mode):
    kind, detail = outcome(tmp_path, case, mode)
    assert kind == "same", detail


#: The cases with an ``actions`` command: --coalesce changes how those travel.
ACTION_CASES = [(source, case) for source, case in CASES
                if any(line.split()[0].startswith("act") for line in case["batch"] if line.split())]


@pytest.mark.parametrize("mode", [(), ("-force",)], ids=["stop", "force"])
@pytest.mark.parametrize("source,case", ACTION_CASES,
                         ids=[f"{s.split('/')[-1][:-5]}-{c['id']}" for s, c in ACTION_CASES])
def test_tdc_action_case_coalesced(tmp_path, source, case, mode):
    kind, detail = outcome(tmp_path, case, mode, ("--coalesce",))
    assert kind == "same", detail


if __name__ == "__main__":
    import tempfile

    # Candidate files (converted cases not yet in data/tdc/) may be named: their cases run instead.
    chosen = ([case for path in sys.argv[1:] for case in json.loads(Path(path).read_text())["cases"]]
              or [case for _source, case in CASES])
    for mode in ((), ("-force",)):
        tally: dict[str, list[str]] = {"same": [], "refused": [], "differs": []}
        with tempfile.TemporaryDirectory() as tmp:
            for case in chosen:
                kind, detail = outcome(Path(tmp), case, mode)
                tally[kind].append(case["id"])
                if kind != "same":
                    print(f"{case['id']} {kind}: {detail}", file=sys.stderr)
        print(" ".join(mode) or "stop", json.dumps({k: len(v) for k, v in tally.items()}))
