"""Create and drop the RabbitMQ vhost of a namespace through the management API."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

import httpx

from common.config import StoreSettings
from common.errors import StoreUnavailableError


def _management(settings: StoreSettings) -> tuple[str, tuple[str, str]]:
    parts = urlsplit(settings.amqp_management_url)
    base = f"{parts.scheme}://{parts.hostname}:{parts.port or 15672}"
    return base, (parts.username or "guest", parts.password or "guest")


def _amqp_user(settings: StoreSettings) -> str:
    return urlsplit(settings.amqp_url).username or "guest"


def ensure_vhost(settings: StoreSettings) -> None:
    """Create the namespace's vhost (if missing) and give the AMQP user full rights on it."""
    base, auth = _management(settings)
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


def drop_vhost(settings: StoreSettings) -> None:
    """Delete the namespace's vhost with everything in it."""
    base, auth = _management(settings)
    with httpx.Client(auth=auth, timeout=10.0) as client:
        response = client.delete(f"{base}/api/vhosts/{quote(settings.namespace, safe='')}")
        if response.status_code not in (204, 404):
            response.raise_for_status()


def queue_stats(settings: StoreSettings, queue: str) -> dict[str, int]:
    """Ready, unacked and consumer counts of one queue, as the management API sees them."""
    base, auth = _management(settings)
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
