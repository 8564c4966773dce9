"""A throttled address is refused in front of the application, from memory: no Redis
call, until its Retry-After ends; other addresses and known keys go on."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from prometheus_client import REGISTRY
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from common.errors import AuthThrottledError
from common.keys import RedisKeys
from services.api.auth_failures import FailedAuthentications
from services.api.auth_gate import AuthGate, Tarpit
from services.api.http_metrics import RouteTemplates

ATTACKER = "203.0.113.7"
NEIGHBOUR = "198.51.100.20"
LIMIT = 3
WINDOW_SECONDS = 60
GOOD_KEY = "good-key"


class FakeScript:
    """A registered Lua script of the fake Redis: counts failures per key."""

    def __init__(self, redis: FakeRedis, counts: bool) -> None:
        self.redis = redis
        self.counts = counts

    async def __call__(self, keys: list[str], args: list[Any] | None = None) -> list[int]:
        self.redis.calls += 1
        if self.counts:
            self.redis.failures[keys[0]] = self.redis.failures.get(keys[0], 0) + 1
        return [self.redis.failures.get(keys[0], 0), WINDOW_SECONDS * 1000]


class FakeRedis:
    """Just what ``FailedAuthentications`` asks of Redis: its two scripts."""

    def __init__(self) -> None:
        self.calls = 0
        self.failures: dict[str, int] = {}

    def register_script(self, script: str) -> FakeScript:
        return FakeScript(self, counts="INCR" in script)


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class InnerApp:
    """The application behind the gate: answers 200 and counts what reached it."""

    def __init__(self) -> None:
        self.reached = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.reached += 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def _endpoint(*_args: Any) -> None:
    raise AssertionError("routes are matched, never served, here")


ROUTES = [Route("/openapi/jobs", _endpoint, methods=["GET", "POST"])]


def _scope(address: str, key: str = "bad-key", path: str = "/openapi/jobs") -> Scope:
    headers = [(b"authorization", f"Bearer {key}".encode()), (b"request-id", b"rid-1")]
    return {
        "type": "http",
        "method": "GET",
        "path": path,
        "headers": headers,
        "client": (address, 40000),
    }


def _serve(gate: AuthGate, scope: Scope) -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[Message] = []

    async def receive() -> Message:
        raise AssertionError("the gate never reads a body")

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(gate(scope, receive, send))
    start, body = sent
    return start["status"], dict(start["headers"]), body.get("body", b"")


@pytest.fixture
def redis() -> FakeRedis:
    return FakeRedis()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def failures(redis: FakeRedis, clock: Clock) -> FailedAuthentications:
    client: Any = redis
    return FailedAuthentications(client, RedisKeys("unit"), LIMIT, WINDOW_SECONDS, clock)


@pytest.fixture
def inner() -> InnerApp:
    return InnerApp()


@pytest.fixture
def gate(failures: FailedAuthentications, inner: InnerApp) -> AuthGate:
    return AuthGate(inner, failures, lambda key: key == GOOD_KEY, ROUTES)


def _throttle(failures: FailedAuthentications, address: str) -> None:
    """Fail ``LIMIT`` times from ``address``, then let the process learn it is throttled."""
    for _ in range(LIMIT):
        asyncio.run(failures.failed(address, "unknown API key"))
    with pytest.raises(AuthThrottledError):
        asyncio.run(failures.check(address))


def test_a_throttled_address_is_answered_from_memory_without_redis(
    gate: AuthGate, failures: FailedAuthentications, redis: FakeRedis, inner: InnerApp
) -> None:
    _throttle(failures, ATTACKER)
    calls = redis.calls
    for _ in range(5):
        status, headers, body = _serve(gate, _scope(ATTACKER))
        assert status == 429
        assert headers[b"retry-after"] == str(WINDOW_SECONDS).encode()
        assert headers[b"content-type"] == b"application/problem+json"
        assert headers[b"request-id"] == b"rid-1"
        assert int(headers[b"content-length"]) == len(body)
        problem = json.loads(body)
        assert problem["type"] == "urn:kairos:problem:auth-throttled"
        assert problem["status"] == 429 and problem["instance"].endswith("rid-1")
    assert redis.calls == calls, "no Redis call for a refusal from memory"
    assert inner.reached == 0


def test_the_refusal_ends_with_its_retry_after(
    gate: AuthGate, failures: FailedAuthentications, clock: Clock, inner: InnerApp
) -> None:
    _throttle(failures, ATTACKER)
    clock.now += WINDOW_SECONDS - 1
    status, headers, _ = _serve(gate, _scope(ATTACKER))
    assert status == 429 and headers[b"retry-after"] == b"1"
    clock.now += 1
    assert _serve(gate, _scope(ATTACKER))[0] == 200
    assert inner.reached == 1
    assert not failures.refusing_any(), "the expired refusal is forgotten"


def test_another_address_a_known_key_and_other_paths_go_on(
    gate: AuthGate, failures: FailedAuthentications, inner: InnerApp
) -> None:
    _throttle(failures, ATTACKER)
    assert _serve(gate, _scope(NEIGHBOUR))[0] == 200
    assert _serve(gate, _scope(ATTACKER, key=GOOD_KEY))[0] == 200
    assert _serve(gate, _scope(ATTACKER, path="/healthz"))[0] == 200
    assert inner.reached == 3


def test_refusals_are_counted_by_route_template(
    gate: AuthGate, failures: FailedAuthentications
) -> None:
    labels = {"method": "GET", "route": "/openapi/jobs", "status": "429"}
    before = REGISTRY.get_sample_value("kairos_api_requests_total", labels) or 0.0
    _throttle(failures, ATTACKER)
    for _ in range(2):
        _serve(gate, _scope(ATTACKER))
    assert REGISTRY.get_sample_value("kairos_api_requests_total", labels) == before + 2


class CountingRoute(Route):
    """A route that counts how often a request is matched against it."""

    matched = 0

    def matches(self, scope: Scope) -> Any:
        CountingRoute.matched += 1
        return super().matches(scope)


def test_templates_of_unrouted_requests_are_remembered_per_method_and_path() -> None:
    templates = RouteTemplates([CountingRoute("/openapi/jobs/{jobId}", _endpoint)])
    scope = {"type": "http", "method": "GET", "path": "/openapi/jobs/7"}
    assert templates.of(dict(scope)) == "/openapi/jobs/{jobId}"
    assert templates.of(dict(scope)) == "/openapi/jobs/{jobId}"
    assert CountingRoute.matched == 1
    assert templates.of({**scope, "path": "/nowhere"}) == "<unmatched>"
    assert CountingRoute.matched == 2


class Sleeps:
    """``asyncio.sleep`` for the tarpit: records each wait and lets the test decide when
    the waits end."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.release = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        await self.release.wait()


def test_a_refusal_is_held_back_by_the_tarpit_and_only_so_many_at_once(
    failures: FailedAuthentications, inner: InnerApp
) -> None:
    sleeps = Sleeps()
    tarpit = Tarpit(1.5, most_held=2, sleep=sleeps)
    gate = AuthGate(inner, failures, lambda key: key == GOOD_KEY, ROUTES, tarpit)
    _throttle(failures, ATTACKER)

    async def flood() -> list[list[Message]]:
        tasks = [asyncio.create_task(_served(gate, _scope(ATTACKER))) for _ in range(4)]
        await asyncio.sleep(0)
        # Two are held; the two past the bound are answered at once.
        assert sleeps.waits == [1.5, 1.5] and tarpit.held == 2
        assert sum(t.done() for t in tasks) == 2
        # A good key from the same address is not held.
        assert _status(await _served(gate, _scope(ATTACKER, key=GOOD_KEY))) == 200
        sleeps.release.set()
        return list(await asyncio.gather(*tasks))

    answers = asyncio.run(flood())
    assert [_status(a) for a in answers] == [429] * 4
    assert tarpit.held == 0


def test_no_tarpit_answers_at_once(failures: FailedAuthentications, inner: InnerApp) -> None:
    sleeps = Sleeps()
    gate = AuthGate(inner, failures, lambda key: False, ROUTES, Tarpit(0, sleep=sleeps))
    _throttle(failures, ATTACKER)
    assert _serve(gate, _scope(ATTACKER))[0] == 429
    assert sleeps.waits == []


async def _served(gate: AuthGate, scope: Scope) -> list[Message]:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        raise AssertionError("the gate never reads a body")

    await gate(scope, receive, send)
    return sent


def _status(sent: list[Message]) -> int:
    status: int = sent[0]["status"]
    return status
