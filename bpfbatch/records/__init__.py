"""Typed records: the layout tree built from BTF (:mod:`.layout`), codecs that decode and
encode whole batches (:mod:`.codec`), JSON text (:mod:`.jsontext`), output renderers
(:mod:`.render`), input readers (:mod:`.read`) and the one output pipeline every command uses
(:mod:`.pipeline`).

Fed batches of bytes; never opens or touches a map itself (``map/`` sits below).
"""
