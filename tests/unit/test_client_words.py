"""The Python client spells statuses and policies as the server does: it keeps copies of
the enums on purpose (it depends on nothing of the server), and this keeps them from
drifting apart."""

from __future__ import annotations

from enum import StrEnum

import pytest
from kairos_client import enums as client

from common import schedule, states
from services.api import schemas

PAIRS: list[tuple[type[StrEnum], type[StrEnum]]] = [
    (client.JobStatus, states.JobStatus),
    (client.ExecutionStatus, states.ExecutionStatus),
    (client.MisfirePolicy, schedule.MisfirePolicy),
    (client.OverlapPolicy, schedule.OverlapPolicy),
    (client.CallbackState, schemas.CallbackState),
]


@pytest.mark.parametrize(("mine", "servers"), PAIRS, ids=lambda e: e.__name__)
def test_the_clients_words_are_the_servers(mine: type[StrEnum], servers: type[StrEnum]) -> None:
    assert [m.value for m in mine] == [s.value for s in servers]
