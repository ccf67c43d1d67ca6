"""The ``bpfbatch`` command: the typer app with its lazy command registry (:mod:`.app`),
shared options (:mod:`.options`), and one module per command group.

:func:`main` is the only place that turns a :class:`~bpfbatch.errors.BpfBatchError` into an
exit status and the one-line ``bpfbatch: error: ...`` message; command modules stay thin
(check options → call the library → render).
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Sequence

from ..errors import BpfBatchError, Interrupted, OutputError, errno_name
from .app import app

__all__ = ["app", "main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point (``argv``: the arguments, default ``sys.argv[1:]``): click
    handles usage errors, we handle ours."""
    try:
        app(args=list(argv) if argv is not None else None, prog_name="bpfbatch")
    except OutputError as exc:
        if exc.errno == errno.EPIPE:  # the reader (e.g. `head`) went away: nothing to say
            sys.exit(1)
        print(f"bpfbatch: error: {exc}", file=sys.stderr)
        sys.exit(1)
    except BpfBatchError as exc:
        from .options import as_flags

        print(f"bpfbatch: error: {as_flags(exc)}", file=sys.stderr)
        sys.exit(1)
    except Interrupted as exc:  # a command stopped by SIGINT/SIGTERM/SIGHUP, saying what it did
        print(f"bpfbatch: {exc}", file=sys.stderr)
        sys.exit(exc.exit_status)
    except BrokenPipeError:
        # The reader (e.g. `head`) went away; silence the interpreter's flush at exit.
        sys.stderr.close()
        sys.exit(1)
    except OSError as exc:  # writing the output failed (full disk, I/O error)
        name = errno_name(exc.errno) if exc.errno else "EIO"
        print(f"bpfbatch: error: {exc.filename or 'output'}: {exc.strerror or exc} ({name})",
              file=sys.stderr)
        sys.exit(1)
