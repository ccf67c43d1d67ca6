"""Many rtnetlink messages per ``sendmsg``, with every reply mapped back to its command.

How a batch goes out (why: the measurements in the package docs):

* Messages are appended to one buffer until the next would pass ``batch_bytes`` (never more
  than the socket's ``sk_sndbuf - 32``) or the batch holds as many messages as replies are sure
  to fit the receive buffer. Then one ``sendmsg``.
* Only the batch's *last* message asks for an ACK. The kernel answers every failing message
  anyway, in order, so after the send the queue holds one error reply per failed message and
  then the last message's reply: read until that one (never blocking — the kernel finished
  the whole send before ``sendmsg`` returned) and every command's fate is known exactly.
  A missing final reply or ENOBUFS is an error, never a guess.
* ``coalesce``: consecutive ``actions add`` messages are joined into one (up to 32 actions,
  TCA_ACT_MAX_PRIO). The kernel applies such a message all or nothing, so when it fails its
  commands' own messages are re-sent one each and the failure lands on the exact line.

A netlink batch is not a transaction: without ``force``, sending stops at the first failed
command, but commands after it *in the same sendmsg* were still processed. The :class:`Report`
says which of them were applied anyway, which were not, and from where nothing was sent.
"""

from __future__ import annotations

import dataclasses
import errno as _errno
import os
import queue
import threading
from collections.abc import Callable
from typing import Union

from ..errors import BpfBatchError, InputError, PartialError, from_errno
from . import rules as R
from . import specs as S
from .netlink import Reply, RtnlSocket
from .resolve import Resolver

#: Bytes per sendmsg unless told otherwise: large enough that syscalls stop mattering next to
#: the kernel's per-message work, small enough to stay cache-friendly.
DEFAULT_BATCH_BYTES = 256 << 10
_ACK_FLAG_OFFSET = 6  # nlmsg_flags within nlmsghdr
#: Packed batches waiting for the sending thread: enough to keep it busy, and a memory bound.
_IN_FLIGHT = 2
_RETRY_SEQ_BASE = 1 << 31
_pack_header = S.NLMSGHDR.pack


@dataclasses.dataclass(frozen=True)
class Failure:
    """A command that was not applied: ``errno`` set for kernel refusals, None for bad input."""

    source: str
    line: int
    text: str
    errno: int | None = None
    #: The kernel's own explanation (NETLINK_EXT_ACK), when it gave one.
    extack: str | None = None

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


@dataclasses.dataclass
class Report:
    """What happened to a batch. Line lists are bounded by one sendmsg's worth of commands."""

    source: str
    #: Commands accounted for: sent to the kernel, or refused before sending.
    commands: int = 0
    applied: int = 0
    failed: int = 0
    first_failure: Failure | None = None
    #: Without force: set at the first failure; nothing was sent after ``last_sent_line``.
    stopped: bool = False
    last_sent_line: int | None = None
    #: Lines after the first failure that the kernel applied anyway (same sendmsg).
    applied_anyway: list[int] = dataclasses.field(default_factory=list)
    #: Lines after the first failure that were sent but not applied (the rest of a failed
    #: coalesced message, not retried once stopped).
    not_applied: list[int] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failed == 0

    def summary(self) -> str:
        """One line: counts, and in stop mode exactly what happened after the first failure."""
        first = self.first_failure
        parts = [f"{self.failed} of {self.commands} commands failed (first at line {first.line}: "
                 f"{first.text})" if first else f"{self.commands} commands"]
        parts.append(f"{self.applied} applied")
        if self.stopped:
            parts.append("stopped at the first failure; applied anyway from the same sendmsg: "
                         + (line_ranges(self.applied_anyway) if self.applied_anyway else "none"))
            if self.not_applied:
                parts.append(f"sent but not applied: {line_ranges(self.not_applied)}")
            parts.append(f"not sent: every command after line {self.last_sent_line}")
        return "; ".join(parts)


def line_ranges(lines: list[int]) -> str:
    """``[4, 5, 6, 9]`` → ``"lines 4-6, 9"``; ``[4]`` → ``"line 4"``."""
    spans: list[list[int]] = []
    for line in sorted(lines):
        if spans and line == spans[-1][1] + 1:
            spans[-1][1] = line
        else:
            spans.append([line, line])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
    return f"line {text}" if len(lines) == 1 else f"lines {text}"


Message = tuple[int, int, bytes]
#: Per queued message: its command's line, or for a joined message ``(lines, own messages)``.
Entry = Union[int, tuple[tuple[int, ...], tuple[Message, ...]]]


class Sender:
    """Feed it ``(line, rule)`` in order with :meth:`submit` (a rule object, or a message
    already encoded as a ``(msg_type, flags, body)`` tuple); :meth:`finish` sends the rest.

    Two threads: the caller's parses, encodes and packs; a sending thread does ``sendmsg`` and
    the reply accounting. ``sendmsg`` releases the GIL while the kernel works through the batch
    (most of the kernel-side time), so packing the next batch overlaps it. At most
    :data:`_IN_FLIGHT` packed batches wait, which bounds memory. ``on_failure`` is called from
    the sending thread, in line order.
    """

    def __init__(self, sock: RtnlSocket, resolve: Resolver, *, source: str, force: bool = False,
                 batch_bytes: int = DEFAULT_BATCH_BYTES, coalesce: bool = False,
                 on_failure: Callable[[Failure], None] | None = None) -> None:
        self._sock = sock
        self._resolve = resolve
        self._force = force
        self._coalesce = coalesce
        self._on_failure = on_failure
        self._send_limit = sock.max_send_bytes
        self._max_bytes = min(batch_bytes, self._send_limit)
        self._max_messages = sock.max_replies
        self._buf = bytearray()
        self._last_offset = 0
        self._entries: list[Entry] = []
        self._commands = 0  # in the batch being packed
        self._seq = 0
        #: Retries are sent by the sending thread, numbered apart from the packer's messages.
        self._retry_seq = _RETRY_SEQ_BASE
        #: ``actions add`` messages waiting to be joined: (line, message, its action nests).
        self._group: list[tuple[int, Message, list[bytes]]] = []
        self._group_actions = 0
        self._batches: queue.Queue = queue.Queue(maxsize=_IN_FLIGHT)
        self._error: BaseException | None = None
        self._aborted = False
        self.report = Report(source)
        self._thread = threading.Thread(target=self._send_loop, name="tc-batch-sender", daemon=True)
        self._thread.start()

    # --- packing (caller's thread) -------------------------------------------------------------

    def submit(self, line: int, rule: R.Rule | Message | BpfBatchError) -> bool:
        """Queue one command (or record the input error in its place). False once stopped."""
        if self.report.stopped or self._error is not None:
            return False
        if rule.__class__ is tuple:
            message = rule
        elif isinstance(rule, BpfBatchError):
            return self._input_failure(line, rule)
        else:
            try:
                message = rule.message(self._resolve)
            except BpfBatchError as exc:
                return self._input_failure(line, exc)
        if self._coalesce and message[:2] == R.ACTIONS_ADD:
            self._add_to_group(line, message)
            return True
        if self._group:
            self._close_group()
        self._queue(message, line, 1)
        return not self.report.stopped

    def abort(self) -> None:
        """Stop the sending thread without sending what is still queued (for error paths)."""
        self._aborted = True
        self._batches.put(None)
        self._thread.join()

    def finish(self) -> Report:
        """Send whatever is queued, wait for every reply, and return the report."""
        try:
            if not self.report.stopped:
                self._close_group()
                self._flush()
        finally:
            self._batches.put(None)
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self.report

    def _add_to_group(self, line: int, message: Message) -> None:
        nests = R.action_nests(message[2])
        if self._group_actions + len(nests) > S.TCA_ACT_MAX_PRIO:
            self._close_group()
        self._group.append((line, message, nests))
        self._group_actions += len(nests)

    def _close_group(self) -> None:
        group = self._group
        if not group:
            return
        self._group, self._group_actions = [], 0
        if len(group) == 1:
            line, message, _ = group[0]
            self._queue(message, line, 1)
            return
        lines = tuple(line for line, _, _ in group)
        joined = R.join_actions([nest for _, _, nests in group for nest in nests])
        self._queue((*R.ACTIONS_ADD, joined), (lines, tuple(message for _, message, _ in group)),
                    len(lines))

    def _input_failure(self, line: int, exc: BpfBatchError) -> bool:
        # Everything before this line goes first, so failures stay in line order.
        self._close_group()
        self._flush()
        self._batches.join()
        if self._error is not None:
            raise self._error
        if self.report.stopped:
            return False
        self.report.commands += 1
        text = exc.message if isinstance(exc, InputError) else str(exc)
        self._fail(Failure(self.report.source, line, text))
        if not self._force:
            self.report.stopped = True
            self.report.last_sent_line = line
        return not self.report.stopped

    def _queue(self, message: Message, entry: Entry, commands: int) -> None:
        msg_type, flags, body = message
        size = 16 + len(body)
        entries = self._entries
        if entries and (len(self._buf) + size > self._max_bytes or len(entries) >= self._max_messages):
            self._flush()
            entries = self._entries
        if size > self._send_limit:
            last = entry if isinstance(entry, int) else entry[0][-1]
            raise InputError(f"message of {size} bytes exceeds the socket's send limit",
                             obj=f"{self.report.source}:{last}")
        buf = self._buf
        self._seq += 1
        self._last_offset = len(buf)
        buf += _pack_header(size, msg_type, flags | S.NLM_F_REQUEST, self._seq, 0)
        buf += body
        entries.append(entry)
        self._commands += commands

    def _flush(self) -> None:
        """Hand the packed batch to the sending thread (waits while _IN_FLIGHT are queued)."""
        if not self._entries:
            return
        self._batches.put((self._buf, self._last_offset, self._entries, self._commands, self._seq))
        self._buf = bytearray()
        self._entries = []
        self._commands = 0

    # --- sending (sending thread) --------------------------------------------------------------

    def _send_loop(self) -> None:
        while True:
            batch = self._batches.get()
            try:
                if batch is None:
                    return
                if self.report.stopped or self._error is not None or self._aborted:
                    continue  # packed after a stop or an abort: never sent
                buf, last_offset, entries, commands, last_seq = batch
                errors = self._transmit(buf, last_offset, len(entries), last_seq)
                if errors or self.report.stopped:
                    self._account(entries, errors)
                else:  # the common case: every command applied
                    self.report.commands += commands
                    self.report.applied += commands
            except BaseException as exc:  # handed to the caller's thread
                self._error = exc
            finally:
                self._batches.task_done()

    def _transmit(self, buf: bytearray, last_offset: int, count: int, last: int) -> dict[int, Reply]:
        """Send ``count`` messages numbered up to ``last``; their failures, by position."""
        buf[last_offset + _ACK_FLAG_OFFSET] |= S.NLM_F_ACK
        self._sock.send(buf)
        first = last - count + 1
        errors: dict[int, Reply] = {}
        while True:
            reply = self._sock.next_reply()
            if reply is None:
                raise from_errno("read netlink replies", _errno.EPROTO,
                                 detail=f"no reply for the batch's last message (seq {last})")
            if not first <= reply.seq <= last:
                raise from_errno("read netlink replies", _errno.EPROTO,
                                 detail=f"reply for unknown seq {reply.seq}")
            if reply.error:
                errors[reply.seq - first] = reply
            if reply.seq == last:
                return errors

    def _account(self, entries: list[Entry], errors: dict[int, Reply]) -> None:
        report = self.report
        stopped_before = report.stopped
        for index, entry in enumerate(entries):
            lines, retry = ((entry,), None) if isinstance(entry, int) else entry
            report.commands += len(lines)
            reply = errors.get(index)
            if reply is None:
                report.applied += len(lines)
                if report.stopped:
                    report.applied_anyway.extend(lines)
            elif retry is not None:
                if report.stopped:
                    report.not_applied.extend(lines)
                else:
                    self._retry(lines, retry)
            else:
                self._fail(self._kernel_failure(lines[0], reply))
                if not self._force and not report.stopped:
                    report.stopped = True
        if report.stopped and not stopped_before:
            last = entries[-1]
            report.last_sent_line = last if isinstance(last, int) else last[0][-1]

    def _retry(self, lines: tuple[int, ...], messages: tuple[Message, ...]) -> None:
        """Re-send a failed joined message one command per message: all at once with
        force, else one by one up to the first failure."""
        if self._force:
            self.report.commands -= len(lines)  # counted again, line by line
            self._account(list(lines), self._send_now(messages))
            return
        for position, (line, message) in enumerate(zip(lines, messages)):
            reply = self._send_now((message,)).get(0)
            if reply is None:
                self.report.applied += 1
                continue
            self._fail(self._kernel_failure(line, reply))
            self.report.stopped = True
            self.report.not_applied.extend(lines[position + 1:])
            return

    def _send_now(self, messages: tuple[Message, ...]) -> dict[int, Reply]:
        buf = bytearray()
        last_offset = 0
        for msg_type, flags, body in messages:
            self._retry_seq += 1
            last_offset = len(buf)
            buf += S.NLMSGHDR.pack(16 + len(body), msg_type, flags | S.NLM_F_REQUEST,
                                   self._retry_seq, 0)
            buf += body
        return self._transmit(buf, last_offset, len(messages), self._retry_seq)

    def _kernel_failure(self, line: int, reply: Reply) -> Failure:
        return Failure(self.report.source, line, reply.message or os.strerror(reply.error),
                       reply.error, reply.message)

    def _fail(self, failure: Failure) -> None:
        report = self.report
        report.failed += 1
        if report.first_failure is None:
            report.first_failure = failure
        if self._on_failure is not None:
            self._on_failure(failure)


def raise_for(report: Report) -> None:
    """Raise the one-line error a failed batch deserves (nothing if everything was applied)."""
    first = report.first_failure
    if first is None:
        return
    if first.errno is None:
        raise InputError(report.summary(), obj=report.source)
    raise PartialError("tc batch", first.errno, applied=report.applied, obj=report.source,
                       detail=report.summary())
