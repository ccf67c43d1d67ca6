"""The listening end: one receiving thread per accepted connection, as in the selftest.

Threads rather than processes on purpose: the point of ``-a`` is how receivers that share one
address space (one mm, one set of page tables) contend when they map pages concurrently.
The receive loops spend their time in syscalls made through ctypes or the socket module, which
release the GIL, so the threads do run in parallel in the kernel.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from ..errors import BpfBatchError, from_errno
from .config import Config
from .receiver import Report, receive
from .sockets import describe, resolve, tcp_socket

Result = Report | BpfBatchError


class Server:
    """A bound, listening TCP socket configured for ``config``; :meth:`serve` receives.

    Binding happens in the constructor so that errors (address in use, bad MSS) surface before
    anything is served, and so that port 0 can be resolved through :attr:`address`.
    """

    def __init__(self, config: Config):
        self.config = config
        #: Connections the last :meth:`serve` accepted; it returns one result for each.
        self.accepted = 0
        self._stopping = threading.Event()
        address = resolve(config.host, config.port, config.family)
        self._listener = tcp_socket(config)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                self._listener.bind(address)
                self._listener.listen(128)
            except OSError as exc:
                raise from_errno("bind and listen", exc.errno, obj=describe(address)) from None
        except BaseException:
            self._listener.close()
            raise

    @property
    def address(self) -> tuple:
        """The bound socket address (the real port when 0 was asked for)."""
        return self._listener.getsockname()

    def serve(self, connections: int | None = None,
              on_result: Callable[[Result], None] | None = None) -> list[Result]:
        """Accept ``connections`` connections (None: until interrupted), each received in its
        own thread; wait for all of them and return their reports or errors in completion order,
        one per accepted connection (any exception a receiver raises becomes a
        :class:`~bpfbatch.errors.BpfBatchError` naming its peer). :meth:`stop` (from another
        thread) ends the accepting early.

        ``on_result`` is called (serialised) from each thread as it finishes, e.g. to print.
        """
        results: list[Result] = []
        lock = threading.Lock()

        def run(conn: socket.socket, peer: str) -> None:
            try:
                result: Result = receive(conn, self.config, peer)
            except BpfBatchError as exc:
                result = exc
            except Exception as exc:  # noqa: BLE001 - a thread's failure must become a result
                result = _unexpected(exc, peer)
            finally:
                conn.close()
            with lock:
                results.append(result)
                if on_result is not None:
                    on_result(result)

        threads: list[threading.Thread] = []
        accepted = self.accepted = 0
        while connections is None or accepted < connections:
            try:
                conn, peer_address = self._listener.accept()
            except OSError as exc:
                if self._stopping.is_set():
                    break
                raise from_errno("accept", exc.errno, obj=describe(self.address)) from None
            accepted += 1
            self.accepted = accepted
            peer = describe(peer_address)
            thread = threading.Thread(target=run, args=(conn, peer), daemon=True,
                                      name=f"tcp_mmap {peer}")
            thread.start()
            threads = [t for t in threads if t.is_alive()] + [thread]
        for thread in threads:
            thread.join()
        return results

    def stop(self) -> None:
        """Stop accepting: a :meth:`serve` blocked in accept() returns after its receivers."""
        self._stopping.set()
        self._listener.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._listener.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _unexpected(exc: Exception, peer: str) -> BpfBatchError:
    """An exception the receiver did not translate (a raw OSError, MemoryError from mmap...)
    as the one-line error of its connection."""
    if isinstance(exc, OSError) and exc.errno:
        return from_errno("receive", exc.errno, obj=peer)
    return BpfBatchError(f"receive failed: {type(exc).__name__}: {exc}", obj=peer)
