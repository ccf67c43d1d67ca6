"""The HTTP side of the exporter: one scrape per ``GET /metrics``, and whether its response was
delivered.

**Delivered**, for a response that carries drained entries, means: the whole response was
accepted by the kernel for the socket, *and then the client closed the connection in order*
(a FIN) within the scrape budget. The response says ``Connection: close``, so every HTTP
client (Prometheus, curl, urllib) closes once it has read the body. A client that closes
before it has read all of it makes its kernel answer with a reset (Linux resets a
connection closed with unread data), which the server sees as ``ECONNRESET`` or ``EPIPE``;
a client that neither closes nor resets within the budget did not show it read the body.
Either way the response is not delivered and the entries go back into their maps. Bytes the
socket accepted are not enough: a response of a few MiB fits whole in the two kernels'
buffers while the client may still go away without reading it. A response that carries no
drained entry (a read-only scrape) is written and closed without waiting.

The rendering is prometheus-client's (the text format, or OpenMetrics when asked; gzip when
accepted). Scrapes are serialised on the exporter's lock, held from the scrape until it is
settled; once the exporter is stopping, a request is answered 503 without a scrape.
"""

from __future__ import annotations

import errno
import gzip
import socket
import socketserver
from http.server import BaseHTTPRequestHandler

from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric

#: Where the metrics are served.
PATH = "/metrics"


class MetricsServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """Serves ``exporter`` (a :class:`~bpfbatch.export.server.Exporter`) on ``address``."""

    daemon_threads = True  # an idle connection must not hold up the exit: scrapes use the lock
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], exporter):
        self.exporter = exporter
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def handle_error(self, request, client_address) -> None:
        """A client gone while a 404 or 503 was written: nothing to report. (A scrape's
        own failures are settled and logged by the exporter.)"""


class _Families:
    """What an encoder collects: the families of a scrape already run."""

    def __init__(self, families: list):
        self.families = families

    def collect(self):
        return self.families


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: MetricsServer

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.exporter.config.budget_s)  # a silent client

    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's name
        pass  # one line per scrape would be noise; failures are logged by the exporter

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        exporter = self.server.exporter
        if self.path.split("?", 1)[0] != PATH:
            self._send(404, "text/plain; charset=utf-8", f"serving {PATH} only\n".encode())
            return
        with exporter.lock:
            if exporter.stopping.is_set():
                self._send(503, "text/plain; charset=utf-8", b"the exporter is stopping\n")
                return
            delivered, why = False, "the scrape failed"
            try:
                self._respond(list(exporter.collect()), confirm=exporter.taken() > 0)
                delivered = True
            except OSError as exc:
                why = _why(exc)
            finally:
                exporter.settle(delivered, why)

    def _respond(self, families: list, *, confirm: bool) -> None:
        """Write the response; with ``confirm``, return only once the client closed the
        connection after reading it, and raise ``OSError`` otherwise."""
        body, content_type = exposition(families, self.headers.get("Accept", ""))
        gzipped = gzip_accepted(self.headers.get("Accept-Encoding", ""))
        if gzipped:
            body = gzip.compress(body)
        self._send(200, content_type, body, gzipped=gzipped)
        if confirm:
            sock = self.connection
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):  # a request it sent after this one: read past it
                pass

    def _send(self, status: int, content_type: str, body: bytes, *, gzipped: bool = False):
        self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)  # unbuffered: sendall, every byte or an OSError


def exposition(families: list, accept: str) -> tuple[bytes, str]:
    """A scrape's ``families`` as the body and content type a client's ``Accept`` asks for:
    prometheus-client's text format, or OpenMetrics. There a histogram has a ``_count`` only
    with its ``_sum`` (if and only if a Sum is present, the spec has the ``+Inf`` bucket's
    value appear as ``_count`` too; prometheus-client's own parser refuses one without the
    other), so a slot histogram, which knows no sum, gives its count as ``+Inf`` alone."""
    encoder, content_type = choose_encoder(accept)
    if content_type.startswith("application/openmetrics-text"):
        families = [_count_only_with_sum(fam) for fam in families]
    return encoder(_Families(families)), content_type


def _count_only_with_sum(fam: Metric) -> Metric:
    """``fam`` without its ``_count`` samples when it is a histogram without ``_sum``."""
    names = {sample.name for sample in fam.samples}
    if fam.type != "histogram" or f"{fam.name}_sum" in names:
        return fam
    kept = Metric(fam.name, fam.documentation, fam.type, fam.unit)
    kept.samples = [sample for sample in fam.samples if sample.name != f"{fam.name}_count"]
    return kept


def _why(exc: OSError) -> str:
    """Why a response was not delivered. (A reset that came once the body was all in the
    socket makes the shutdown fail with ENOTCONN.)"""
    if isinstance(exc, TimeoutError):
        return "the client did not close the connection within the scrape budget"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)) or exc.errno == errno.ENOTCONN:
        return "the client closed the connection before reading the whole response"
    return exc.strerror or str(exc)
