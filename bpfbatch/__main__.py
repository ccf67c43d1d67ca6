"""``python -m bpfbatch``: the same as the ``bpfbatch`` command."""

from .cli import main

main()
