"""A tc session: one rtnetlink socket and one resolver, opened in a network namespace, sending
rule objects or batch files through the :class:`~.sender.Sender`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TextIO

from ..errors import BpfBatchError, InputError, Interrupted
from .coalesce import coalesce, coalescible
from .netns import entered as in_netns
from .netlink import RtnlSocket
from .resolve import Resolver
from .rules import Rule
from .sender import DEFAULT_BATCH_BYTES, Failure, Report, Sender
from .templates import TemplateReader, encode_rule

#: Smallest ``batch_bytes``: one large message (a u32 filter with 32 actions) must fit.
MIN_BATCH_BYTES = 1024


class BatchInterrupted(BpfBatchError):
    """Sending stopped on a signal or an internal error; ``report`` says which lines were
    applied (lines are applied in order: up to ``report.last_line``, minus failed ones)."""

    def __init__(self, cause: BaseException, report: Report) -> None:
        if isinstance(cause, KeyboardInterrupt):
            what = f"interrupted by {cause.args[0] if cause.args else 'SIGINT'}"
        else:
            what = f"stopped by {cause.__class__.__name__}: {cause}"
        super().__init__(f"{what}; {report.summary()}", obj=report.source)
        self.report = report

def _stop(sender: Sender) -> None:
    """``sender.abort()``, begun again when a further signal interrupts it."""
    while True:
        try:
            sender.abort()
            return
        except (Interrupted, KeyboardInterrupt):
            continue


#: Receive-buffer request: the kernel doubles it; replies are small and few (one per failure
#: plus one per send), but a send of all-failing messages must still fit.
_RCVBUF = 16 << 20


class Session:
    """Send tc rules in batches. ``netns`` is an ``ip netns`` name (or a path); ``force`` keeps
    going after failures; ``coalesce`` packs consecutive ``actions add`` into shared messages;
    ``on_failure`` sees each failed command as it is known, in line order (called from the
    sender's thread); ``on_listing`` prints a read-only line's listing (see :mod:`.listing`)
    once every line before it is settled, and returns tc's exit status for it; ``on_said``
    prints what tc says on stderr while parsing a line (skbmod's, ife's notes), in its place. A session can send several batches; close it (or use ``with``) to release
    the socket and any pinned-program fds. Example::

        with Session(netns="lab") as tc:
            report = tc.send([Actions("add", (Mirred("egress", "redirect", "vethB", index=i),))
                              for i in range(1, 1001)])
    """

    def __init__(self, *, netns: str | None = None, force: bool = False,
                 batch_bytes: int = DEFAULT_BATCH_BYTES, coalesce: bool = False,
                 on_failure: Callable[[Failure], None] | None = None,
                 on_warning: Callable[[int, str], None] | None = None,
                 on_listing: Callable[[tuple[str, ...]], int] | None = None,
                 on_said: Callable[[str], None] | None = None) -> None:
        if batch_bytes < MIN_BATCH_BYTES:
            raise InputError(f"must be at least {MIN_BATCH_BYTES}", obj="batch_bytes")
        self._coalesce = coalesce
        self._options = dict(force=force, batch_bytes=batch_bytes, coalesce=coalesce,
                             on_failure=on_failure, on_warning=on_warning, on_listing=on_listing,
                             on_said=on_said)
        with in_netns(netns):
            self._sock = RtnlSocket(sndbuf=batch_bytes + 64, rcvbuf=_RCVBUF)
            try:
                self._resolve = Resolver()
            except BaseException:
                self._sock.close()
                raise

    def send(self, rules: Iterable[Rule], *, source: str = "rules") -> Report:
        """Send rule objects in order; the report's line numbers count rules from 1."""
        numbered = enumerate(rules, 1)
        if self._coalesce:
            return self._run(coalesce(numbered, self._resolve, source), source)
        return self._run(((line, encode_rule(rule, self._resolve, source, line))
                          for line, rule in numbered), source)

    def send_batch(self, stream: TextIO | Iterable[str], name: str) -> Report:
        """Send a ``tc -batch`` file read from ``stream`` (streamed; ``name`` labels lines).
        Repeated line shapes are encoded from templates (:mod:`.templates`), fresh per batch;
        with ``coalesce``, ``actions add`` lines are grouped first (:mod:`.coalesce`)."""
        if not self._coalesce:
            return self._run(TemplateReader(self._resolve).read(stream, name), name)
        lines = TemplateReader(self._resolve, unencoded=coalescible).read(stream, name)
        return self._run(coalesce(lines, self._resolve, name), name)

    def send_encoded(self, items: Iterable[tuple[int, object]], name: str) -> Report:
        """Send what a :class:`~.templates.TemplateReader` gave: ``(line, Message or
        LineError)`` pairs, in line order — for a caller that read the batch already (``tc
        apply`` reads its file to compare it, then sends those messages, not the file again)."""
        return self._run(items, name)

    def _run(self, items, source: str) -> Report:
        """Feed the sender; on a signal or any error, stop cleanly and say what was applied.

        The report is made only once the batch in flight is settled (its replies read: the
        kernel has applied it), so it says exactly what the kernel holds. A signal that lands
        while stopping (a second SIGINT) does not cut that short. The CLI's
        :class:`~bpfbatch.errors.Interrupted` goes on with the report as its message (the CLI
        exits 128 + the signal); anything else becomes :class:`BatchInterrupted`."""
        sender = Sender(self._sock, source=source, **self._options)
        try:
            sender.feed(items)
            return sender.finish()
        except BaseException as exc:
            _stop(sender)
            if isinstance(exc, Interrupted):
                exc.obj, exc.message = source, f"after {sender.report.summary()}"
                exc.report = sender.report  # for a caller sending several batches
                raise
            raise BatchInterrupted(exc, sender.report) from exc

    def close(self) -> None:
        self._resolve.close()
        self._sock.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

