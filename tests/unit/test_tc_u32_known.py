"""The packer's u32 knowledge on messages encoded from tc lines (``dev lo``: no kernel state is
read): which key node adds get a predicted handle instead of an echo, and which lines end that.
The kernel's side — that the predictions are its numbers — is attacked against ``tc -b`` in
``tests/kernel/test_tc_dropin.py``."""

from __future__ import annotations

import pytest

from bpfbatch.tc import specs as S
from bpfbatch.tc.message import Message, undo_of
from bpfbatch.tc.parse import parse_command
from bpfbatch.tc.resolve import Resolver
from bpfbatch.tc.u32_known import U32Known, predicted_delete

PREFIX = "filter add dev lo ingress protocol ip prio 1"
CREATE = f"{PREFIX} handle 1: u32 divisor 16"


@pytest.fixture(scope="module")
def encode():
    resolve = Resolver()
    yield lambda line: Message(*parse_command(line).message(resolve))
    resolve.close()


def _add(encode, bucket: int, extra: str = "") -> Message:
    return encode(f"{PREFIX} {extra}u32 ht 1:{bucket:x}: match ip dst 10.0.0.1/32")


def _predicted(known: U32Known, message: Message) -> int | None:
    """The handle ``known`` predicts for ``message`` (None: none; the undo is the echo's or,
    for a line naming its handle, that handle's)."""
    undo, _risky = known.key_node(message, undo_of(message))
    known.packed(undo.u32_instance)
    if undo.slot is None:
        return None
    assert not undo.echo and not undo.messages
    return undo.handle


def test_numbers_from_0x800_per_bucket_once_the_create_is_handed_over(encode):
    known = U32Known(predict=True)
    known.irreversible(encode(CREATE))
    assert _predicted(known, _add(encode, 2)) is None  # the create may still fail
    known.handed_over()
    assert [_predicted(known, _add(encode, b)) for b in (2, 2, 3, 2)] == \
        [0x102800, 0x102801, 0x103800, 0x102802]


def test_a_named_handle_ends_the_table_a_delete_ends_everything(encode):
    known = U32Known(predict=True)
    known.irreversible(encode(CREATE))
    known.irreversible(encode(f"{PREFIX} handle 2: u32 divisor 16"))
    known.handed_over()
    assert _predicted(known, _add(encode, 0, "handle 1:0:5 ")) is None
    assert _predicted(known, _add(encode, 0)) is None
    assert _predicted(known, encode(f"{PREFIX} u32 ht 2:0: match ip dst 10.0.0.1/32")) == 0x200800
    known.irreversible(encode(f"{PREFIX} handle 2:0:800 u32 ht 2:0: match ip dst 10.0.0.2/32"
                              .replace("filter add", "filter replace")))
    assert _predicted(known, encode(f"{PREFIX} u32 ht 2:0: match ip dst 10.0.0.1/32")) is None


def test_only_a_u32_divisor_makes_a_table(encode):
    known = U32Known(predict=True)
    known.irreversible(encode("filter add dev lo ingress protocol ip prio 1 handle 0x100000 fw "
                              "action mirred egress redirect dev lo"))  # fw's attribute 4: ACT
    known.handed_over()
    assert _predicted(known, _add(encode, 0)) is None


def test_no_prediction_with_force_at_a_root_or_past_2047_adds(encode):
    forced = U32Known(predict=False)
    forced.irreversible(encode(CREATE))
    forced.handed_over()
    assert _predicted(forced, _add(encode, 0)) is None
    known = U32Known(predict=True)
    known.irreversible(encode(f"{PREFIX} handle 800: u32 divisor 16"))
    known.irreversible(encode(CREATE))
    known.handed_over()
    assert _predicted(known, encode(f"{PREFIX} u32 ht 800:0: match ip dst 10.0.0.1/32")) is None
    handles = [_predicted(known, _add(encode, 1)) for _ in range(2048)]
    assert handles[2046] == 0x101FFE and handles[2047:] == [None]


def test_refused_adds_before_it_in_its_bucket_lower_the_handle(encode):
    known = U32Known(predict=True)
    known.irreversible(encode(CREATE))
    known.handed_over()
    add = _add(encode, 4)
    for _ in range(3):
        undo, _risky = known.key_node(add, undo_of(add))
    assert undo.handle == 0x104802
    delete = predicted_delete(add, undo, 2)
    assert delete.msg_type == S.Msg.DELTFILTER
    assert S.TCMSG.unpack_from(delete.body, 0) == (0, 1, 0x104800, *S.TCMSG.unpack_from(add.body, 0)[3:])
