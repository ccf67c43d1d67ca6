"""Shared test set-up: tests under tests/kernel need root and the real kernel."""

import os
import signal

import pytest


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: runs against the real kernel")
    for item in items:
        if "tests/kernel/" in str(item.fspath):
            item.add_marker(skip)



#: Inherited by every process a test starts: the mask as it is, SIG_IGN as it is.
_INHERITED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)


@pytest.fixture(autouse=True)
def _signals_left_as_found():
    """Every test leaves the worker's signal mask and handlers as it found them (put back, and
    the test fails saying what it changed): a child inherits the mask, so a SIGINT left blocked
    here would make another file's ``record --follow`` deaf to SIGINT — a hang far from its
    cause."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    handlers = {sig: signal.getsignal(sig) for sig in _INHERITED}
    yield
    blocked = signal.pthread_sigmask(signal.SIG_SETMASK, mask) - mask
    changed = [sig for sig, handler in handlers.items() if signal.signal(sig, handler) != handler]
    left = [f"{signal.Signals(sig).name} blocked" for sig in sorted(blocked)] + \
        [f"{signal.Signals(sig).name}'s handler changed" for sig in changed]
    assert not left, "the test left " + ", ".join(left)
