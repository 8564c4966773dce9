"""The address failed authentications are counted under."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from services.api.auth_failures import UNKNOWN_CLIENT, client_address


def _request(host: str | None) -> Request:
    client = None if host is None else (host, 1234)
    return Request({"type": "http", "headers": [], "client": client})


@pytest.mark.parametrize(
    ("peer", "counted_as"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
        ("::ffff:198.51.100.3", "198.51.100.3"),
        ("testclient", "testclient"),
        (None, UNKNOWN_CLIENT),
    ],
)
def test_ipv6_peers_are_counted_by_their_64_and_ipv4_by_their_address(
    peer: str | None, counted_as: str
) -> None:
    assert client_address(_request(peer)) == counted_as
