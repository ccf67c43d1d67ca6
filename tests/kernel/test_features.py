"""Feature probes against the real kernel: a probe that cannot run is not an answer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bpfbatch.map import probes

NOBODY = 65534


def test_batch_api_answer_is_cached_from_the_command_itself():
    assert probes.batch_api() is True  # every kernel this suite runs on has it (5.6+)
    assert probes._batch_api is True


def test_batch_api_not_cached_when_the_probe_map_cannot_be_created():
    """As an unprivileged user map creation fails (EPERM): the probe says "yes" for now, so
    an EINVAL is reported rather than turned into a per-key walk, and remembers nothing."""
    script = ("import os; os.setgroups([]); os.setgid(%d); os.setuid(%d)\n"
              "from bpfbatch.map import probes\n"
              "from bpfbatch.map.handle import MapHandle\n"
              "try:\n"
              "    MapHandle.create(2, 4, 4, 1).close()\n"
              "    print('creatable')\n"
              "except Exception:\n"
              "    print(probes.batch_api(), probes._batch_api)\n") % (NOBODY, NOBODY)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=Path(probes.__file__).parents[2])
    assert done.returncode == 0, done.stderr
    if done.stdout.strip() == "creatable":
        pytest.skip("unprivileged BPF is enabled here: the probe map can be created")
    assert done.stdout.split() == ["True", "None"]
