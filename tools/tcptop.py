#!/usr/bin/env python3
"""tcptop, bcc-compatible: ``tools/tcptop.py [-v] [options] [interval [count]]`` is
``bpfbatch [-v] top tcp [options] [interval [count]]``."""

from bpfbatch.cli.top import run_as_tool

if __name__ == "__main__":
    run_as_tool("tcp")
