#!/usr/bin/env python3
"""tcp_mmap, the kernel selftest's letters: ``tools/tcp_mmap.py ARGS`` is ``bpfbatch tcp-mmap
ARGS`` (server -s, client -H HOST; see ``--help``). Loopback example (two shells)::

    tools/tcp_mmap.py -s -z -M 4108 -x
    tools/tcp_mmap.py -H ::1 -z -M 4108 -x -n 1G
"""

import sys

from bpfbatch.cli import main

if __name__ == "__main__":
    main(["tcp-mmap", *sys.argv[1:]])
