"""``record``: a ring buffer's or a perf event array's events written as they come, typed from BTF, through the same formats and delivery step as ``drain``.

Thin: check the options, open the map and its stream (:func:`bpfbatch.events.open_stream`),
find the type (:mod:`bpfbatch.events.types`), run the recorder
(:mod:`bpfbatch.events.recording`), report. Loss and lag go to stderr at the end, and every
second with ``-v``.
"""

from __future__ import annotations

from .. import interrupts
from .._sys.abi import MapType
from ..errors import InputError, Interrupted
from . import options
from .options import DECODE, MAP, OUTPUT_FORMATS, Commands, Option, check_output, open_map, say

commands = Commands()


@commands.command(
    "record", *MAP,
    Option("record_type", "--type", metavar="TYPE",
           help="The events' type: 'struct event' (looked up in the BTF of the programs that "
                "use the map, or of --btf), or a C type (u64, char[16]). Without it: raw "
                "bytes."),
    Option("btf", "--btf", metavar="FILE", help="An object file (.o) whose BTF has --type."),
    Option("output", "-o", "--output", default="jsonl", help=OUTPUT_FORMATS,
           complete="output_formats"),
    Option("file", "-w", "--write", metavar="FILE",
           help="Write to FILE (and FILE's rotations) instead of stdout."),
    Option("count", "--count", kind=int, minimum=1, help="Stop after N events."),
    Option("duration", "--duration", metavar="D", help="Stop after D (30s, 500ms, 1h)."),
    Option("rotate_size", "--rotate-size", metavar="SIZE",
           help="With -w: start a new file (FILE.1.ext, ...) once one reaches SIZE (512K, "
                "10M, 1G)."),
    Option("follow", "--follow", "-f", kind=bool, default=False,
           help="Keep recording until a signal (default: what is waiting now, or until "
                "--count/--duration)."),
    Option("fsync", "--fsync", kind=bool, default=False,
           help="A batch is committed only once it is on disk."),
    Option("order_by", "--order-by", metavar="FIELD",
           help="perf_event_array: merge the CPUs' events in the order of this integer field "
                "of --type (a timestamp), within what each pass takes."),
    Option("pages", "--pages", kind=int, minimum=1,
           help="perf_event_array: data pages per CPU ring, a power of two (default 64)."),
    DECODE,
)
def record(map_id: int | None, pinned: str | None, name: str | None, record_type: str | None,
           btf: str | None, output: str, file: str | None, count: int | None,
           duration: str | None, rotate_size: str | None, follow: bool, fsync: bool,
           order_by: str | None, pages: int | None, decode: list[str] | None) -> None:
    """Write a ring buffer's or perf event array's events as they come, typed from BTF, each
    batch committed once written.

    Each pass takes every event waiting, writes it and only then advances the ring's consumer
    position: a signal stops it after the batch in hand is written and committed; a full disk
    or a closed pipe leaves every event not completely written in the ring, for the next
    record; SIGKILL repeats at most the batch it hit, never loses one. Parquet needs -w: a
    file's events are committed once its footer is written (so SIGKILL repeats at most the
    file it hit). One reader per map: a second record on the same map is refused (EBUSY)
    while the first runs. Records print as drain prints a queue's elements
    ({"key":[],"value":...}). A perf event array's rings are the reader's
    own, one per CPU: what is in them when record exits is gone with them (the kernel's lost
    records are counted per CPU); --order-by merges the CPUs by a timestamp field within each
    pass."""
    check_output(output)
    seconds = _duration(duration)
    size = _size(rotate_size, file)
    if btf is not None and record_type is None:
        raise InputError("names the file that has --type's type; give --type", obj="--btf")
    from ..events import open_stream
    from ..events.recording import Recorder, run
    from ..events.types import event_type

    recorder = None
    with interrupts.stopping(lambda: f"{recorder.recorded if recorder else 0} events recorded"), \
            open_map(map_id, pinned, name, read_only=False) as m:
        kind = None if record_type is None else event_type(m.info, record_type, btf)
        with open_stream(m, **_perf_options(m.info, kind, order_by, pages)) as stream:
            recorder = Recorder(stream, m.info, output, record_type=kind, path=file,
                                rotate_size=size, decode=decode, fsync=fsync)
            report = (lambda stats: say(f"{m.info.label}: {recorder.recorded} events "
                                        f"recorded so far; {stats.summary()}")) \
                if options.VERBOSE else None
            try:
                run(recorder, count=count, duration=seconds, follow=follow, report=report)
            except Interrupted as exc:
                exc.obj = m.info.label
                say(f"{m.info.label}: {stream.stats.summary()}")
                raise
    say(f"{m.info.label}: {recorder.recorded} events recorded; {stream.stats.summary()}")


def _perf_options(info, kind, order_by: str | None, pages: int | None) -> dict:
    """The perf reader's options (``--order-by``, ``--pages``), refused for another map."""
    given = {"--order-by": order_by, "--pages": pages}
    if info.type != MapType.PERF_EVENT_ARRAY:
        for flag, value in given.items():
            if value is not None:
                raise InputError(f"is for perf_event_array maps; {info.label} is a "
                                 f"{info.type_name}", obj=flag)
        return {}
    if pages is not None and pages & (pages - 1):
        raise InputError(f"must be a power of two, got {pages}", obj="--pages")
    options: dict = {} if pages is None else {"page_count": pages}
    if order_by is not None:
        if kind is None:
            raise InputError("orders by a field of the events' type; give --type",
                             obj="--order-by")
        from ..events.perf import order_field
        from ..records.codec import codec_for

        btf, type_id = kind
        dtype = codec_for(btf, type_id, btf.size_of(type_id)).dtype
        order_field(order_by, dtype, "--order-by")  # a usage error, before the rings open
        options.update(order_by=order_by, dtype=dtype)
    return options


def _duration(text: str | None) -> float | None:
    if text is None:
        return None
    from ..exec.predicate import parse_duration

    return parse_duration(text, "--duration") / 1e9


def _size(text: str | None, file: str | None) -> int | None:
    if text is None:
        return None
    if file is None:
        raise InputError("rotates the files of -w FILE; give -w", obj="--rotate-size")
    from ..tcp_mmap.config import parse_size

    size = parse_size(text, "--rotate-size")
    if size <= 0:
        raise InputError(f"must be positive, got {text!r}", obj="--rotate-size")
    return size
