"""A namespace's RabbitMQ vhost through the management API: created, and its queues read."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

import httpx

from common.config import StoreSettings
from common.errors import StoreUnavailableError


def management_api(settings: StoreSettings) -> tuple[str, tuple[str, str]]:
    """The management API's base URL and credentials, from the settings' management URL."""
    parts = urlsplit(settings.amqp_management_url)
    base = f"{parts.scheme}://{parts.hostname}:{parts.port or 15672}"
    return base, (parts.username or "guest", parts.password or "guest")


def _amqp_user(settings: StoreSettings) -> str:
    return urlsplit(settings.amqp_url).username or "guest"


def ensure_vhost(settings: StoreSettings) -> None:
    """Create the namespace's vhost (if missing) and give the AMQP user full rights on it."""
    base, auth = management_api(settings)
    vhost = quote(settings.namespace, safe="")
    user = quote(_amqp_user(settings), safe="")
    try:
        with httpx.Client(auth=auth, timeout=10.0) as client:
            client.put(f"{base}/api/vhosts/{vhost}").raise_for_status()
            client.put(
                f"{base}/api/permissions/{vhost}/{user}",
                json={"configure": ".*", "write": ".*", "read": ".*"},
            ).raise_for_status()
    except httpx.HTTPError as e:
        raise StoreUnavailableError(
            "RabbitMQ management API",
            base,
            f"{e}; enable it with `rabbitmq-plugins enable rabbitmq_management`",
        ) from e


def queue_stats(settings: StoreSettings, queue: str) -> dict[str, int]:
    """Ready, unacked and consumer counts of one queue, as the management API sees them."""
    base, auth = management_api(settings)
    vhost = quote(settings.namespace, safe="")
    with httpx.Client(auth=auth, timeout=10.0) as client:
        response = client.get(f"{base}/api/queues/{vhost}/{quote(queue, safe='')}")
        response.raise_for_status()
        data = response.json()
    return {
        "ready": int(data.get("messages_ready", 0)),
        "unacked": int(data.get("messages_unacknowledged", 0)),
        "consumers": int(data.get("consumers", 0)),
    }


def vhost_queues(settings: StoreSettings, timeout: float = 3.0) -> list[dict[str, int | str]]:
    """Every queue of the namespace's vhost with its ready, unacked and consumer counts,
    by name; ``StoreUnavailableError`` when the management API does not answer."""
    base, auth = management_api(settings)
    vhost = quote(settings.namespace, safe="")
    columns = "name,messages_ready,messages_unacknowledged,consumers"
    try:
        with httpx.Client(auth=auth, timeout=timeout) as client:
            response = client.get(f"{base}/api/queues/{vhost}", params={"columns": columns})
            response.raise_for_status()
            data = response.json()
    except (httpx.HTTPError, ValueError) as e:
        raise StoreUnavailableError("RabbitMQ management API", base, str(e)) from e
    return sorted(
        (
            {
                "name": str(q.get("name", "")),
                "ready": int(q.get("messages_ready", 0) or 0),
                "unacked": int(q.get("messages_unacknowledged", 0) or 0),
                "consumers": int(q.get("consumers", 0) or 0),
            }
            for q in data
        ),
        key=lambda q: str(q["name"]),
    )
