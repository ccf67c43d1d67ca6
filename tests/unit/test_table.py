"""formats.table draws tabulate's simple table itself for plain one-line cells: the output
must be tabulate's, byte for byte, for any table (the rest it hands to tabulate)."""

from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from tabulate import tabulate

from bpfbatch.formats import table

#: Cells as the renderers hand them over: numbers, booleans and text — plain, or padded,
#: multi-line, wide, with escape sequences or tabulate's separating-line mark — and None.
plain = st.text("abcxyzABC019._-[],:= ", max_size=12)
odd = st.one_of(st.sampled_from(["", " x", "x ", "a\nb", "\t", "\x1b[31m1\x1b[0m", "\x01",
                                 "日本", "ü", "True", "-5", "1e3"]),
                st.text(st.characters(max_codepoint=0x7F), max_size=12), st.text(max_size=4))
numbers = st.one_of(st.integers(-2**64, 2**64), st.floats(allow_nan=True), st.booleans())
plain_cells = st.one_of(numbers, plain.map(str.strip))
any_cells = st.one_of(numbers, plain, odd, st.none())


@st.composite
def tables(draw):
    cells, names = draw(st.sampled_from([(plain_cells, plain), (any_cells, st.one_of(plain, odd))]))
    width = draw(st.integers(1, 5))
    headers = draw(st.lists(names, min_size=width, max_size=width))
    rows = draw(st.lists(st.lists(cells, min_size=width, max_size=width), min_size=1, max_size=6)
                | st.just([]))
    right = draw(st.lists(st.booleans(), min_size=width, max_size=width))
    return rows, headers, right


def tabulated(rows, headers, right) -> str:
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True,
                    colalign=["right" if r else "left" for r in right] if rows else None)


def outcome(draw, *args):
    """The text, or the exception's type (tabulate raises on its separating-line mark)."""
    try:
        return draw(*args)
    except Exception as exc:  # noqa: BLE001 - compared, not hidden
        return type(exc)


@settings(max_examples=1500, deadline=None)
@given(tables())
@example(([[1, "flows", 2.5]], ["id", "name", "value.a"], [True, False, True]))
@example(([[12345678901234567890, "x"]], ["k", "a long header"], [True, False]))
@example(([["x "], [" y"]], ["h"], [False]))
def test_the_simple_table_is_tabulates(case):
    rows, headers, right = case
    event("drawn here" if table._draw(rows, headers, right) is not None else "by tabulate")
    assert outcome(table.simple, rows, headers, right) == outcome(tabulated, rows, headers, right)


def test_a_plain_table_is_drawn_without_tabulate():
    rows = [[1, "hash", "flows", True, 0.5], [300, "array", "x", False, -1.25]]
    headers = ["id", "type", "name", "frozen", "age"]
    right = [True, False, False, False, True]
    assert table._draw(rows, headers, right) == tabulated(rows, headers, right)
