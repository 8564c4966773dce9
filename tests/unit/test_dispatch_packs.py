"""Dispatch packs: executions grouped by worker into messages a worker reads back."""

from __future__ import annotations

import json

import pydantic
import pytest

from common.messages import DispatchMessage
from services.dispatcher.routing.dispatch import Assignment, pack_dispatches
from services.worker.packs import DispatchPacking, Unreadable


def assignment(n: int, worker_id: str) -> Assignment:
    return Assignment(
        execution_key=n,
        execution_id=f"e-{n}",
        job_id=n,
        attempt=1,
        trigger_time=1_000,
        handler="demo.noop",
        params_json=f'{{"n": {n}}}',
        worker_id=worker_id,
    )


def test_packs_hold_one_worker_each_and_no_more_than_the_limit() -> None:
    sent = [assignment(n, "w1" if n % 3 else "w2") for n in range(10)]
    packs = pack_dispatches(sent, 5_000, limit=3)
    routed = [
        (m.routing_key, [u.execution_id for u in DispatchPacking().unpack(m.body)])
        for m in packs.messages
    ]
    assert routed == [
        ("w2", ["e-0", "e-3", "e-6"]),
        ("w2", ["e-9"]),
        ("w1", ["e-1", "e-2", "e-4"]),
        ("w1", ["e-5", "e-7", "e-8"]),
    ]
    first = DispatchPacking().unpack(packs.messages[2].body)[0]
    assert isinstance(first, DispatchMessage)
    assert (first.params, first.ref, first.dispatched_at) == ({"n": 1}, 1, 5_000)


def test_a_returned_pack_names_every_execution_in_it() -> None:
    packs = pack_dispatches([assignment(n, f"w{n % 2}") for n in range(4)], 0, limit=50)
    returned = {m.message_id for m in packs.messages if m.routing_key == "w1"}
    assert packs.not_routed(returned) == {"e-1", "e-3"}
    assert pack_dispatches([], 0).messages == []


def test_a_pack_reads_back_as_it_was_packed() -> None:
    lone = DispatchMessage(
        execution_id="e-1",
        job_id=1,
        attempt=1,
        trigger_time=0,
        handler="demo.noop",
        params={},
        dispatched_at=0,
    )
    packing = DispatchPacking()
    assert packing.unpack(packing.repack([lone, lone])) == [lone, lone]
    with pytest.raises(pydantic.ValidationError):
        packing.unpack(lone.model_dump_json().encode())  # only packs are sent


def test_an_execution_that_cannot_be_read_is_named_and_the_rest_still_run() -> None:
    good = {"v": 1, "execution_id": "e-2", "job_id": 2, "attempt": 1, "trigger_time": 0}
    good |= {"handler": "demo.noop", "params": {}, "dispatched_at": 0}
    newer = {"v": 2, "execution_id": "e-1", "job_id": 1, "ref": 11, "shape": "unknown"}
    nameless = {"v": 1, "job_id": 3}
    body = json.dumps({"v": 1, "executions": [newer, good, nameless]}).encode()
    packing = DispatchPacking()
    unreadable, readable = packing.unpack(body)
    assert isinstance(unreadable, Unreadable) and isinstance(readable, DispatchMessage)
    assert (unreadable.execution_id, unreadable.job_id, unreadable.ref) == ("e-1", 1, 11)
    assert "handler" in unreadable.error
    assert readable.execution_id == "e-2"
    assert json.loads(packing.repack([unreadable]))["executions"] == [newer]


@pytest.mark.parametrize(
    "body", [b"{}", b'{"v":1,"executions":[]}', b"not json", b'{"executions":[{"job_id":1}]}']
)
def test_a_body_that_is_no_dispatch_is_refused(body: bytes) -> None:
    with pytest.raises(pydantic.ValidationError):
        DispatchPacking().unpack(body)


def raw_item(n: int, params: str) -> str:
    """One execution as the dispatcher writes it: the params are the stored JSON text."""
    return (
        f'{{"v":1,"execution_id":"e-{n}","job_id":{n},"attempt":1,"trigger_time":0,'
        f'"handler":"demo.echo","params":{params},"dispatched_at":0,"ref":{100 + n}}}'
    )


POISON = {
    3: "[" * 5_000 + "]" * 5_000,  # deeper than any recursive parser goes
    10: '{"a":' * 250 + "1" + "}" * 250,
    20: '{"name":"\\ud800"}',  # a lone surrogate: no UTF-8 text can carry it
    30: '{"x":"\\udc00 and \\ud83d"}',
}


def test_one_unreadable_execution_in_a_pack_of_fifty_leaves_the_others_readable() -> None:
    items = [raw_item(n, POISON.get(n, f'{{"n":{n}}}')) for n in range(50)]
    body = ('{"v":1,"executions":[' + ",".join(items) + "]}").encode()
    units = DispatchPacking().unpack(body)
    assert [u.execution_id for u in units] == [f"e-{n}" for n in range(50)]
    unreadable = [u for u in units if isinstance(u, Unreadable)]
    assert [(u.execution_id, u.job_id, u.ref) for u in unreadable] == [
        (f"e-{n}", n, 100 + n) for n in sorted(POISON)
    ]
    assert all(u.error for u in unreadable)
    readable = [u for u in units if isinstance(u, DispatchMessage)]
    assert [u.params for u in readable[:3]] == [{"n": 0}, {"n": 1}, {"n": 2}]


def test_an_unreadable_execution_travels_again_as_it_came() -> None:
    item = raw_item(3, POISON[3])
    packing = DispatchPacking()
    [unit] = packing.unpack(('{"v":1,"executions":[' + item + "]}").encode())
    assert isinstance(unit, Unreadable)
    good = DispatchMessage.model_validate_json(raw_item(4, "{}"))
    again = packing.unpack(packing.repack([unit, good]))
    assert again == [unit, good]
