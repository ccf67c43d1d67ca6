"""bcc-style top tools over loss-free interval read-outs (:mod:`.intervals`): tcptop and
slabratetop, and the screen helpers they share. ``bpfbatch top`` and the thin executables in
the repository's ``tools/`` run them."""
