"""Typed records: the layout tree built from BTF, as plain data (:mod:`.layout`), one module
per job over it (:mod:`.values`, :mod:`.encode`, :mod:`.fill`, :mod:`.template`), codecs that
decode and encode whole batches with them (:mod:`.codec`), JSON text (:mod:`.jsontext`),
output renderers (:mod:`.render`), input readers (:mod:`.read`, with the typed JSONL fast
path of :mod:`.typedjson`) and the one output pipeline every command uses (:mod:`.pipeline`).
A small batch is read without numpy (:class:`.columns.ByteRows`, :mod:`bpfbatch._numpy`).

Fed batches of bytes; never opens or touches a map itself (``map/`` sits below).
"""
