"""Many lines of one kind in a single batch (``data/tc_batches/<kind>.txt``, ``#`` comments),
run by ``tc -force -b`` and ``bpfbatch tc -force -b`` side by side: one run answers for every
line, where a probe costs a run a line. Each file holds lines tc goes on after (sent, refused
by the kernel, or refused by tc's parser without exiting) and ends with one tc exits on.
Stdout, stderr (tc's notes, its errors and the kernel's, in line order), exit status and
``tc -j`` state must be equal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tc_helpers import side_by_side

BATCHES = sorted((Path(__file__).parent / "data" / "tc_batches").glob("*.txt"))


@pytest.mark.parametrize("path", BATCHES, ids=[path.stem for path in BATCHES])
def test_kind_lines_answer_as_tc(tmp_path, path):
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    batch = tmp_path / f"{path.stem}.tc"
    batch.write_text("".join(f"{line}\n" for line in lines))
    theirs, their_state, ours, our_state = side_by_side(batch, ("-force",))
    # the file is what it says: tc went through every line, failing each (the kernel lacks
    # these kinds), and exited on the last
    assert theirs.returncode == 255
    assert theirs.stderr.count("Command failed ") == len(lines) - 1, theirs.stderr
    assert (ours.returncode, ours.stdout, ours.stderr) == \
        (theirs.returncode, theirs.stdout, theirs.stderr)
    assert our_state == their_state
