"""One reader per event map, claimed with a lock that dies with its process.

The kernel keeps one consumer position per ring buffer and does not arbitrate between two
processes that both write it: two readers take the same records, each moves the position as
its own commits go, and each commit can give back space the other has not written yet (or
hold back space it already has) — records repeated, and a ring that stalls full while both
run. A perf event array has one slot per CPU: a second reader's rings replace the first's,
which then silently receives nothing. So a reader claims the map before it touches it, with
an exclusive ``flock`` on ``/run/bpfbatch/events-<map id>.lock`` holding the claimant's pid:
a second reader (in any process, or a second stream in the same one) is refused with a line
naming the map and that pid, ``EBUSY``. The lock is released when the stream closes or its
process dies, SIGKILL included, so a crashed reader never blocks the next.

Map ids are unique while the map exists, and a map stays alive while its reader holds it
open, so a lock never outlives the map it names while held. Readers that are not bpfbatch
(libbpf's ``ring_buffer``, bcc) do not take the lock: they are not seen.
"""

from __future__ import annotations

import errno
import fcntl
import os

from ..errors import BpfBatchError

#: Where the claims live (a tmpfs: nothing survives a reboot, as no map does).
RUN_DIR = "/run/bpfbatch"


class Claim:
    """The held claim on map ``info`` (see the module); :meth:`release` gives it up."""

    def __init__(self, info):
        self.path = os.path.join(RUN_DIR, f"events-{info.id}.lock")
        while True:
            try:
                os.makedirs(RUN_DIR, mode=0o755, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise BpfBatchError(f"cannot claim the map's reader lock {self.path}: "
                                    f"{exc.strerror}", obj=info.label, errno=exc.errno) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise BpfBatchError(
                    f"is being read by another reader (pid {holder}): the kernel keeps one "
                    "consumer position per ring, so two readers would take the same events",
                    obj=info.label, errno=errno.EBUSY) from None
            if _same_file(fd, self.path):  # not a file a releasing holder just unlinked
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Unlink the lock file, then drop the lock (a waiting claimant that opened the old
        file sees it unlinked and opens a new one). Safe to call twice."""
        if self._fd is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None


def _same_file(fd: int, path: str) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)
