"""POSTing one callback, bounded: in time as a whole, in what is read back, in what can go wrong.

A receiver is not trusted to behave: it may never answer, trickle its answer a byte at
a time, send megabytes back, or sit behind a URL the HTTP client cannot even parse.
Each attempt ends within ``total_seconds`` whatever the receiver does, reads at most
``max_response_bytes`` of the answer, and any error at all is that attempt's failure,
never the notifier's.

The POSTs run on one asyncio event loop in a thread of its own, with one shared
``httpx.AsyncClient`` (its connections are reused across callbacks): a coroutine can be
cancelled at its deadline wherever it waits, which a blocking call in a thread cannot.
The notifier's pool threads hand each POST to the loop and wait for its outcome.

Each POST is checked against the callback URL policy first (``common.callback_urls``),
and the client connects only to addresses checked when it connects
(``services.notifier.pinning``). A refused URL is the attempt's failure, marked
``refused``: a policy refusal does not heal by retrying. A host that does not resolve
is an ordinary failure, retried: DNS may answer later.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import httpx

from common.callback_urls import CallbackUrlPolicy, IPNetwork, Resolver, SystemResolver
from common.errors import CallbackHostUnresolvedError, CallbackUrlRefusedError
from services.notifier.pinning import PinnedBackend, PinnedTransport

MAX_RESPONSE_BYTES = 4 * 1024
# How long a 2xx answer's body may take to read for its connection to be reused.
DRAIN_SECONDS = 0.5
# HTTP clients kept for apps with networks of their own, besides the default one.
MAX_CLIENTS = 64


@dataclass(frozen=True)
class PostOutcome:
    """How one POST went: the status code if an answer came, and what went wrong if
    anything (the start of a non-2xx answer's body, or the error); ``refused`` when the
    callback URL policy refused the URL or an address it reaches (nothing was sent);
    the answer's ``Retry-After`` header if it had one."""

    status_code: int | None
    error: str | None
    refused: bool = False
    retry_after: str | None = None

    @property
    def delivered(self) -> bool:
        """The receiver answered 2xx."""
        return self.status_code is not None and 200 <= self.status_code < 300


Networks = tuple[IPNetwork, ...] | None
"""An app's own allowed callback networks; None: the cluster's default."""


class Poster(Protocol):
    """What delivering a callback needs of the HTTP side (``CallbackPoster``, or a fake)."""

    def post(
        self, url: str, body: str, headers: Mapping[str, str], networks: Networks = None
    ) -> PostOutcome:
        """POST ``body`` to ``url`` under the policy of an app allowed ``networks``;
        never raises."""


class CallbackPoster:
    """POSTs callbacks from any thread; start it before use, close it after.

    ``policy`` says which URLs and addresses may be reached (public ones only by
    default), an app's own networks replacing its allowed ones; ``resolver`` resolves
    host names (the system's, bounded by the attempt's time, by default);
    ``ssl_context`` which certificates are trusted (the system's by default).

    Apps allowed different networks get HTTP clients of their own: a connection is
    checked when it opens and then reused, so one app's connection into a network it
    may reach must never carry another app's callback.
    """

    def __init__(
        self,
        total_seconds: float,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        policy: CallbackUrlPolicy | None = None,
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._total = total_seconds
        self._max_bytes = max_response_bytes
        self._policy = policy or CallbackUrlPolicy()
        self._resolver = resolver or SystemResolver(total_seconds)
        self.backend = PinnedBackend(self._policy, self._resolver)
        self._ssl_context = ssl_context
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="http", daemon=True)
        # One client per distinct network list, touched on the loop's thread only.
        self._clients: dict[Networks, tuple[CallbackUrlPolicy, httpx.AsyncClient]] = {}

    def start(self) -> None:
        """Start the event loop thread and open the HTTP client on it."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._open(), self._loop).result()

    async def _open(self) -> None:
        self._clients[None] = (self._policy, self._new_client(self.backend))

    def _new_client(self, backend: PinnedBackend) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            follow_redirects=False,
            timeout=self._total,
            transport=PinnedTransport(backend, self._ssl_context),
        )

    def _client_for(self, networks: Networks) -> tuple[CallbackUrlPolicy, httpx.AsyncClient]:
        found = self._clients.get(networks)
        if found is None:
            if len(self._clients) > MAX_CLIENTS:
                # Operators set few distinct lists; a bound keeps a mistake from piling up.
                old = [k for k in self._clients if k is not None]
                self._loop.create_task(self._clients.pop(old[0])[1].aclose())
            policy = self._policy.for_app(networks)
            found = (policy, self._new_client(PinnedBackend(policy, self._resolver)))
            self._clients[networks] = found
        return found

    def close(self) -> None:
        """Close the clients and stop the loop."""

        async def close_all() -> None:
            for _, client in self._clients.values():
                await client.aclose()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close_all(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    def post(
        self, url: str, body: str, headers: Mapping[str, str], networks: Networks = None
    ) -> PostOutcome:
        """POST ``body`` to ``url`` under the policy of an app allowed ``networks``
        (None: the default); returns within about ``total_seconds``, never raises."""
        future = asyncio.run_coroutine_threadsafe(
            self._bounded(url, body, headers, networks), self._loop
        )
        return future.result()

    async def _bounded(
        self, url: str, body: str, headers: Mapping[str, str], networks: Networks
    ) -> PostOutcome:
        try:
            exchange = self._exchange(url, body, headers, networks)
            return await asyncio.wait_for(exchange, self._total)
        except TimeoutError:
            return PostOutcome(None, f"no complete answer within {self._total:g} s")
        except CallbackHostUnresolvedError as e:
            # DNS may answer again later (a lapsed domain, a resolver outage): retried.
            return PostOutcome(None, e.message)
        except CallbackUrlRefusedError as e:
            return PostOutcome(None, f"refused by the callback URL policy: {e.message}", True)
        except Exception as e:
            return PostOutcome(None, f"{type(e).__name__}: {e}"[:2000])

    async def _exchange(
        self, url: str, body: str, headers: Mapping[str, str], networks: Networks
    ) -> PostOutcome:
        assert self._clients, "start() the poster first"
        policy, client = self._client_for(networks)
        # Scheme, user:password and a numeric host; the addresses of a name are checked
        # when a connection to it opens (PinnedBackend).
        policy.target(url)
        request = client.build_request("POST", url, content=body, headers=dict(headers))
        response = await client.send(request, stream=True)
        try:
            if 200 <= response.status_code < 300:
                await self._drain_for_reuse(response)
                return PostOutcome(response.status_code, None)
            excerpt = await self._read_some(response)
            return PostOutcome(
                response.status_code,
                excerpt or f"HTTP {response.status_code}",
                retry_after=response.headers.get("retry-after"),
            )
        finally:
            await response.aclose()

    async def _drain_for_reuse(self, response: httpx.Response) -> None:
        """Read a 2xx answer's body to its end, so that its connection goes back to the
        pool: closing a response with its body unread closes the connection, and then
        every callback pays a new connection. A body that is long or slow is let go
        (the connection closes); the callback is delivered either way."""
        try:
            await asyncio.wait_for(self._read_some(response), DRAIN_SECONDS)
        except Exception:  # the answer was 2xx: delivered whatever follows
            return

    async def _read_some(self, response: httpx.Response) -> str:
        """At most ``max_response_bytes`` of the answer, as text."""
        taken = bytearray()
        async for chunk in response.aiter_raw():
            taken += chunk
            if len(taken) >= self._max_bytes:
                break
        return bytes(taken[: self._max_bytes]).decode("utf-8", "replace")
