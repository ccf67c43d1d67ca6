"""BPF maps: the raw open map and its per-element calls (:mod:`.handle`), the batch cursor
that reads and drains (:mod:`.cursor`), batch writes (:mod:`.writes`), whole-map policies —
clear, drain, load (:mod:`.whole`) — the drain iterator (:mod:`.draining`), the feature
probes they consult (:mod:`.probes`) and key rows matched by their bytes (:mod:`.keyjoin`). Imports point down to :mod:`.handle`, never back.

Works on bytes only; typed records are :mod:`bpfbatch.records`' job, and the public
:class:`bpfbatch.Map` that joins the two is :mod:`bpfbatch.api`.
"""
