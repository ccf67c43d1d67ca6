"""The ``bpfbatch`` command: one typer app, one sub-module per command group.

This is the only place that turns a :class:`~bpfbatch.errors.BpfBatchError` into an exit
status and the one-line ``bpfbatch: error: ...`` message; command modules stay thin (parse →
call the library → render).
"""

from __future__ import annotations

import sys

import typer

from .. import _libbpf
from ..errors import BpfBatchError, errno_name

app = typer.Typer(
    name="bpfbatch",
    help="Move data across the user/kernel boundary in batches: BPF maps and tc rules.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _global_options(
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Show libbpf's log on stderr."),
) -> None:
    if verbose:
        _libbpf.set_log_sink(lambda line: sys.stderr.write(line))


def _register() -> None:
    # Imported for their side effect of adding commands to ``app``.
    from . import bench, demo, exec, maps, tc, top, write  # noqa: F401


_register()


def main() -> None:
    """Console-script entry point: click handles usage errors, we handle ours."""
    if sys.argv[1:2] == ["tc"]:
        from .tc import iproute2_argv

        sys.argv[2:] = iproute2_argv(sys.argv[2:])
    try:
        app()
    except BpfBatchError as exc:
        print(f"bpfbatch: error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # before or outside a command's own reporting
        print("bpfbatch: interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        # The reader (e.g. `head`) went away; silence the interpreter's flush at exit.
        sys.stderr.close()
        sys.exit(1)
    except OSError as exc:  # writing the output failed (full disk, I/O error)
        name = errno_name(exc.errno) if exc.errno else "EIO"
        print(f"bpfbatch: error: {exc.filename or 'output'}: {exc.strerror or exc} ({name})",
              file=sys.stderr)
        sys.exit(1)
