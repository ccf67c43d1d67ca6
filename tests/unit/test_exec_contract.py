"""map_exec.h's constants are read from the objects' BTF, never retyped: checked here against
bpftool's reading of the same objects, and a BTF without them is one line naming the object."""

import json
import shutil
import subprocess

import pytest

from bpfbatch.btf import VOID, Btf, BtfType, Kind
from bpfbatch.errors import InputError
from bpfbatch.exec import contract, predicate, walker
from bpfbatch.exec.contract import package_contract, read_contract


def bpftool_types(path) -> list[dict]:
    """The object's BTF types as ``bpftool -j btf dump file`` reads them."""
    if shutil.which("bpftool") is None:
        pytest.skip("needs bpftool")
    dump = subprocess.run(["bpftool", "-j", "btf", "dump", "file", str(path)], check=True,
                          capture_output=True, text=True, timeout=60).stdout
    return json.loads(dump)["types"]


@pytest.mark.parametrize("obj", ["map_exec", "example_filter"])
def test_contract_is_what_bpftool_reads_in_the_object(obj):
    path = walker.FILTER_INCLUDE_DIR / f"{obj}.bpf.o"
    types = bpftool_types(path)
    by_id = {t["id"]: t for t in types}
    named = {(t["kind"], t.get("name")): t for t in types}

    def enum(name):
        return {v["name"]: v["val"] for v in named[("ENUM", name)]["values"]}

    from bpfbatch.loader import BpfObject

    with BpfObject(path) as o:
        got = read_contract(o.btf, o.label)
    limits = enum("map_exec_limit")
    assert (got.max_terms, got.max_cpus, got.max_key_size, got.max_value_size) == (
        limits["MAP_EXEC_MAX_TERMS"], limits["MAP_EXEC_MAX_CPUS"],
        limits["MAP_EXEC_MAX_KEY_SIZE"], limits["MAP_EXEC_MAX_VALUE_SIZE"])
    assert got.ops == {op: enum("map_exec_op")[name] for op, name in contract.OP_NAMES.items()}
    assert got.actions == {a: enum("map_exec_action")[name]
                           for a, name in contract.ACTION_NAMES.items()}
    assert got.out_full == enum("map_exec_stop")["MAP_EXEC_OUT_FULL"]
    # The terms table of the context struct is as long as the limit says.
    terms = next(m for m in named[("STRUCT", "map_exec_args")]["members"]
                 if m["name"] == "terms")
    assert by_id[terms["type_id"]]["nr_elems"] == got.max_terms


def test_every_operator_and_action_has_a_distinct_code():
    got = package_contract()
    assert set(got.ops) == set(predicate.OPS) and len(set(got.ops.values())) == len(got.ops)
    assert set(got.actions) == set(walker.ACTIONS)
    assert len(set(got.actions.values())) == len(got.actions)


@pytest.mark.parametrize("types, words", [
    ([VOID], "the object lacks enum map_exec_limit in its BTF"),
    ([VOID, BtfType(1, Kind.ENUM, "map_exec_limit", 4,
                    values=(("MAP_EXEC_MAX_TERMS", 16), ("MAP_EXEC_MAX_CPUS", 1024),
                            ("MAP_EXEC_MAX_KEY_SIZE", 512)))],
     "enum map_exec_limit has no MAP_EXEC_MAX_VALUE_SIZE"),
])
def test_an_object_without_the_enums_is_one_line_naming_it(types, words):
    with pytest.raises(InputError) as caught:
        read_contract(Btf(types), "old.bpf.o")
    assert caught.value.obj == "old.bpf.o"
    assert words in str(caught.value) and "\n" not in str(caught.value)
