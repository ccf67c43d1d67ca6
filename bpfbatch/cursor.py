"""The shared batch cursor (work in progress: Batch is the stable interface)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Batch:
    """``count`` elements handed out by one batch call: zero-copy views into the cursor's
    reused buffers, valid until the cursor's next step (copy what you keep).

    ``keys`` holds ``count × key_size`` bytes, ``values`` ``count × value_stride`` bytes
    (see :attr:`bpfbatch.maps.MapInfo.value_stride`; per-CPU values hold every possible CPU).
    """

    count: int
    keys: memoryview
    values: memoryview
