"""BPF maps: the open map and its per-element calls (:mod:`.handle`), the batch cursor that
reads and drains (:mod:`.cursor`), batch writes (:mod:`.writes`), whole-map policies — clear,
drain, load (:mod:`.whole`) — and the feature probes they consult (:mod:`.probes`).

Works on bytes only; typed records are :mod:`bpfbatch.records`' job.
"""
