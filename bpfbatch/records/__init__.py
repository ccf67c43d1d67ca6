"""Typed records: the layout tree built from BTF, as plain data (:mod:`.layout`), one module
per job over it (:mod:`.values`, :mod:`.encode`, :mod:`.fill`, :mod:`.typedfill`,
:mod:`.template`, :mod:`.unpacked`), codecs that decode and encode whole batches with them
(:mod:`.codec`), the JSON text of a batch (:mod:`.jsontext`), the display decoders and a map's
view (:mod:`.decoders`, :mod:`.decoding`), per-CPU sums (:mod:`.cpusum`) and types given for a
map without BTF (:mod:`.typespec`). A small batch is read without numpy
(:class:`.columns.ByteRows`, :mod:`bpfbatch._numpy`).

Fed batches of bytes; never opens or touches a map itself (``map/`` sits below), and knows
nothing of the output and input formats built on it (:mod:`bpfbatch.formats` sits above).
"""
