"""layout.job keeps its own registry (singledispatch's register imports typing, which start-up
cannot afford): it must pick the implementation singledispatch would, and read a registered
function's annotation as typing.get_type_hints does."""

from __future__ import annotations

import functools
import typing

import pytest

from bpfbatch.formats import typedjson
from bpfbatch.records import cpusum, decoding, encode, fill, layout, template, values


def _first_hint(func):
    return next(iter(typing.get_type_hints(func).values()))


def test_every_registration_in_the_records_modules_names_the_class_singledispatch_would():
    jobs = [obj for module in (layout, values, encode, fill, template, decoding, cpusum,
                               typedjson)
            for obj in vars(module).values() if isinstance(obj, layout.job)]
    checked = 0
    for job in jobs:
        for cls, func in job._registry.items():
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


def test_an_annotation_naming_no_class_is_refused():
    kind = layout.job(lambda node: "other")
    with pytest.raises(TypeError, match="names no class"):
        kind.register(_union)


class _Unregistered(layout.Node):
    pass


class _UnregisteredArray(layout.CharArray):
    pass


def test_dispatch_is_singledispatchs_over_the_node_classes():
    """For every pair (registered classes, node class) the same implementation."""
    node_classes = [cls for module in (layout, decoding, cpusum) for cls in vars(module).values()
                    if isinstance(cls, type) and issubclass(cls, layout.Node)]
    assert {decoding.Decoded, cpusum.Summed, layout.CharArray} <= set(node_classes)
    node_classes += [_Unregistered, _UnregisteredArray]  # inherit their parents' choice
    for job in (values.values, values.dtype, encode.encoder, fill.fill, template.emit,
                layout.leaf_kind):
        reference = functools.singledispatch(job._registry[object])
        for cls, func in job._registry.items():
            if cls is not object:
                reference.register(cls, func)
        for cls in node_classes:
            assert job.dispatch(cls) is reference.dispatch(cls), (job.__name__, cls)
