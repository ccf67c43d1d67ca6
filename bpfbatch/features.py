"""Feature probes: each does the real operation once and caches the answer.

Tests skip on a probe's result, never on a guess about the kernel version; the cursor asks
:func:`batch_api` before treating an ``EINVAL`` from a batch command as "pre-5.6 kernel".
"""

from __future__ import annotations

import ctypes
import functools

from ._abi import MapType
from ._libbpf import lib
from .errors import BpfBatchError


@functools.cache
def batch_api() -> bool:
    """Whether the kernel knows the batch commands at all (5.6+).

    Like cilium/ebpf's ``haveBatchAPI``: ``BPF_MAP_UPDATE_BATCH`` of two entries into a
    two-entry hash map.
    """
    from .maps import Map

    try:
        with Map.create(MapType.HASH, 4, 4, 2, name="bpfbatch_probe") as probe:
            keys = (ctypes.c_uint32 * 2)(1, 2)
            values = (ctypes.c_uint32 * 2)(3, 4)
            count = ctypes.c_uint32(2)
            ret = lib.bpf_map_update_batch(probe.fd, keys, values, ctypes.byref(count), None)
    except BpfBatchError:
        return False
    return ret == 0 and count.value == 2
