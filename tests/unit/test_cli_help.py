"""The CLI spells out a few library facts so that starting a command does not import the
whole library; these tests keep the two in step."""

import re

from typer.testing import CliRunner

from bpfbatch import tc
from bpfbatch.cli import app
from bpfbatch.cli.maps import OUTPUT_FORMATS
from bpfbatch.records import render


def test_output_help_lists_exactly_the_renderers():
    assert re.split(r", | or ", OUTPUT_FORMATS) == list(render.RENDERERS)


def test_tc_batch_bytes_help_states_the_senders_default():
    result = CliRunner().invoke(app, ["tc", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert f"default {tc.DEFAULT_BATCH_BYTES >> 10} KiB" in result.output
