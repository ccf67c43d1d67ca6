"""The one output pipeline: limit, early close of the source, flushing, format checks."""

import io
import json
import struct

import pytest

from bpfbatch._sys.abi import MapType
from bpfbatch.errors import InputError
from bpfbatch.map.cursor import Batch
from bpfbatch.map.handle import MapInfo
from bpfbatch.formats import pipeline

RAW = MapInfo(id=7, type=MapType.HASH, name="p", key_size=4, value_size=8, max_entries=64,
              flags=0, btf_id=0, btf_key_type_id=0, btf_value_type_id=0)


def batches(sizes, produced):
    """Batches of consecutive u32 keys (value = key) of the given sizes; ``produced`` records
    what was handed out and whether the source was closed."""
    start = 0
    try:
        for n in sizes:
            keys = b"".join(struct.pack("<I", k) for k in range(start, start + n))
            values = b"".join(struct.pack("<Q", k) for k in range(start, start + n))
            produced.append(n)
            yield Batch(n, memoryview(keys), memoryview(values))
            start += n
    finally:
        produced.append("closed")


def keys_of(text: bytes) -> list[int]:
    return [int.from_bytes(bytes(int(b, 16) for b in json.loads(line)["key"]), "little")
            for line in text.splitlines()]


@pytest.mark.parametrize("limit, want, read", [(None, 12, 12), (0, 0, 3), (5, 5, 6), (6, 6, 6),
                                               (7, 7, 9), (100, 12, 12)])
def test_limit_cuts_exactly_and_reads_no_further(limit, want, read):
    produced, out = [], io.BytesIO()
    written = pipeline.run(batches([3, 3, 3, 3], produced), pipeline.Output("jsonl", RAW, out),
                           limit=limit)
    assert written == want
    assert keys_of(out.getvalue()) == list(range(want))
    assert produced[-1] == "closed"
    # Nothing is read past the batch that reached the limit.
    assert sum(n for n in produced if n != "closed") == read


def test_negative_limit_names_the_parameter():
    with pytest.raises(InputError, match="limit: must not be negative"):
        pipeline.run(iter([]), pipeline.Output("json", RAW, io.BytesIO()), limit=-1)


def test_flush_each_flushes_every_batch_before_the_next():
    class Flushes(io.BytesIO):
        def __init__(self):
            super().__init__()
            self.flushed_at = []

        def flush(self):
            self.flushed_at.append(len(self.getvalue()))

    out = Flushes()
    sink = pipeline.Output("jsonl", RAW, out, flush_each=True)
    for b in batches([2, 2], []):
        sink.write(b)
        assert out.flushed_at[-1] == len(out.getvalue())
    assert len(out.flushed_at) == 2


def test_closing_twice_writes_one_trailer():
    """A command closes its output again when a signal stopped it, and the signal may have
    been held back during the first close (dump): the document still ends once."""
    out = io.BytesIO()
    sink = pipeline.Output("json", RAW, out)
    for b in batches([2], []):
        sink.write(b)
    sink.close()
    sink.close()
    assert len(json.loads(out.getvalue())) == 2


def test_unknown_format_is_refused_naming_the_source():
    with pytest.raises(InputError, match="--output: unknown format 'yaml' .*bpftool-json"):
        pipeline.check_format("yaml", "--output")
    assert pipeline.check_format("csv") == "csv"
