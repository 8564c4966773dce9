"""POSTing one callback, bounded: in time as a whole, in what is read back, in what can go wrong.

A receiver is not trusted to behave: it may never answer, trickle its answer a byte at
a time, send megabytes back, or sit behind a URL the HTTP client cannot even parse.
Each attempt ends within ``total_seconds`` whatever the receiver does, reads at most
``max_response_bytes`` of the answer, and any error at all is that attempt's failure,
never the notifier's.

The POSTs run on one asyncio event loop in a thread of its own, over Kairos's own lean
HTTP/1.1 client (``services.notifier.http_wire``: a request written as bytes, the answer
read with httptools' parser) and keep-alive connections reused across callbacks
(``services.notifier.http_pool``): a coroutine can be cancelled at its deadline wherever
it waits, which a blocking call in a thread cannot. Each callback attempt is a task on
that loop (``submit``), so a POST never crosses between threads. No redirect is followed.

Each POST is checked against the callback URL policy first (``common.callback_urls``),
and the client connects only to addresses checked when it connects
(``services.notifier.pinning``). A refused URL is the attempt's failure, marked
``refused``: a policy refusal does not heal by retrying. A host that does not resolve
is an ordinary failure, retried: DNS may answer later.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import threading
from collections.abc import Coroutine, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import certifi
import httpx

from common.callback_urls import (
    CallbackTarget,
    CallbackUrlPolicy,
    IPNetwork,
    Resolver,
    SystemResolver,
)
from common.errors import (
    CallbackAnswerError,
    CallbackHostUnresolvedError,
    CallbackUrlRefusedError,
)
from services.notifier.http_pool import ConnectionPool, HttpConnection, PoolKey
from services.notifier.http_wire import Answer, request_bytes
from services.notifier.pinning import PinnedBackend

MAX_RESPONSE_BYTES = 4 * 1024
# How long a 2xx answer's body may take to read for its connection to be reused.
DRAIN_SECONDS = 0.5
# Policies kept for apps with networks of their own, besides the default one.
MAX_CLIENTS = 64
# A 2xx answer's drain ends this long before the attempt's deadline: the deadline
# ending it would turn a delivered callback into a failed one.
DRAIN_MARGIN_SECONDS = 0.02

T = TypeVar("T")


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
    """What delivering a callback needs of the HTTP side (``CallbackPoster``, or a fake):
    a loop to run attempts on, and POSTs on it."""

    def submit(self, attempt: Coroutine[Any, Any, T]) -> Future[T]:
        """Run ``attempt`` as a task on the poster's loop; its future, from any thread."""

    async def post_async(
        self, url: str, body: str, headers: Mapping[str, str], networks: Networks = None
    ) -> PostOutcome:
        """POST ``body`` to ``url`` under the policy of an app allowed ``networks``, on
        the poster's loop; never raises."""


class CallbackPoster:
    """POSTs callbacks on its own event loop; start it before use, close it after.

    ``policy`` says which URLs and addresses may be reached (public ones only by
    default), an app's own networks replacing its allowed ones; ``resolver`` resolves
    host names (the system's, bounded by the attempt's time, by default);
    ``ssl_context`` which certificates are trusted (the system's and certifi's by
    default).

    Apps allowed different networks get connections of their own: a connection is
    checked when it opens and then reused, so one app's connection into a network it
    may reach must never carry another app's callback. ``backend`` is the default
    policy's (it records where its connections went).
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
        self._tls = ssl_context or _system_tls()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="http", daemon=True)
        # Touched on the loop's thread only.
        self._backends: dict[Networks, PinnedBackend] = {None: self.backend}
        self._pool = ConnectionPool()

    def start(self) -> None:
        """Start the event loop thread."""
        self._thread.start()

    def _backend_for(self, networks: Networks) -> PinnedBackend:
        found = self._backends.get(networks)
        if found is None:
            if len(self._backends) > MAX_CLIENTS:
                # Operators set few distinct lists; a bound keeps a mistake from piling
                # up. The pool keys by the networks themselves, so nothing is shared.
                del self._backends[next(k for k in self._backends if k is not None)]
            found = PinnedBackend(self._policy.for_app(networks), self._resolver)
            self._backends[networks] = found
        return found

    def close(self) -> None:
        """Close the idle connections and stop the loop."""

        async def close_all() -> None:
            closing = [w.wait_closed() for w in self._pool.close_idle()]
            if closing:
                await asyncio.wait([asyncio.ensure_future(c) for c in closing], timeout=1.0)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close_all(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    def submit(self, attempt: Coroutine[Any, Any, T]) -> Future[T]:
        """Run ``attempt`` as a task on this poster's loop (started); its future, from
        any thread."""
        return asyncio.run_coroutine_threadsafe(attempt, self._loop)

    def post(
        self, url: str, body: str, headers: Mapping[str, str], networks: Networks = None
    ) -> PostOutcome:
        """POST ``body`` to ``url`` under the policy of an app allowed ``networks``
        (None: the default), from a thread other than the loop's; returns within about
        ``total_seconds``, never raises."""
        return self.submit(self.post_async(url, body, headers, networks)).result()

    async def post_async(
        self, url: str, body: str, headers: Mapping[str, str], networks: Networks = None
    ) -> PostOutcome:
        """``post`` for a coroutine on the loop this poster's connections belong to:
        its own once started, or the caller's for a poster never started (one loop
        only); never raises."""
        deadline = asyncio.get_running_loop().time() + self._total
        try:
            async with asyncio.timeout_at(deadline):
                return await self._exchange(url, body, headers, networks, deadline)
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
        self,
        url: str,
        body: str,
        headers: Mapping[str, str],
        networks: Networks,
        deadline: float,
    ) -> PostOutcome:
        backend = self._backend_for(networks)
        # Scheme, user:password and a numeric host; the addresses of a name are checked
        # when a connection to it opens (PinnedBackend).
        where = _request_target(backend.policy, url)
        request = request_bytes(where.path, where.host_header, headers, body.encode())
        key: PoolKey = (networks, where.scheme, where.target.host, where.target.port)
        connection = await self._pool.acquire(key)
        reuse = False
        try:
            connection, answer = await self._ask(backend, where, connection, request)
            if 200 <= answer.status < 300:
                reuse = await self._drain_for_reuse(connection, deadline)
                return PostOutcome(answer.status, None)
            try:
                await connection.answers.body()
                reuse = connection.answers.reusable()
            except CallbackAnswerError:  # cut short: its status and start still say why
                pass
            excerpt = bytes(answer.body).decode("utf-8", "replace")
            return PostOutcome(
                answer.status, excerpt or f"HTTP {answer.status}", retry_after=answer.retry_after
            )
        finally:
            self._pool.release(key, connection, reuse)

    async def _ask(
        self,
        backend: PinnedBackend,
        where: RequestTarget,
        connection: HttpConnection | None,
        request: bytes,
    ) -> tuple[HttpConnection, Answer]:
        """Write the request and read its answer's head, on a kept connection if there
        is one. A kept connection the receiver closed before answering at all (its
        keep-alive time ran out as the request went) is replaced by a new one, once:
        the receiver took nothing from it."""
        if connection is not None:
            try:
                return connection, await self._ask_on(connection, request)
            except CallbackAnswerError as e:
                if not e.before_answer:
                    raise
                connection.close()
        tls = self._tls if where.scheme == "https" else None
        fresh = HttpConnection(await backend.connect(where.target.host, where.target.port, tls))
        try:
            return fresh, await self._ask_on(fresh, request)
        except BaseException:  # a deadline too: the caller never holds this connection
            fresh.close()
            raise

    async def _ask_on(self, connection: HttpConnection, request: bytes) -> Answer:
        connection.writer.write(request)
        return await connection.answers.head(self._max_bytes)

    async def _drain_for_reuse(self, connection: HttpConnection, deadline: float) -> bool:
        """Read a 2xx answer's body to its end, so that its connection can carry the
        next callback (a new TCP connection, lookup and TLS handshake per callback
        would cap the rate); whether it may. A body that is long or slow is let go (the
        connection closes), and the drain ends before the attempt's ``deadline``: the
        callback is delivered either way."""
        if not connection.answers.reusable():
            now = asyncio.get_running_loop().time()
            until = min(now + DRAIN_SECONDS, deadline - DRAIN_MARGIN_SECONDS)
            if until <= now:
                return False
            try:
                async with asyncio.timeout_at(until):
                    await connection.answers.body()
            except Exception:  # the answer was 2xx: delivered whatever follows
                return False
        return connection.answers.reusable()


@dataclass(frozen=True)
class RequestTarget:
    """Where a callback URL's POST goes: the checked target, its scheme, the request's
    path and query, and its Host header."""

    target: CallbackTarget
    scheme: str
    path: str
    host_header: str


@functools.lru_cache(maxsize=4096)
def _request_target(policy: CallbackUrlPolicy, url: str) -> RequestTarget:
    """The URL read and checked once per policy: callbacks of a burst share a few URLs.
    Raises ``CallbackUrlRefusedError`` (never remembered)."""
    target = policy.target(url)
    parsed = httpx.URL(url)
    return RequestTarget(
        target, parsed.scheme, parsed.raw_path.decode("ascii"), parsed.netloc.decode("ascii")
    )


def _system_tls() -> ssl.SSLContext:
    """The system's trusted certificates and certifi's bundle (what httpx trusted, so a
    host or image without a CA store still reaches public receivers), host names
    checked, HTTP/1.1 offered."""
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=certifi.where())
    context.set_alpn_protocols(["http/1.1"])
    return context
