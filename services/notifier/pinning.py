"""Connecting a callback to the address that was checked, and to no other.

Checking a callback URL's addresses and then letting a client resolve the name again
would leave a gap: a DNS server under an attacker's control can answer a public address
to the check and 127.0.0.1 to the connect (DNS rebinding). So the notifier's HTTP
client connects through ``PinnedBackend``: when it opens a connection it resolves the
host once, checks every address against the callback URL policy, and connects to those
addresses themselves. TLS is still for the host name (SNI and certificate checks use
it, as the ``Host`` header does): only the TCP connect is pinned.

The client keeps a connection open for the next callback to the same host and policy
(``services.notifier.http_pool``); that connection was checked when it was opened.
"""

from __future__ import annotations

import asyncio
import ssl

from common.callback_urls import CallbackTarget, CallbackUrlPolicy, Resolver, target_addresses

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
# What a stream reader buffers before it stops reading the socket (asyncio's default
# is 64 KiB; an answer's head and its 4 KiB excerpt fit well within it).
READ_LIMIT = 64 * 1024


class PinnedBackend:
    """Opens connections only to checked addresses of a host, under one policy."""

    def __init__(self, policy: CallbackUrlPolicy, resolver: Resolver) -> None:
        self.policy = policy
        self._resolver = resolver
        # Where each connection went, newest last (tests read it; bounded).
        self.connected: list[tuple[str, str, int]] = []

    async def connect(self, host: str, port: int, tls: ssl.SSLContext | None) -> Streams:
        """Resolve ``host``, refuse it if any address is refused (raising
        ``CallbackUrlRefusedError``), else connect to its addresses in turn; with
        ``tls``, a TLS connection for the host name (SNI, certificate check)."""
        target = CallbackTarget(f"{host}:{port}", host, port)
        addresses = await target_addresses(self.policy, self._resolver, target)
        failure: OSError | None = None
        for address in addresses:
            try:
                streams = await asyncio.open_connection(
                    str(address),
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                    limit=READ_LIMIT,
                )
            except OSError as e:  # refused, unreachable, a failed handshake: the next one
                failure = e
                continue
            self.connected = [*self.connected[-99:], (host, str(address), port)]
            return streams
        assert failure is not None  # target_addresses never returns an empty list
        raise failure
