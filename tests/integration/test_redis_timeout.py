"""Every Redis call of a service is bounded: a Redis that takes the connection and never
answers makes the call fail, instead of holding the process forever."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
import redis

from common import runtime
from common.config import StoreSettings

# Far past the bound the test sets (0.5 s, a few retries): only a call with no timeout
# is still waiting by then.
HUNG_SECONDS = 60


@pytest.fixture
def silent_redis() -> Iterator[str]:
    """The URL of a server that takes connections and answers nothing, not even the
    client's handshake."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn = server.accept()[0]
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    server.close()
    for conn in held:
        conn.close()


def test_a_redis_call_that_gets_no_answer_times_out(
    namespace: StoreSettings, silent_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "REDIS_TIMEOUT_SECONDS", 0.5)
    stores = runtime.open_stores(namespace.model_copy(update={"redis_url": silent_redis}), 1)
    # The client's own default would bound the call too (5 s in redis-py 8): the bound
    # is the one Kairos sets, on every read and on the connect.
    options = stores.redis.connection_pool.connection_kwargs
    assert (options.get("socket_timeout"), options.get("socket_connect_timeout")) == (0.5, 0.5)
    raised: list[BaseException] = []

    def call() -> None:
        try:
            stores.redis.get("anything")
        except redis.RedisError as e:
            raised.append(e)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(HUNG_SECONDS)
    stores.engine.dispose()
    assert not caller.is_alive(), "a Redis call that never gets an answer is still waiting"
    assert raised and isinstance(raised[0], redis.TimeoutError), raised
