"""The drain journal: what the exporter drained and has not yet delivered, outside its memory.

A drain-mode scrape takes entries out of the kernel, and they are delivered only once the
response holding them is (:mod:`.server`). In between they live in the exporter's memory,
which SIGKILL (or a crash) would take with them. So each batch is appended here, in the same
critical section as its ``LOOKUP_AND_DELETE``, before it counts as taken; the journal is
emptied when the scrape is settled (delivered, or put back into the map). An exporter that
starts and finds entries here — its predecessor was killed between a drain and its answer —
puts them back into their maps before it listens. What SIGKILL can lose is then the one
batch between its delete and its append, so ``batch_size`` bounds it, as for ``drain``.

A page-cache write survives the death of the process (it is the kernel's once ``write``
returns), and the maps it protects do not survive a reboot, so the default place is on
``/run`` and nothing is fsynced. Format: records of a 4-byte little-endian header length,
a JSON header ``{"map": {...}, "key_size": K, "value_stride": V, "count": N}``, then
``N × K`` key bytes and ``N × V`` value bytes. A record torn by SIGKILL during its write is
the batch in hand: it is dropped, and said.
"""

from __future__ import annotations

import dataclasses
import errno as E
import fcntl
import hashlib
import json
import os
import struct

from ..errors import BpfBatchError
from ..map.cursor import Batch
from .config import MapRef

#: Where a configuration's journal is when the file does not say (``journal = PATH``).
DEFAULT_DIR = "/run/bpfbatch"
_LEN = struct.Struct("<I")


def default_path(config_path: str) -> str:
    """One journal per configuration file: named after its real path."""
    digest = hashlib.sha1(os.path.realpath(config_path).encode()).hexdigest()[:16]
    return os.path.join(DEFAULT_DIR, f"export-{digest}.journal")


@dataclasses.dataclass
class Record:
    """One journaled batch of ``ref``'s map."""

    ref: MapRef
    key_size: int
    value_stride: int
    batch: Batch


class Journal:
    """An append-only file of drained batches, locked by one exporter while it runs."""

    def __init__(self, path: str):
        self.path = path
        try:
            os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise BpfBatchError(f"cannot open the drain journal: {exc.strerror}", obj=path,
                                errno=exc.errno) from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self.fd)
            raise BpfBatchError("the drain journal is in use by another exporter of this "
                                "configuration", obj=path, errno=exc.errno) from None

    def append(self, ref: MapRef, key_size: int, value_stride: int, batch: Batch) -> None:
        """Journal one drained batch; an ``OSError`` (a full ``/run``) means it is not."""
        header = json.dumps({"map": dataclasses.asdict(ref), "key_size": key_size,
                             "value_stride": value_stride, "count": batch.count}).encode()
        data = b"".join((_LEN.pack(len(header)), header, batch.keys, batch.values))
        written = os.write(self.fd, data)
        while written < len(data):  # a regular file writes short only when it fills up
            step = os.write(self.fd, data[written:])
            if not step:
                raise OSError(E.ENOSPC, os.strerror(E.ENOSPC))
            written += step

    def clear(self) -> None:
        """Every journaled batch is settled (delivered or put back)."""
        os.ftruncate(self.fd, 0)

    def records(self) -> tuple[list[Record], bool]:
        """The journaled batches, and whether the last was torn (and so left out)."""
        size = os.fstat(self.fd).st_size
        data = os.pread(self.fd, size, 0) if size else b""
        out, at = [], 0
        while at < len(data):
            try:
                (length,) = _LEN.unpack_from(data, at)
                head = json.loads(data[at + 4:at + 4 + length])
                ks, vs, n = head["key_size"], head["value_stride"], head["count"]
                start = at + 4 + length
                end = start + n * (ks + vs)
                if end > len(data):
                    return out, True
            except (struct.error, ValueError, KeyError, TypeError):
                return out, True
            out.append(Record(MapRef(**head["map"]), ks, vs,
                              Batch(n, data[start:start + n * ks], data[start + n * ks:end])))
            at = end
        return out, False

    def close(self) -> None:
        os.close(self.fd)
