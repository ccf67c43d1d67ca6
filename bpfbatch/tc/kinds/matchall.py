"""matchall (``f_matchall.c``): actions, classid, skip_hw/skip_sw."""

from __future__ import annotations

from .. import rules as R
from ..grammar import Words, classifier_flag
from .common import classifier_options

NAMES = ("matchall",)


def parse_filter(w: Words) -> R.Matchall:
    return R.Matchall(**classifier_options(w, "matchall", classifier_flag))
