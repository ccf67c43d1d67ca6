"""The only native boundary: the kernel's ABI as ctypes structures (:mod:`.abi`) and the
prototypes of the system's libbpf.so.1 (:mod:`.libbpf`). Nothing here knows about maps as
objects; everything above calls through these two modules."""
