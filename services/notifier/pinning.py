"""Connecting a callback to the address that was checked, and to no other.

Checking a callback URL's addresses and then letting the HTTP client resolve the name
again would leave a gap: a DNS server under an attacker's control can answer a public
address to the check and 127.0.0.1 to the connect (DNS rebinding). So the notifier's
httpx client connects through ``PinnedBackend``: when the client opens a connection it
resolves the host once, checks every address against the callback URL policy, and
connects to those addresses themselves. TLS is still for the host name (SNI and
certificate checks use it, as the ``Host`` header does): only the TCP connect is pinned.

httpx keeps a connection open for the next callback to the same host; that connection
was checked when it was opened.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable

import httpcore
import httpx

from common.callback_urls import CallbackTarget, CallbackUrlPolicy, Resolver, target_addresses


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """A network backend that connects only to checked addresses of a host."""

    def __init__(
        self,
        policy: CallbackUrlPolicy,
        resolver: Resolver,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._policy = policy
        self._resolver = resolver
        self._inner = inner or httpcore.AnyIOBackend()
        # Where each connection went, newest last (tests read it; bounded).
        self.connected: list[tuple[str, str, int]] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Resolve ``host``, refuse it if any address is refused (raising
        ``CallbackUrlRefusedError``), else connect to its addresses in turn."""
        target = CallbackTarget(f"{host}:{port}", host, port)
        addresses = await target_addresses(self._policy, self._resolver, target)
        failure: Exception | None = None
        for address in addresses:
            try:
                stream = await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as e:
                failure = e
                continue
            self.connected = [*self.connected[-99:], (host, str(address), port)]
            return stream
        assert failure is not None  # target_addresses never returns an empty list
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Callbacks never go to a Unix socket."""
        raise httpcore.ConnectError("callbacks are sent over TCP only")

    async def sleep(self, seconds: float) -> None:
        """As the wrapped backend sleeps."""
        await self._inner.sleep(seconds)


class PinnedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport, its connection pool built on a ``PinnedBackend``.

    Giving the client a transport also keeps it from using proxies named in the
    environment: through a proxy the check would be of the proxy, not the receiver.
    """

    def __init__(self, backend: PinnedBackend, ssl_context: ssl.SSLContext | None = None) -> None:
        super().__init__(trust_env=False)
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)
        # httpx builds its pool without a way to pass a network backend; this is the
        # pool it builds for no proxy, with that one argument added.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context or httpx.create_ssl_context(trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=backend,
        )
