"""Typed records: the layout tree built from BTF, as plain data (:mod:`.layout`), one module
per job over it (:mod:`.values`, :mod:`.encode`, :mod:`.fill`, :mod:`.template`), codecs that
decode and encode whole batches with them (:mod:`.codec`), JSON text (:mod:`.jsontext`),
output renderers (:mod:`.render`), input readers (:mod:`.read`) and the one output pipeline
every command uses (:mod:`.pipeline`).

Fed batches of bytes; never opens or touches a map itself (``map/`` sits below).
"""
