"""What bcc's top-like tools share: the interval loop, the screen clear and the loadavg line."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import InputError, Interrupted

#: What ``clear`` writes on an ANSI terminal: home the cursor, erase the screen.
CLEAR = "\033[H\033[2J"


def loadavg_line() -> str:
    """bcc's summary line, ``HH:MM:SS loadavg: <contents of /proc/loadavg>`` (its newline
    included, so a blank line follows, as in bcc)."""
    return "%-8s loadavg: %s" % (time.strftime("%H:%M:%S"), Path("/proc/loadavg").read_text())


def ticks(interval: float, count: int | None) -> Iterator[None]:
    """Print bcc's "Tracing..." line, then sleep ``interval`` seconds and yield; ``count``
    times, or forever with ``None``.

    A signal during the wait (Ctrl-C, or SIGTERM/SIGHUP as the CLI raises them: the
    :class:`~bpfbatch.errors.Interrupted`) ends the loop after one last yield, so the
    partial interval is still reported (bcc does the same), and is then raised again: the
    command exits 128 + the signal. The banner is printed under the same guard because a
    caller may send the Ctrl-C as soon as it reads it.
    """
    done = 0
    while count is None or done < count:
        try:
            if not done:
                print(f"Tracing... Output every {interval:g} secs. Hit Ctrl-C to end", flush=True)
            time.sleep(interval)
        except (KeyboardInterrupt, Interrupted):
            yield
            raise
        done += 1
        yield


def check_choice(value: str, choices: tuple[str, ...], option: str) -> str:
    """``value`` if it is one of ``choices``, else one line naming the option."""
    if value not in choices:
        raise InputError(f"one of {', '.join(choices)}, not {value!r}", obj=option)
    return value
