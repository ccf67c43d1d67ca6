"""bcc-style tools built on the package's CO-RE objects: the logic behind ``bpfbatch top``
and the thin executables in the repository's ``tools/``."""
