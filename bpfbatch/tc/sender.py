"""Many rtnetlink messages per ``sendmsg``, leaving the kernel exactly as ``tc -b`` would.

**The contract**: for any batch, with and without ``force``, the kernel ends in the state
iproute2's ``tc -b`` leaves, the same failures are reported for the same lines, and the
outcome (:class:`Report`) says what tc's exit status says. ``tc -b`` sends one message at a
time and stops at the first failure (or, with ``-force``, goes on); a batch sender must keep
that while many messages travel per ``sendmsg``:

* Messages are packed into one buffer until the next would pass the batch's size — the first
  batch :data:`FIRST_BATCH_BYTES`, each next one twice the last up to ``batch_bytes`` (never
  more than the socket's ``sk_sndbuf - 32``) — or the batch holds as many messages as replies
  are sure to fit the receive buffer. Only the last message asks for an ACK; the kernel
  answers every failing message anyway, in order, so one read pass knows every message's fate.
* **Nothing irreversible travels behind a message that may fail.** Without ``force`` every
  message after the first failed one in a ``sendmsg`` must end up not applied. A message whose
  effect can be undone exactly (:func:`.message.undo_of`: ``actions add`` with explicit
  indexes, ``filter add`` by handle — echoed back by the kernel when the line leaves the handle
  to it, or predicted in a u32 hash table the batch created: :mod:`.u32_known`) may follow
  others; any other message (replace, change, delete, qdisc, class, u32 hash
  tables) starts a new ``sendmsg``, so nothing that could fail was sent before it.
* When message k of a ``sendmsg`` fails without ``force``, the messages after it that the
  kernel applied are undone, last first, and sending stops: lines 1..k-1 applied, as tc leaves
  them. Filters go first; the kernel lets go of their actions only after an RCU grace period,
  so the undo waits for that (:mod:`.release`) before it deletes undone actions (one a filter
  was bound to could not be deleted yet) and before it returns (the actions an undone filter
  created would still hold their indexes).
* With ``coalesce``, a :class:`~.message.Joined` message carries several ``actions add``
  lines with explicit indexes (up to 32 actions, TCA_ACT_MAX_PRIO; grouped before encoding by
  :mod:`.coalesce`), which the kernel applies all or nothing. When a joined message fails — in
  any mode — the messages after it are undone, its lines are re-sent one message each (so the
  failure lands on its own line, and the lines before it are applied as tc applies them), and
  then the undone messages are sent again.
* qdisc and class requests ask for their own ACK, which carries the kernel's warnings (htb's
  "quantum of class ... is big"); they are reported as tc prints them. Filter and action
  requests do not (an ACK each would cost a receive per line): a warning the kernel attached
  to one of their successes would go unseen — none of the forms tested here gets one.

The one remaining difference from tc: an add that is undone was in the kernel for the time
between the ``sendmsg`` and its undo (microseconds; an undone filter's actions until the kernel
released them, the grace period the undo waits out), visible to traffic and to other netlink
listeners (which also see the undo's delete notification).

One more, only with ``force`` and ``coalesce`` together: a u32 key node may be undone while the
kernel-side instance holds no other key node only if an earlier u32 add in that instance failed;
deleting it then also removes that instance's hash tables.

**Signals.** The packing thread's waits on what it shares with the sending thread (the batch
queue, the end of the sending thread) hold SIGINT, SIGTERM and SIGHUP back
(:func:`~bpfbatch.interrupts.deferred`): ``Condition.wait`` takes the condition's lock again
on its way out, and a signal handler that raises inside that acquire leaves without the lock;
the ``with`` around the wait then releases it anyway — while the sending thread holds it —
and the sending thread dies of "release unlocked lock", with the batch it had just taken (seen:
a SIGHUP in ``queue.put``). Held back, the signal lands when the wait is over (a batch handed
over, a batch settled).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno as _errno
import os
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import NamedTuple

from ..errors import BpfBatchError, InputError, PartialError, from_errno
from ..interrupts import deferred
from . import specs as S
from .message import (BY_INDEX, UNKNOWN, Joined, LineError, Listing, Message, Parsed, Undo, filter_delete,
                      filter_get, undo_of)
from .netlink import Reply, RtnlSocket
from .release import filter_actions, releases, wait_released
from .u32_known import U32Known, predicted_delete, selector

#: Bytes per sendmsg unless told otherwise: large enough that syscalls stop mattering next to
#: the kernel's per-message work, small enough to stay cache-friendly.
DEFAULT_BATCH_BYTES = 256 << 10
#: The first batch's size; each next one doubles up to ``batch_bytes``. The kernel starts on
#: the first lines while the rest are parsed (a full first batch kept it idle for the
#: 20-30 ms its parse takes: 3% of a 100k-line file).
FIRST_BATCH_BYTES = 8 << 10
_FLAGS_OFFSET = 6  # nlmsg_flags within nlmsghdr
#: Packed batches waiting for the sending thread: enough to keep it busy, and a memory bound.
_IN_FLIGHT = 2
_RETRY_SEQ_BASE = 1 << 31
_pack_header = S.NLMSGHDR.pack
#: Requests that get their own ACK, for the warnings the kernel attaches to a success.
_ACKED_TYPES = frozenset((S.Msg.NEWQDISC, S.Msg.DELQDISC, S.Msg.NEWTCLASS, S.Msg.DELTCLASS))


@dataclasses.dataclass(frozen=True)
class Failure:
    """A command that was not applied: ``errno`` set for kernel refusals, None for bad input.
    ``msg_type`` is the request's type (tc's wording after a refusal depends on it); ``fatal``
    marks input tc ends the whole batch on (its usage/invalid-argument exits)."""

    source: str
    line: int
    text: str
    errno: int | None = None
    #: The kernel's own explanation (NETLINK_EXT_ACK), when it gave one.
    extack: str | None = None
    msg_type: int | None = None
    fatal: bool = False
    #: The reason was printed already (by tc itself, for a listing line it failed).
    said: bool = False

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


@dataclasses.dataclass
class Report:
    """What happened to a batch: lines are applied in order, so ``last_line`` and the failed
    lines say exactly which lines are in the kernel."""

    source: str
    #: Commands accounted for: sent to the kernel, or refused before sending.
    commands: int = 0
    applied: int = 0
    failed: int = 0
    first_failure: Failure | None = None
    #: The last line accounted for (applied or failed); nothing after it was applied.
    last_line: int = 0
    #: Set when sending stopped at a failure (without force, or on a fatal line).
    stopped: bool = False
    #: A line tc exits on at once, even with -force; with the status tc exits with.
    fatal: bool = False
    fatal_status: int = 255
    #: Lines the kernel applied after the stopping failure and that were undone again.
    undone: int = 0
    #: Lines the kernel applied after the stopping failure that could not be undone (a
    #: predicted key node found changed: :mod:`.u32_known`); still in the kernel.
    left: list[int] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failed == 0

    def summary(self) -> str:
        """One line: counts, where it stopped, what was undone."""
        first = self.first_failure
        parts = [f"{self.failed} of {self.commands} commands failed (first at line {first.line}: "
                 f"{first.text})" if first else f"{self.commands} commands"]
        parts.append(f"{self.applied} applied, up to line {self.last_line}")
        if self.stopped and self.left:
            parts.append(f"stopped at line {self.last_line}; applied after it and not undone: "
                         f"line{'s' * (len(self.left) > 1)} {', '.join(map(str, self.left))}")
        elif self.stopped:
            parts.append(f"stopped at line {self.last_line}; nothing after it applied")
        if self.undone:
            parts.append(f"{self.undone} commands after the failure undone")
        return "; ".join(parts)


class _Entry(NamedTuple):
    """One message of a batch: its lines (several for a joined message), the message, for a
    joined one how to get its lines' own messages (else None), how to undo it (None: it
    cannot be), its header flags."""

    lines: tuple[int, ...]
    message: Message
    split: Callable[[], tuple[Message, ...]] | None
    undo: Undo | None
    flags: int


def _entry(line: int, message: Message, undo: Undo | None, may_undo: bool) -> _Entry:
    flags = message.flags | S.NLM_F_REQUEST
    if message.msg_type in _ACKED_TYPES:
        flags |= S.NLM_F_ACK
    if may_undo and undo is not None and undo.echo:
        flags |= S.NLM_F_ECHO
    return _Entry((line,), message, None, undo, flags)


def _joined_entry(joined: Joined) -> _Entry:
    message = joined.message
    return _Entry(joined.lines, message, joined.split, BY_INDEX, message.flags | S.NLM_F_REQUEST)


class Sender:
    """Feed it ``(line, Parsed)`` in order with :meth:`feed`; :meth:`finish` sends the rest.
    ``coalesce``: :class:`~.message.Joined` messages may come (even with ``force``, a failure
    then needs the messages after it undone).

    Two threads: the caller's parses, encodes and packs; a sending thread does ``sendmsg``, the
    reply accounting and any undo. ``sendmsg`` releases the GIL while the kernel works through
    the batch, so packing the next batch overlaps it. At most :data:`_IN_FLIGHT` packed batches
    wait, which bounds memory. ``on_failure`` and ``on_warning`` are called from the sending
    thread, in line order; ``on_said`` (what tc prints while parsing a line, :class:`~.message.Said`)
    from the caller's, once the lines before it are settled.
    """

    def __init__(self, sock: RtnlSocket, *, source: str, force: bool = False,
                 batch_bytes: int = DEFAULT_BATCH_BYTES, coalesce: bool = False,
                 on_failure: Callable[[Failure], None] | None = None,
                 on_warning: Callable[[int, str], None] | None = None,
                 on_listing: Callable[[tuple[str, ...]], int] | None = None,
                 on_said: Callable[[str], None] | None = None) -> None:
        self._sock = sock
        self._force = force
        #: Undo is needed when a failure must not leave later messages applied.
        self._may_undo = not force or coalesce
        self._on_failure = on_failure
        self._on_warning = on_warning
        self._on_listing = on_listing
        self._on_said = on_said
        self._send_limit = sock.max_send_bytes
        self._max_bytes = min(batch_bytes, self._send_limit)
        #: This batch's size limit: :data:`FIRST_BATCH_BYTES`, doubling to ``_max_bytes``.
        self._limit = min(FIRST_BATCH_BYTES, self._max_bytes)
        self._max_messages = sock.max_replies
        self._buf = bytearray()
        self._last_offset = 0
        #: Per message of the batch being packed: its line (an int: the common case, rebuilt
        #: from the buffer if ever needed — ints cost the garbage collector nothing) or an
        #: :class:`_Entry`.
        self._entries: list[int | _Entry] = []
        #: The batch being packed holds a joined message (its entries then count several lines).
        self._has_joined = False
        #: The batch has a message that asked for its own ACK (it may carry a warning).
        self._acked_inside = False
        self._seq = 0
        #: Retries and undos are sent by the sending thread, numbered apart from the packer's.
        self._retry_seq = _RETRY_SEQ_BASE
        #: What is known of the u32 instances the batch touches (key nodes held, tables of ours).
        self._u32 = U32Known(predict=not force)
        self._batches: queue.Queue = queue.Queue(maxsize=_IN_FLIGHT)
        self._error: BaseException | None = None
        self._aborted = False
        self.report = Report(source)
        #: Set by the sending thread as it ends. Waited on instead of ``Thread.join``: a signal
        #: handler raising inside ``join`` can leave a running thread marked as ended
        #: (CPython's bpo-45274 cleanup releases the lock the thread still holds), and the
        #: report would then be read while the last batch is still being settled.
        self._ended = threading.Event()
        threading.Thread(target=self._send_loop, name="tc-batch-sender", daemon=True).start()

    # --- packing (caller's thread) -------------------------------------------------------------

    def feed(self, items: Iterable[tuple[int, Parsed]]) -> None:
        """Queue each command of ``items`` (``(line, Parsed)``, a reader's error recorded in
        its line's place) in order, until sending stops: no item is taken once it has.

        This is the batch's hot loop: a message undone by fixed messages (an ``actions add``
        naming its indexes, from a template) never needs a new sendmsg first and goes straight
        to :meth:`_append`."""
        report = self.report
        append = self._append
        for line, parsed in items:
            if parsed.__class__ is not Message:
                self._submit(line, parsed)
            elif parsed.said and not self._say(parsed.said):
                return
            else:
                undo = parsed.undo
                if undo is UNKNOWN:
                    undo = undo_of(parsed)
                if undo is not None and not undo.echo and undo.u32_instance is None:
                    append(line, parsed, parsed[1] | S.NLM_F_REQUEST)
                else:
                    self._queue(_entry(line, parsed, undo, self._may_undo))
            if report.stopped or self._error is not None:
                return

    def _submit(self, line: int, parsed: LineError | Listing | Joined) -> None:
        """Queue what is not a message: a reader's error, a listing, a joined message."""
        if parsed.__class__ is LineError:
            self._input_failure(line, parsed)
        elif parsed.__class__ is Listing:
            self._listing(line, parsed)
        else:
            self._queue(_joined_entry(parsed))

    def _say(self, text: str) -> bool:
        """What tc printed while parsing a line: printed once every earlier line's outcome is
        (False, printing nothing, when sending has stopped before it)."""
        if not self._settled():
            return False
        if self._on_said is not None:
            self._on_said(text)
        return True

    def abort(self) -> None:
        """Stop after the batch being sent (its replies read and accounted, undone as needed);
        send nothing more. Safe to call again when a signal interrupted it: the report is
        whole only once this returns."""
        self._aborted = True
        with deferred():  # waits shared with the sending thread: module doc
            while not self._ended.is_set():
                with contextlib.suppress(queue.Full):  # wakes the thread; batches left dropped
                    self._batches.put_nowait(None)
                self._ended.wait(0.05)

    def finish(self) -> Report:
        """Send whatever is queued, wait for every reply, and return the report."""
        try:
            if not self.report.stopped:
                self._flush()
        finally:
            with deferred():  # a wait shared with the sending thread: module doc
                self._batches.put(None)
                self._ended.wait()
        if self._error is not None:
            raise self._error
        return self.report

    def _settled(self) -> bool:
        """Send and settle everything before this line (failures stay in line order, and a
        listing shows them applied); False when sending has stopped."""
        self._flush()
        with deferred():  # a wait shared with the sending thread: module doc
            self._batches.join()
        if self._error is not None:
            raise self._error
        return not self.report.stopped

    def _listing(self, line: int, listing: Listing) -> None:
        """A line tc answers by printing: every line before it settled, then ``on_listing``
        prints it and says tc's exit status (255: tc's parser ended the batch)."""
        if not self._settled():
            return
        report = self.report
        report.commands += 1
        report.last_line = line
        if self._on_listing is None:
            self._fail(Failure(report.source, line, f"'{' '.join(listing.words)}' prints a "
                               "listing, and no printer was given"))
            status = 1
        else:
            status = self._on_listing(listing.words)
            if status:
                self._fail(Failure(report.source, line, f"'{' '.join(listing.words)}' failed "
                                   f"(status {status})", fatal=status == 255, said=True))
        if not status:
            report.applied += 1
        elif status == 255 or not self._force:
            report.stopped = True
            report.fatal = status == 255

    def _input_failure(self, line: int, failure: LineError) -> None:
        if not self._settled():
            return
        report = self.report
        report.commands += 1
        report.last_line = line
        # the message alone: "Command failed FILE:LINE" names the line, as in tc
        self._fail(Failure(report.source, line, failure.error.message, fatal=failure.fatal))
        if failure.fatal or not self._force:
            report.stopped = True
            report.fatal, report.fatal_status = failure.fatal, failure.status

    def _queue(self, entry: _Entry) -> None:
        undo = entry.undo
        if self._may_undo and (undo is None or undo.u32_instance is not None):
            entry = self._before_risky(entry)
        self._append(entry, entry.message, entry.flags)
        if entry.flags & S.NLM_F_ACK:
            self._acked_inside = True
        if entry.split is not None:
            self._has_joined = True

    def _append(self, entry: int | _Entry, message: Message, flags: int) -> None:
        """Pack ``message`` into the batch (handing the batch over first when it is full);
        ``entry`` is its line, or its :class:`_Entry` when a line number does not say enough."""
        body = message[2]
        size = 16 + len(body)
        entries = self._entries
        buf = self._buf
        if len(buf) + size > self._limit or len(entries) >= self._max_messages:
            if entries:
                self._flush()
                entries, buf = self._entries, self._buf
            if size > self._send_limit:  # past the limit too: checked only here
                raise InputError(f"message of {size} bytes exceeds the socket's send limit",
                                 obj=f"{self.report.source}:{_last_line(entry)}")
        self._seq = seq = self._seq + 1
        self._last_offset = len(buf)
        buf += _pack_header(size, message[0], flags, seq, 0)
        buf += body
        entries.append(entry)

    def _before_risky(self, entry: _Entry) -> _Entry:
        """A message that cannot be undone, or a u32 key node whose undo is exact only while its
        instance keeps another key node: start a new sendmsg unless it is safe where it is."""
        message, undo = entry.message, entry.undo
        if undo is None:
            self._u32.irreversible(message)
            risky = True
        else:
            known, risky = self._u32.key_node(message, undo)
            if known is not undo:
                entry = entry._replace(undo=known, flags=entry.flags if known.echo
                                       else entry.flags & ~S.NLM_F_ECHO)
                undo = known
        if risky and self._entries and (not self._force or self._has_joined):
            self._flush()
        if undo is not None:  # known once this batch is handed over (not before: see _flush)
            self._u32.packed(undo.u32_instance)
        return entry

    def _flush(self) -> None:
        """Hand the packed batch to the sending thread (waits while _IN_FLIGHT are queued)."""
        if not self._entries:
            return
        with deferred():  # a wait shared with the sending thread: module doc
            self._batches.put((self._buf, self._last_offset, self._entries, self._seq,
                               self._acked_inside, self._has_joined))
        self._buf = bytearray()
        self._entries = []
        self._has_joined = self._acked_inside = False
        self._u32.handed_over()
        self._limit = min(self._limit * 2, self._max_bytes)

    # --- sending (sending thread) --------------------------------------------------------------

    def _send_loop(self) -> None:
        try:
            self._send_batches()
        finally:
            self._ended.set()

    def _send_batches(self) -> None:
        while True:
            batch = self._batches.get()
            try:
                if batch is None:
                    return
                if self.report.stopped or self._error is not None or self._aborted:
                    continue  # packed after a stop or an abort: never sent
                buf, last_offset, entries, last_seq, acked_inside, has_joined = batch
                acks, dumps = self._transmit(buf, last_offset, len(entries), last_seq)
                if len(acks) == 1 and not acks[len(entries) - 1].error and not acked_inside:
                    self._all_applied(entries, acks[len(entries) - 1], has_joined)
                else:
                    self._settle([_entry_at(e, buf, o) for e, o in zip(entries, _offsets(buf))],
                                 acks, dumps)
            except BaseException as exc:  # handed to the caller's thread
                self._error = exc
            finally:
                self._batches.task_done()

    def _transmit(self, buf: bytearray, last_offset: int, count: int, last: int
                  ) -> tuple[dict[int, Reply], dict[int, Reply]]:
        """Send ``count`` messages numbered up to ``last``; their ACK/error replies and their
        dumps, by position."""
        buf[last_offset + _FLAGS_OFFSET] |= S.NLM_F_ACK
        self._sock.send(buf)
        first = last - count + 1
        acks: dict[int, Reply] = {}
        dumps: dict[int, Reply] = {}
        while True:
            reply = self._sock.next_reply()
            if reply is None:
                raise from_errno("read netlink replies", _errno.EPROTO,
                                 detail=f"no reply for the batch's last message (seq {last})")
            if not first <= reply.seq <= last:
                raise from_errno("read netlink replies", _errno.EPROTO,
                                 detail=f"reply for unknown seq {reply.seq}")
            if reply.dump is not None:
                dumps[reply.seq - first] = reply
                continue
            acks[reply.seq - first] = reply
            if reply.seq == last:
                return acks, dumps

    def _all_applied(self, entries: list[int | _Entry], last_ack: Reply, has_joined: bool) -> None:
        """The common case: nothing failed; the last message's ACK may carry a warning."""
        report = self.report
        report.commands += sum(1 if e.__class__ is int else len(e.lines) for e in entries) \
            if has_joined else len(entries)
        report.applied = report.commands - report.failed
        last = entries[-1]
        report.last_line = _last_line(last)
        if last.__class__ is not int and last.flags & S.NLM_F_ACK and last_ack.message:
            self._warn(last.lines[-1], last_ack.message)

    def _settle(self, entries: list[_Entry], acks: dict[int, Reply], dumps: dict[int, Reply]) -> None:
        """Account a sent batch in line order; undo and re-send as the module docs say."""
        report = self.report
        for position, entry in enumerate(entries):
            reply = acks.get(position)
            if reply is None or not reply.error:
                report.commands += len(entry.lines)
                report.applied += len(entry.lines)
                report.last_line = entry.lines[-1]
                if reply is not None and reply.message and entry.flags & S.NLM_F_ACK:
                    self._warn(entry.lines[-1], reply.message)
                continue
            later = entries[position + 1:]
            if entry.split is not None:  # joined: its lines one by one, then the rest again
                self._undo(entries, acks, dumps, position + 1)
                self._resend([_entry(line, part, BY_INDEX, self._may_undo)
                              for line, part in zip(entry.lines, entry.split())])
                if later and not report.stopped:
                    self._resend(later)
                return
            report.commands += 1
            report.last_line = entry.lines[0]
            self._fail(self._kernel_failure(entry, reply))
            if not self._force:
                report.stopped = True
                self._undo(entries, acks, dumps, position + 1)
                return

    def _undo(self, entries: list[_Entry], acks: dict[int, Reply], dumps: dict[int, Reply],
              first: int) -> None:
        """Undo, last first, those of ``entries[first:]`` the kernel applied: the filters, then
        — once the kernel has released what those filters held (:mod:`.release`) — the
        actions. A key node whose handle was predicted is read back first and left alone
        (and an error raised once the rest is undone) unless it holds the add's selector."""
        failed_in: Counter = Counter()  # per hash table bucket, adds into it that failed so far
        failed_before: list[int] = []
        for position, entry in enumerate(entries):
            slot = entry.undo.slot if entry.undo is not None else None
            failed_before.append(failed_in[slot])
            reply = acks.get(position)
            if slot is not None and reply is not None and reply.error:
                failed_in[slot] += 1
        #: (lines, request, the selector a predicted key node must hold, else None)
        undos: list[tuple[tuple[int, ...], Message, bytes | None]] = []
        for position in range(len(entries) - 1, first - 1, -1):
            reply = acks.get(position)
            if reply is not None and reply.error:
                continue
            entry = entries[position]
            undo = entry.undo
            if undo is None:  # the packer never lets this happen; refuse to guess
                raise BpfBatchError(f"line {entry.lines[0]} was applied after a failure and "
                                    "cannot be undone", obj=self.report.source)
            if undo.echo:
                echo = dumps.get(position)
                if echo is None:
                    raise BpfBatchError(f"no echo for line {entry.lines[0]}: cannot undo it",
                                        obj=self.report.source)
                undos.append((entry.lines, filter_delete(echo.dump, entry.message.body), None))
            elif undo.slot is not None:
                undos.append((entry.lines, predicted_delete(entry.message, undo, failed_before[position]),
                              selector(entry.message.body)))
            else:  # rebuilt from the message itself: a template's undo names its own indexes
                undos += [(entry.lines, message, None) for message in undo_of(entry.message).messages]
            self.report.undone += len(entry.lines)
        filters = [undo for undo in undos if undo[1].msg_type == S.Msg.DELTFILTER]
        astray: list[int] = []
        if filters:
            answers = self._query([filter_get(message) for _, message, _ in filters])
            kept, held = [], []
            for (lines, message, expected), answer in zip(filters, answers):
                dump = answer.dump if answer is not None else None
                if expected is not None and (dump is None or selector(dump) != expected):
                    astray.append(lines[0])
                    continue
                kept.append((lines, message))
                if dump is not None:
                    held += filter_actions(dump)
            self._apply(kept)
            wait_released(self._query, releases(held), source=self.report.source)
        self._apply([(lines, message) for lines, message, _ in undos
                     if message.msg_type != S.Msg.DELTFILTER])
        if astray:
            self.report.undone -= len(astray)
            self.report.left = sorted(astray)
            raise BpfBatchError(f"line {min(astray)} was applied after the failure and is not "
                                "undone: the key node the kernel was to number for it does not "
                                "hold its selector (another writer changed the hash table)")

    def _apply(self, undos: list[tuple[tuple[int, ...], Message]]) -> None:
        """Send undo requests in one sendmsg; any refusal is an error naming its line."""
        if not undos:
            return
        acks, _ = self._send_now([message for _, message in undos])
        for position, reply in acks.items():
            if reply.error:
                lines = undos[position][0]
                raise from_errno("undo tc batch line", reply.error, obj=f"{self.report.source}:{lines[0]}",
                                 detail=reply.message or "the delete was refused")

    def _query(self, requests: list[Message]) -> list[Reply | None]:
        """Send get requests (as many per sendmsg as replies surely fit); per request, the
        object the kernel answered with, or its error reply."""
        answers: list[Reply | None] = []
        for start in range(0, len(requests), self._max_messages):
            acks, dumps = self._send_now(requests[start:start + self._max_messages])
            answers += [dumps.get(i) or acks.get(i)
                        for i in range(min(self._max_messages, len(requests) - start))]
        return answers

    def _resend(self, entries: list[_Entry]) -> None:
        """Send ``entries`` again as a batch of their own and settle it."""
        acks, dumps = self._send_now([entry.message for entry in entries],
                                      flags=[entry.flags for entry in entries])
        self._settle(entries, acks, dumps)

    def _send_now(self, messages: list[Message], *, flags: list[int] | None = None
                  ) -> tuple[dict[int, Reply], dict[int, Reply]]:
        buf = bytearray()
        last_offset = 0
        for i, message in enumerate(messages):
            self._retry_seq += 1
            last_offset = len(buf)
            header_flags = flags[i] if flags else message.flags | S.NLM_F_REQUEST
            buf += _pack_header(16 + len(message.body), message.msg_type, header_flags,
                                self._retry_seq, 0)
            buf += message.body
        return self._transmit(buf, last_offset, len(messages), self._retry_seq)

    def _kernel_failure(self, entry: _Entry, reply: Reply) -> Failure:
        return Failure(self.report.source, entry.lines[0], reply.message or os.strerror(reply.error),
                       reply.error, reply.message, entry.message.msg_type)

    def _fail(self, failure: Failure) -> None:
        report = self.report
        report.failed += 1
        if report.first_failure is None:
            report.first_failure = failure
        if self._on_failure is not None:
            self._on_failure(failure)

    def _warn(self, line: int, text: str) -> None:
        if self._on_warning is not None:
            self._on_warning(line, text)


def _last_line(entry: int | _Entry) -> int:
    return entry if entry.__class__ is int else entry.lines[-1]


_SENT_ONLY = S.NLM_F_REQUEST | S.NLM_F_ACK | S.NLM_F_ECHO


def _offsets(buf: bytearray) -> list[int]:
    """Where each message of a packed batch starts (walked as the kernel walks it)."""
    offsets, offset, end = [], 0, len(buf)
    while offset < end:
        offsets.append(offset)
        offset += (S.NLMSGHDR.unpack_from(buf, offset)[0] + 3) & ~3
    return offsets


def _entry_at(entry: int | _Entry, buf: bytearray, offset: int) -> _Entry:
    """The full :class:`_Entry` of a batch message (rebuilt from the buffer for a bare line)."""
    if entry.__class__ is not int:
        return entry
    length, msg_type, flags = S.NLMSGHDR.unpack_from(buf, offset)[:3]
    message = Message(msg_type, flags & ~_SENT_ONLY, bytes(buf[offset + 16:offset + length]))
    return _Entry((entry,), message, None, undo_of(message), flags & ~S.NLM_F_ACK)


def raise_for(report: Report) -> None:
    """Raise the one-line error a failed batch deserves (nothing if everything was applied)."""
    first = report.first_failure
    if first is None:
        return
    if first.errno is None:
        raise InputError(report.summary(), obj=report.source)
    raise PartialError("tc batch", first.errno, applied=report.applied, obj=report.source,
                       detail=report.summary())
