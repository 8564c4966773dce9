"""kairos migrate's vhost step creates the services' broker user when the management
API's user is another one: tag management, rights on the namespace's vhost only."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pika
import pytest

from common.config import StoreSettings
from common.errors import ConfigurationError
from common.vhost import ensure_vhost, management_api


@pytest.fixture
def user_name(namespace: StoreSettings) -> Iterator[str]:
    name = f"k{secrets.token_hex(5)}"
    yield name
    base, auth = management_api(namespace)
    httpx.delete(f"{base}/api/users/{quote(name)}", auth=auth, timeout=10)


def test_the_amqp_user_is_created_with_rights_on_its_vhost_only(
    namespace: StoreSettings, user_name: str
) -> None:
    password = secrets.token_hex(8)
    ensure_vhost(
        namespace.model_copy(update={"amqp_url": f"amqp://{user_name}:{password}@127.0.0.1"})
    )
    base, auth = management_api(namespace)
    user = httpx.get(f"{base}/api/users/{user_name}", auth=auth, timeout=10).json()
    assert user["tags"] in (["management"], "management")
    rights = httpx.get(f"{base}/api/users/{user_name}/permissions", auth=auth, timeout=10).json()
    assert [r["vhost"] for r in rights] == [namespace.namespace]
    params = pika.URLParameters(
        f"amqp://{user_name}:{password}@127.0.0.1:5672/{namespace.namespace}"
    )
    pika.BlockingConnection(params).close()

    # Run again with another password in the URL: the existing user is left alone.
    ensure_vhost(namespace.model_copy(update={"amqp_url": f"amqp://{user_name}:other@127.0.0.1"}))
    pika.BlockingConnection(params).close()


def test_a_missing_user_without_a_password_is_named(
    namespace: StoreSettings, user_name: str
) -> None:
    with pytest.raises(ConfigurationError, match=f"no user '{user_name}'"):
        ensure_vhost(namespace.model_copy(update={"amqp_url": f"amqp://{user_name}@127.0.0.1"}))


def test_the_results_dead_letter_queue_is_bounded_even_when_declared_before(
    namespace: StoreSettings,
) -> None:
    """A queue declared by an earlier version (no arguments) gets the bound too, and
    past it the oldest set-aside results go."""
    params = pika.URLParameters(f"{namespace.amqp_url}/{quote(namespace.namespace, safe='')}")
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        channel.queue_declare("kairos.results.dead", durable=True)
        ensure_vhost(namespace.model_copy(update={"results_dead_max_messages": 3}))
        for n in range(5):
            channel.basic_publish("", "kairos.results.dead", f"r{n}".encode())
        channel.queue_declare("kairos.results.dead", durable=True)  # as every service does
        kept = []
        for _ in range(5):
            _method, _props, body = channel.basic_get("kairos.results.dead", auto_ack=True)
            if body is not None:
                kept.append(body)
    finally:
        connection.close()
    assert kept == [b"r2", b"r3", b"r4"]
