"""How the notifier reads a callbacks message, single or a pack, and sends units again."""

from __future__ import annotations

import json

from common.messages import PACK_PREFIX, CallbackMessage, CallbackPack
from services.notifier.pending import CallbackPacking
from services.notifier.shares import ShareKeys


def _message(n: int, alone: bool = True) -> CallbackMessage:
    return CallbackMessage(
        delivery_id=f"msg_{n}",
        app_pk=7,
        url="https://a.example/cb",
        payload=json.dumps({"jobId": n}),
        job_id=n,
        alone=alone,
    )


def _pack(*messages: CallbackMessage) -> bytes:
    return CallbackPack(callbacks=list(messages)).model_dump_json().encode()


PACKING = CallbackPacking(ShareKeys(), clock=lambda: 5.0)


def test_a_pack_is_read_as_its_callbacks_in_order_each_keyed_by_its_host() -> None:
    units = PACKING.unpack(_pack(_message(1), _message(2), _message(3)))
    assert [u.message for u in units] == [_message(1), _message(2), _message(3)]
    assert {u.hosts.domain for u in units} == {"a.example:443"}
    assert {u.arrived for u in units} == {5.0}
    # One of a pack travels again as a message of its own.
    assert CallbackMessage.model_validate_json(units[1].own_body()) == _message(2)


def test_a_single_callback_is_read_and_travels_again_as_it_came() -> None:
    body = _message(1, alone=False).model_dump_json().encode()
    (unit,) = PACKING.unpack(body)
    assert unit.message == _message(1, alone=False)
    assert unit.own_body() == body == PACKING.repack([unit])


def test_one_callback_of_a_pack_that_cannot_be_read_goes_alone_and_the_others_are_read() -> None:
    good = json.loads(_message(1).model_dump_json())
    body = PACK_PREFIX + json.dumps(good).encode() + b',{"delivery_id":"x"}]}'
    first, bad = PACKING.unpack(body)
    assert first.message == _message(1)
    assert bad.message is None and bad.goes_at_once
    assert json.loads(bad.own_body()) == {"delivery_id": "x"}


def test_a_pack_that_is_not_json_is_one_unreadable_callback() -> None:
    body = PACK_PREFIX + b"{nope"
    (unit,) = PACKING.unpack(body)
    assert unit.message is None and unit.own_body() == body


def test_the_rest_of_a_pack_goes_again_as_a_pack_whose_callbacks_are_read_first() -> None:
    units = PACKING.unpack(_pack(_message(1), _message(2), _message(3)))
    again = CallbackPack.model_validate_json(PACKING.repack(units[1:])).callbacks
    assert again == [_message(2, alone=False), _message(3, alone=False)]
    (one,) = PACKING.unpack(PACKING.repack(units[2:]))
    assert one.message == _message(3, alone=False)
