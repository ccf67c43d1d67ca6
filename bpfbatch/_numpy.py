"""``np``: numpy, imported the first time one of its names is used.

The records and map modules use numpy for every large batch, but a quick command on a
small map (``bpfbatch dump`` of 16 entries, ``bpfbatch clear``) goes without it
(:class:`~bpfbatch.records.columns.ByteRows`) and should not pay the 30–80 ms its import
costs; importing a module that may need it must not import it. ``from .._numpy import np`` keeps the modules' ``np.frombuffer(...)`` spelling while
deferring the import to the first such call.
"""

from __future__ import annotations

import importlib


class _Numpy:
    __slots__ = ()

    def __getattr__(self, name: str):
        return getattr(importlib.import_module("numpy"), name)

    def __repr__(self) -> str:
        return "<numpy, imported on first use>"


np = _Numpy()
