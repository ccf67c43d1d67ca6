"""Demos and fixtures that build real kernel objects to show or measure something: the
built-in demo (:mod:`.demo`), a tc flow table in throwaway namespaces (:mod:`.flowtable`), the
2019 batch-ops cover-letter table (:mod:`.covertable`) and loopback traffic (:mod:`.loopback`).
Nothing in the core imports them."""
