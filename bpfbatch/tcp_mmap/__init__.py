"""tcp_mmap: TCP receive zero-copy (mmap + ``TCP_ZEROCOPY_RECEIVE``) and its sender.

A Python counterpart of the kernel selftest ``tools/testing/selftests/net/tcp_mmap.c``: a
server that receives each connection in its own thread, either with plain recv() or by
mapping the payload pages into a huge-page-aligned window of its address space, and a client
that sends a given amount, optionally with ``MSG_ZEROCOPY``. Both print the selftest's report.
This family uses no BPF; it shares only :mod:`bpfbatch.errors` with the rest of the package.

    with Server(Config(server=True, host="::1", port=0, zerocopy=True, mss=4108)) as server:
        ...  # clients: send(Config(host="::1", port=server.address[1], zerocopy=True, mss=4108))
        reports = server.serve(connections=1)
"""

from .config import Config, default_alignment, parse_size
from .receiver import Report, receive
from .sender import SendReport, ZeroCopyCompletions, send
from .server import Server

__all__ = ["Config", "Report", "SendReport", "Server", "ZeroCopyCompletions",
           "default_alignment", "parse_size", "receive", "send"]
