#!/usr/bin/env python3
"""tcp_mmap: TCP receive zero-copy tool (server -s, client -H HOST); see ``--help``.

A thin executable over :mod:`bpfbatch.tcp_mmap`. Loopback example (two shells)::

    tools/tcp_mmap.py -s -z -M 4108 -x
    tools/tcp_mmap.py -H ::1 -z -M 4108 -x -n 1G
"""

import sys

from bpfbatch.tcp_mmap.cli import main

if __name__ == "__main__":
    sys.exit(main())
