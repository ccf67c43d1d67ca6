"""A view's values as JSON holds them, spelled as ``dump`` spells them: what ``diff`` prints,
and how an error names a key."""

from __future__ import annotations

import json
import math

__all__ = ["json_text", "key_text", "plain"]


def plain(value):
    """``value`` (of a view) as JSON can hold it: raw bytes as bpftool's ``["0x01",…]``,
    non-finite floats as ``"NaN"``/``"Infinity"``."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return [f"0x{b:02x}" for b in value]
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)  # "NaN", "Infinity", "-Infinity"
    return value


def json_text(value) -> str:
    """``value`` as compact JSON (``{"saddr":"10.0.0.1","dport":80}``)."""
    return json.dumps(plain(value), separators=(",", ":"))


def key_text(codec, keys, row: int) -> str:
    """Row ``row`` of the stored ``keys`` (``(n, size)`` uint8) as ``key K``, the key shown
    by ``codec`` as compact JSON: how an error names an entry."""
    return f"key {json_text(codec.values(keys[row:row + 1].copy())[0])}"
