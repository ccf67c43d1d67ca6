"""bpfbatch: move data across the user/kernel boundary in batches.

BPF maps are read, drained, loaded and deleted with the kernel's batch commands through one
shared cursor (:mod:`bpfbatch.map.cursor`); tc rules are sent many netlink messages per
``sendmsg()`` (:mod:`bpfbatch.tc`). Errors are :class:`bpfbatch.errors.BpfBatchError`.
"""

__version__ = "0.1.0"
