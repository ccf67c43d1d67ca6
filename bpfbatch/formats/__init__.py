"""Output and input formats over the typed records of :mod:`bpfbatch.records`: renderers
(:mod:`.render`, the table of :mod:`.table`, Arrow and Parquet in :mod:`.columnar`), readers
(:mod:`.read`, with the typed JSONL fast path of :mod:`.typedjson`, read in two halves at
once by :mod:`.halves`), the one output pipeline every command uses (:mod:`.pipeline`, writing
through :mod:`.writer`) and maps of maps dumped recursively (:mod:`.nested`).

Imports point one way: formats/ builds on records/ (and map/ below it); records/ never
imports formats/.
"""
