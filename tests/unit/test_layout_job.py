"""layout.job reads a registered function's first annotation itself (not through
typing.get_type_hints, for start-up): it must pick the class singledispatch would."""

from __future__ import annotations

import typing

import pytest

from bpfbatch.records import cpusum, decoding, encode, fill, layout, template, typedjson, values


def _first_hint(func):
    return next(iter(typing.get_type_hints(func).values()))


def test_every_registration_in_the_records_modules_names_the_class_singledispatch_would():
    jobs = [obj for module in (layout, values, encode, fill, template, decoding, cpusum,
                               typedjson)
            for obj in vars(module).values() if isinstance(obj, layout.job)]
    checked = 0
    for job in jobs:
        for cls, func in job._generic.registry.items():
            if cls is object or not getattr(func, "__annotations__", None):
                continue
            first = next(iter(func.__annotations__.values()))
            if isinstance(first, str) and first.replace(".", "_").isidentifier():
                assert _first_hint(func) is cls, (job.__name__, func)
                checked += 1
    assert checked > 50


def _plain(node: layout.Int, rows): ...
def _dotted(node: layout.CharArray): ...
def _union(node: layout.Int | layout.Bits): ...
def _bare(node): ...


@pytest.mark.parametrize("func, expected", [(_plain, layout.Int), (_dotted, layout.CharArray),
                                            (_union, None), (_bare, None)])
def test_the_annotation_reader(func, expected):
    assert layout._annotated_class(func) is expected


def test_a_union_annotation_is_left_to_singledispatch():
    @layout.job
    def kind(node) -> str:
        return "other"

    @kind.register
    def _(node: layout.Int | layout.Bits) -> str:
        return "integer"

    assert kind.dispatch(layout.Bits) is kind.dispatch(layout.Int) is not kind.dispatch(object)
