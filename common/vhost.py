"""A namespace's RabbitMQ vhost through the management API: created, and its queues read."""

from __future__ import annotations

from urllib.parse import quote, unquote, urlsplit

import httpx

from common.config import StoreSettings
from common.errors import ConfigurationError, StoreUnavailableError


def management_api(settings: StoreSettings) -> tuple[str, tuple[str, str]]:
    """The management API's base URL and credentials, from the settings' management URL."""
    parts = urlsplit(settings.amqp_management_url)
    base = f"{parts.scheme}://{parts.hostname}:{parts.port or 15672}"
    return base, (unquote(parts.username or "guest"), unquote(parts.password or "guest"))


def _amqp_user(settings: StoreSettings) -> str:
    return unquote(urlsplit(settings.amqp_url).username or "guest")


def _ensure_amqp_user(client: httpx.Client, base: str, settings: StoreSettings) -> None:
    """Create the AMQP URL's user, with that URL's password and the ``management`` tag
    (it reads its vhost's queues for the console and ``kairos stats``), when the
    management API's user is another one and this one does not exist yet. An existing
    user is left as it is."""
    parts = urlsplit(settings.amqp_url)
    user = _amqp_user(settings)
    if user == management_api(settings)[1][0]:
        return
    path = f"{base}/api/users/{quote(user, safe='')}"
    found = client.get(path)
    if found.status_code != 404:
        found.raise_for_status()
        return
    if not parts.password:
        raise ConfigurationError(
            f"RabbitMQ has no user {user!r} and KAIROS_AMQP_URL gives no password to "
            "create it with: put one in the URL, or create the user yourself"
        )
    created = client.put(path, json={"password": unquote(parts.password), "tags": "management"})
    created.raise_for_status()


DEAD_LETTERS_POLICY = "kairos-results-dead-bound"


def _bound_dead_letters(client: httpx.Client, base: str, vhost: str, most: int) -> None:
    """Bound the results dead-letter queue by a policy, not a declare-time argument: a
    policy applies to the queue as it exists (a queue declared before with other
    arguments could not be declared again with new ones), and an operator can change
    it in the management UI. Past the bound the oldest set-aside results go."""
    client.put(
        f"{base}/api/policies/{vhost}/{DEAD_LETTERS_POLICY}",
        json={
            "pattern": "^kairos\\.results\\.dead$",
            "definition": {"max-length": most, "overflow": "drop-head"},
            "apply-to": "queues",
            "priority": 0,
        },
    ).raise_for_status()


def ensure_vhost(settings: StoreSettings) -> None:
    """Create the namespace's vhost (if missing), the AMQP user (if missing, see
    ``_ensure_amqp_user``), and give that user full rights on the vhost, and on no
    other; bound the results dead-letter queue (``_bound_dead_letters``)."""
    base, auth = management_api(settings)
    vhost = quote(settings.namespace, safe="")
    user = quote(_amqp_user(settings), safe="")
    try:
        with httpx.Client(auth=auth, timeout=10.0) as client:
            client.put(f"{base}/api/vhosts/{vhost}").raise_for_status()
            _ensure_amqp_user(client, base, settings)
            client.put(
                f"{base}/api/permissions/{vhost}/{user}",
                json={"configure": ".*", "write": ".*", "read": ".*"},
            ).raise_for_status()
            _bound_dead_letters(client, base, vhost, settings.results_dead_max_messages)
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
