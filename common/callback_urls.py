"""The callback URL policy: which URLs Kairos may POST a callback to.

A callback URL comes from an app, and the notifier POSTs to it from inside the
operator's network: without a policy any app could make Kairos reach the cloud metadata
address, a database's HTTP port or an admin page on localhost (SSRF). So a callback URL
must be http(s) (https only with ``KAIROS_CALLBACK_HTTPS_ONLY``), carry no user:password
part, and every address its host names or resolves to must be a public one, unless a
network the app is allowed admits it: its own list (``kairos app networks``,
``apps.callback_networks``) or, for an app without one, ``KAIROS_CALLBACK_ALLOWED_NETWORKS``.

The API checks at submission and the notifier again when it connects (a name may
resolve elsewhere by then); the notifier then connects to the very address it checked
(``services.notifier.pinning``). Numeric hosts are read as the socket layer reads them
(``socket.inet_aton``: ``2130706433``, ``0x7f000001``, ``0177.0.0.1`` and ``127.1`` are
all 127.0.0.1), and an IPv6 address carrying an IPv4 one (mapped, compatible, 6to4,
NAT64) is judged by the IPv4 address it carries.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from ipaddress import (
    IPv4Address,
    IPv4Network,
    IPv6Address,
    IPv6Network,
    ip_address,
    ip_network,
)
from typing import Any

import httpx

from common.errors import (
    CallbackAddressRefusedError,
    CallbackHostUnresolvedError,
    CallbackUrlRefusedError,
    ConfigurationError,
)
from common.host_lookups import MAX_LOOKUP_THREADS, HostLookups

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

Resolver = Callable[[str, int], Awaitable[Sequence[IPAddress]]]
"""Every address a host name resolves to (A and AAAA), for a port; raises ``OSError``
(or ``TimeoutError``) when it cannot tell. ``SystemResolver``, or a fake in tests."""

RESOLVE_TIMEOUT_SECONDS = 3.0

# Text inet_aton may read as an IPv4 address; anything else is a name (inet_aton also
# takes "1.2.3.4 junk", which no URL host holds, but a guard costs nothing).
_NUMERIC_HOST = re.compile(r"[0-9a-fx.]+")

# Not "global" by Python's tables, or deprecated, yet worth naming plainly.
_SHARED = IPv4Network("100.64.0.0/10")
_SITE_LOCAL = IPv6Network("fec0::/10")
_NAT64 = (IPv6Network("64:ff9b::/96"), IPv6Network("64:ff9b:1::/48"))
_COMPATIBLE = IPv6Network("::/96")


def parse_networks(
    text: str, source: str = "KAIROS_CALLBACK_ALLOWED_NETWORKS"
) -> tuple[IPNetwork, ...]:
    """Comma-separated CIDRs read (a bare address is its own /32 or /128), repeats
    dropped; a ``ConfigurationError`` naming ``source`` (the setting or flag they came
    from) for the first that is no network."""
    networks: list[IPNetwork] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            networks.append(ip_network(part, strict=False))
        except ValueError as e:
            raise ConfigurationError(
                f"{source}: {part!r} is no network ({e}); give comma-separated CIDRs such "
                "as 10.0.0.0/8,fd00::/8"
            ) from e
    return tuple(dict.fromkeys(networks))


def stored_networks(networks: Sequence[IPNetwork] | None) -> str | None:
    """The text kept in ``apps.callback_networks``: a JSON array of CIDRs, or NULL for
    the cluster's default (``KAIROS_CALLBACK_ALLOWED_NETWORKS``)."""
    return None if networks is None else json.dumps([str(n) for n in networks])


def networks_from_stored(text: str | None) -> tuple[IPNetwork, ...] | None:
    """The networks ``stored_networks`` wrote; None for the default. Text that cannot
    be read admits no network: a grant that cannot be read must not widen."""
    if text is None:
        return None
    try:
        value = json.loads(text)
        return tuple(ip_network(str(cidr), strict=False) for cidr in value)
    except (ValueError, TypeError):
        return ()


def numeric_host(host: str) -> IPAddress | None:
    """The address a URL host names by itself, as the socket layer reads it; None for a
    name to resolve. ``host`` is as httpx gives it (lower case, IPv6 without brackets)."""
    bare = (host[:-1] if host.endswith(".") else host).lower()
    if ":" in bare:
        try:
            return ip_address(bare.replace("%25", "%"))
        except ValueError:
            return None
    if not _NUMERIC_HOST.fullmatch(bare):
        return None
    try:
        return IPv4Address(socket.inet_aton(bare))
    except OSError:
        return None


def embedded_ipv4(address: IPAddress) -> IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, compatible, 6to4, NAT64), if any."""
    if isinstance(address, IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in net for net in _NAT64) or (address in _COMPATIBLE and int(address) > 1):
        return IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def refusal_kind(address: IPAddress, show_carried: bool = True) -> str | None:
    """Why callbacks may not reach ``address`` ("a loopback address", ...), or None for
    a public address. An IPv6 address carrying an IPv4 one is judged by the latter,
    named in the phrase when ``show_carried``."""
    carried = embedded_ipv4(address)
    if carried is not None:
        kind = refusal_kind(carried)
        if kind is None or not show_carried:
            return kind if kind is None else f"{kind} inside IPv6"
        return f"{kind} ({carried} inside IPv6)"
    checks: list[tuple[bool, str]] = [
        (address.is_unspecified, "the unspecified address"),
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address (the cloud metadata address is one)"),
        (address in _SHARED, "a shared address (carrier-grade NAT, 100.64.0.0/10)"),
        (address.is_multicast, "a multicast address"),
        (address in _SITE_LOCAL, "a site-local address"),
        (address.is_private, "a private address"),
        (address.is_reserved, "a reserved address"),
        (not address.is_global, "not a public address"),
    ]
    return next((kind for refused, kind in checks if refused), None)


@dataclass(frozen=True)
class CallbackTarget:
    """What a callback URL asks to reach: its host (as httpx sends it) and port."""

    url: str
    host: str
    port: int


@dataclass(frozen=True)
class CallbackUrlPolicy:
    """Which callback URLs are accepted; built from the two settings, passed explicitly."""

    allowed_networks: tuple[IPNetwork, ...] = ()
    https_only: bool = False

    @classmethod
    def from_settings(cls, allowed_networks: str, https_only: bool) -> CallbackUrlPolicy:
        """The policy of ``KAIROS_CALLBACK_ALLOWED_NETWORKS`` and ``_HTTPS_ONLY``."""
        return cls(parse_networks(allowed_networks), https_only)

    def for_app(self, networks: tuple[IPNetwork, ...] | None) -> CallbackUrlPolicy:
        """The policy of an app whose own allowed networks are ``networks``: they replace
        the cluster's default (this policy's); None keeps the default."""
        return self if networks is None else replace(self, allowed_networks=networks)

    def target(self, url: str) -> CallbackTarget:
        """Check what the URL itself says (scheme, user:password, a numeric host); no
        name is resolved here. Raises ``CallbackUrlRefusedError``."""
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as e:
            raise CallbackUrlRefusedError(url, f"cannot be read as a URL ({e})") from e
        schemes = ("https",) if self.https_only else ("http", "https")
        if parsed.scheme not in schemes:
            wanted = "an https:// URL (KAIROS_CALLBACK_HTTPS_ONLY is set)"
            raise CallbackUrlRefusedError(
                url, f"is not {wanted if self.https_only else 'an http:// or https:// URL'}"
            )
        if parsed.userinfo:
            raise CallbackUrlRefusedError(
                url, "carries a user:password part; authenticate with the signature headers"
            )
        host = parsed.raw_host.decode("ascii")
        if not host:
            raise CallbackUrlRefusedError(url, "names no host")
        target = CallbackTarget(url, host, parsed.port or (443 if parsed.scheme == "https" else 80))
        literal = numeric_host(host)
        if literal is not None:
            self.check_address(target, literal)
        return target

    def admits(self, address: IPAddress) -> bool:
        """Whether an allowed network holds ``address`` (or the IPv4 one it carries)."""
        candidates = [address, embedded_ipv4(address)]
        return any(
            a is not None and a.version == net.version and a in net
            for a in candidates
            for net in self.allowed_networks
        )

    def check_address(self, target: CallbackTarget, address: IPAddress) -> None:
        """Raise ``CallbackAddressRefusedError`` unless callbacks may reach ``address``;
        its message names the address only when the URL's host is that address."""
        literal = numeric_host(target.host) is not None
        kind = refusal_kind(address, show_carried=literal)
        if kind is not None and not self.admits(address):
            raise CallbackAddressRefusedError(target.url, target.host, str(address), kind, literal)


class SystemResolver:
    """The operating system's resolver (getaddrinfo), off the event loop and bounded in
    time: a slow DNS server fails the check instead of holding the caller. Lookups run
    in threads no other work shares (``common.host_lookups``), so lookups that hang hold
    no other host's lookup."""

    def __init__(
        self,
        timeout_seconds: float = RESOLVE_TIMEOUT_SECONDS,
        getaddrinfo: Callable[..., Sequence[Any]] = socket.getaddrinfo,
        max_threads: int = MAX_LOOKUP_THREADS,
    ) -> None:
        self._timeout = timeout_seconds
        self._lookups = HostLookups(getaddrinfo, max_threads)

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        """Every address ``host`` resolves to for TCP on ``port``."""
        try:
            found = await self._lookups.getaddrinfo(host, port, self._timeout)
        except TimeoutError as e:
            raise TimeoutError(f"no answer within {self._timeout:g} s") from e
        return list(dict.fromkeys(ip_address(str(info[4][0])) for info in found))


class CachingResolver:
    """A resolver remembering each host's addresses for ``ttl_seconds``, for the API: a
    burst of creates, or a batch of a thousand, naming one host resolves it once (a
    lookup under way is shared, a failed one is not remembered). Only the submission
    check uses it; the notifier resolves anew before it connects. For one event loop."""

    def __init__(
        self,
        inner: Resolver,
        ttl_seconds: float = 30.0,
        max_hosts: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inner = inner
        self._ttl = ttl_seconds
        self._max_hosts = max_hosts
        self._clock = clock
        self._entries: dict[tuple[str, int], tuple[float, asyncio.Future[Sequence[IPAddress]]]] = {}

    async def __call__(self, host: str, port: int) -> Sequence[IPAddress]:
        """The addresses of ``host``, remembered or looked up now."""
        key, now = (host, port), self._clock()
        entry = self._entries.get(key)
        if entry is None or now - entry[0] >= self._ttl:
            if len(self._entries) >= self._max_hosts:
                self._entries.clear()
            entry = (now, asyncio.ensure_future(self._inner(host, port)))
            self._entries[key] = entry
        try:
            # Shielded: one caller giving up does not cancel the lookup the others share.
            return await asyncio.shield(entry[1])
        except BaseException:
            if self._entries.get(key) is entry and entry[1].done():
                del self._entries[key]
            raise


class TableResolver:
    """A resolver answering from a table (host -> addresses), for tests and demos; an
    unknown host fails as a name the DNS does not know. The table may change between
    calls, as DNS answers do (a rebinding attack is that)."""

    def __init__(self, table: dict[str, list[str]] | None = None) -> None:
        self.table: dict[str, list[str]] = dict(table or {})
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        """The addresses the table holds for ``host``."""
        self.asked.append(host)
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [ip_address(a) for a in self.table[host]]


async def checked_addresses(
    policy: CallbackUrlPolicy, resolver: Resolver, url: str
) -> tuple[CallbackTarget, list[IPAddress]]:
    """The URL's target and every address it reaches, each one checked: one refused
    address refuses the URL. Raises ``CallbackUrlRefusedError`` (or a subclass)."""
    target = policy.target(url)
    return target, await target_addresses(policy, resolver, target)


async def target_addresses(
    policy: CallbackUrlPolicy, resolver: Resolver, target: CallbackTarget
) -> list[IPAddress]:
    """Every address ``target``'s host reaches, resolved now and each one checked."""
    literal = numeric_host(target.host)
    if literal is not None:
        policy.check_address(target, literal)
        return [literal]
    try:
        addresses = list(await resolver(target.host, target.port))
    except (OSError, TimeoutError, UnicodeError) as e:
        raise CallbackHostUnresolvedError(
            target.url, target.host, str(e) or type(e).__name__
        ) from e
    if not addresses:
        raise CallbackHostUnresolvedError(target.url, target.host, "no address")
    for address in addresses:
        policy.check_address(target, address)
    return addresses
