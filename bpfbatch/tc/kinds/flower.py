"""flower (``f_flower.c``), the subset ``tdc_batch.py`` writes: MACs, flags, classid, actions."""

from __future__ import annotations

from .. import rules as R
from ..grammar import Words, classifier_flag, parse_mac
from .common import classifier_options

NAMES = ("flower",)


def parse_filter(w: Words) -> R.Flower:
    def extra(word: str, opts: dict) -> bool:
        if word in ("src_mac", "dst_mac"):
            opts[word] = w.handle("MAC address", parse_mac)
            return True
        return classifier_flag(word, opts)

    return R.Flower(**classifier_options(w, "flower", extra))
