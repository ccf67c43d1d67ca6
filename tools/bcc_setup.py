"""Make bcc usable on this machine for the tests and benchmarks, idempotently. A dev-only
helper: it creates links under ``/lib/modules``, which the package itself must never do.

bcc compiles its C text against the running kernel's headers, which it finds through
``/lib/modules/$(uname -r)/build`` and ``.../source``. A kernel without a matching Debian
headers package (a custom or cloud kernel) has neither; map-only programs compile fine against
Debian's ``linux-headers-*-amd64`` / ``linux-headers-*-common`` pair, so the links are pointed
there — only when missing, never replacing what exists.
"""

from __future__ import annotations

import glob
import os

_HEADERS = "/usr/src"


def _newest(pattern: str) -> str | None:
    found = sorted(glob.glob(os.path.join(_HEADERS, pattern)))
    return found[-1] if found else None


def ensure_kernel_headers() -> bool:
    """Create the ``build`` and ``source`` links if they are missing and Debian's headers are
    installed. Returns whether both links exist afterwards."""
    modules = os.path.join("/lib/modules", os.uname().release)
    targets = {"build": _newest("linux-headers-*-amd64"), "source": _newest("linux-headers-*-common")}
    for link, target in targets.items():
        path = os.path.join(modules, link)
        if os.path.lexists(path) or target is None:
            continue
        os.makedirs(modules, exist_ok=True)
        try:
            os.symlink(target, path)
        except FileExistsError:
            pass  # another process arranged it meanwhile
    return all(os.path.exists(os.path.join(modules, link)) for link in targets)


def load_bcc():
    """The ``bcc`` module, or ``None`` when it is not installed or the headers are missing."""
    if not ensure_kernel_headers():
        return None
    try:
        import bcc
    except ImportError:
        return None
    return bcc
