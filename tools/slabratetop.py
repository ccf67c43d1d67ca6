#!/usr/bin/env python3
"""slabratetop, bcc-compatible: ``tools/slabratetop.py [-v] [options] [interval [count]]`` is
``bpfbatch [-v] top slab [options] [interval [count]]``."""

from bpfbatch.cli.top import run_as_tool

if __name__ == "__main__":
    run_as_tool("slab")
