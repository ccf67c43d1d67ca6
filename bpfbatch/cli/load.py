"""``load``: write a file's records into a map in batches.

Declared as data (:class:`~.options.Commands`) so that the thin entry point (:mod:`.fastpath`)
runs it without importing typer: for a small file that import was a third of the command's
time. Thin: open the map, read the input (all of it, before the first syscall), call
:func:`bpfbatch.map.whole.load`, report.
"""

from __future__ import annotations

from .. import interrupts
from ..errors import InputError
from ..interrupts import Tally
from ..map.cursor import check_batch_size
from ..map.handle import require
from .options import (
    BATCH_SIZE,
    DECODE,
    INPUT_FILE,
    INPUT_FORMAT,
    MAP,
    Commands,
    Option,
    open_map,
    record_codecs,
    say,
)
from .progress import progress

commands = Commands()


@commands.command(
    "load", INPUT_FILE, *MAP, INPUT_FORMAT, BATCH_SIZE,
    Option("if_absent", "--if-absent", kind=bool, default=False,
           help="Only keys not in the map (BPF_NOEXIST semantics)."),
    Option("if_present", "--if-present", kind=bool, default=False,
           help="Only keys already in the map (BPF_EXIST semantics)."),
    Option("per_key", "--per-key", kind=bool, default=False,
           help="With --if-absent/--if-present: one exact syscall per record instead of a "
                "racy key snapshot plus batches."),
    Option("default_zero", "--default-zero", kind=bool, default=False,
           help="A struct field a record leaves out is 0 (without it, an error naming "
                "file:line and the field)."),
    DECODE,
    Option("jobs", "--jobs", kind=int, minimum=1,
           help="Writers side by side for a large load into a hash or array map (default: "
                "one per CPU, at most 4). With more than one, the records a failing load "
                "applied are not the first ones of the file."),
)
def load(file: str, map_id: int | None, pinned: str | None, name: str | None,
         fmt: str | None, batch_size: int, if_absent: bool, if_present: bool, per_key: bool,
         default_zero: bool, decode: list[str] | None, jobs: int | None) -> None:
    """Write records from FILE into the map in batches.

    The whole input is parsed and encoded first: bad input names file:line and changes
    nothing. The kernel's batch update has no BPF_NOEXIST/BPF_EXIST, so --if-absent and
    --if-present snapshot the map's keys with one pass and batch-write the records that pass
    the test; a key another writer creates or deletes in between is overwritten (re-created).
    --per-key closes that race at one syscall per record.
    """
    check_batch_size(batch_size)
    from ..map import whole
    from ..map.whole import Existing, LoadError, RecordError
    from ..formats import read

    if if_absent and if_present:
        raise InputError("choose one of --if-absent and --if-present", obj="--if-absent")
    if per_key and not (if_absent or if_present):
        raise InputError("only applies with --if-absent or --if-present", obj="--per-key")
    only = Existing.ABSENT if if_absent else Existing.PRESENT if if_present else Existing.ANY
    tally = Tally()
    with interrupts.stopping(lambda: f"{tally.applied} entries loaded", tally), \
            open_map(map_id, pinned, name, read_only=False) as m:
        require(m.info, "load")  # before reading the input: its errors would hide the reason
        with progress(f"{m.info.label} reading {file}", "records"):
            codecs = record_codecs(m.info, decode, default_zero=default_zero)
            records = read.read_records(file, m.info, fmt=fmt, codecs=codecs)
        try:
            with progress(f"{m.info.label} loading {records.count} records", ""):
                result = whole.load(m, records.keys, records.values, records.count, only=only,
                                    per_key=per_key, batch_size=batch_size, tally=tally,
                                    jobs=jobs)
        except LoadError as exc:
            exc.message += f" (record at {records.where(exc.index)})"
            raise
        except RecordError as exc:
            exc.obj = records.where(exc.index)
            raise
    skipped = f", {result.skipped} skipped" if only is not Existing.ANY else ""
    say(f"{m.info.label}: {result.applied} entries loaded{skipped}")
