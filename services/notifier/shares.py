"""Sharing the notifier's attempts between apps and between receiving hosts, so one
app's receivers, or one slow host, never take them all.

A receiver that hangs holds an attempt for the whole request timeout. Without a share,
an app whose receiver hangs, with enough callbacks queued, would hold every attempt the
notifier runs at once, and every other app's callbacks would wait behind it. Apps are
not enough: many apps may post to one host (a shared integration platform), and one app
may post to many hosts of which one hangs. So a host has a share of its own too: its
registrable domain and the address it resolves to each count, so neither fresh
subdomains of one domain nor many names for one server get a share each.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import cache, lru_cache
from urllib.parse import urlsplit

from publicsuffixlist import PublicSuffixList

from common.host_lookups import HostLookups


class AppShares:
    """Attempts in flight, per app (or any key: a host), out of ``slots`` (the
    notifier's concurrency).

    An app may have ``share`` attempts in flight at once, and more only while ``share``
    slots stay free for the others: an app alone may use most of the notifier, and one
    whose receivers hang holds at most ``slots - share`` attempts. Not thread-safe by
    itself: ``DeliveryShares`` holds the lock.
    """

    def __init__(self, slots: int, share: int) -> None:
        self._slots = slots
        self._share = max(1, share)
        self._by_app: dict[Hashable, int] = {}
        self._total = 0

    def twin(self) -> AppShares:
        """Empty shares of the same slots and share, for another kind of key."""
        return AppShares(self._slots, self._share)

    def allows(self, app_id: Hashable) -> bool:
        """Whether one more attempt of the app fits now."""
        held = self._by_app.get(app_id, 0)
        return held < self._share or self._slots - (self._total + 1) >= self._share

    def take(self, app_id: Hashable) -> bool:
        """Count one more attempt of the app; False if it must wait for its turn."""
        if not self.allows(app_id):
            return False
        self._by_app[app_id] = self._by_app.get(app_id, 0) + 1
        self._total += 1
        return True

    def give_back(self, app_id: Hashable) -> None:
        """The app's attempt ended."""
        held = self._by_app.get(app_id, 0) - 1
        if held > 0:
            self._by_app[app_id] = held
        else:
            self._by_app.pop(app_id, None)
        self._total -= 1


def default_share(slots: int) -> int:
    """An app's share of ``slots`` attempts when no setting gives one: a quarter."""
    return max(1, slots // 4)


# How long an answer of ``lookup_address`` is used before the name is looked up again.
ADDRESS_KEEP_SECONDS = 30.0

AddressOf = Callable[[str, int], "str | None"]
"""The address a host name (and port) resolves to now, or None when it does not."""


def no_address(_host: str, _port: int) -> str | None:
    """An ``AddressOf`` that resolves nothing: shares count by domain alone."""
    return None


@cache
def _suffixes() -> PublicSuffixList:
    # The list bundled with the package: nothing is fetched.
    return PublicSuffixList()


# Bounded: a notifier sees a few receiving hosts again and again, and each reading of
# one parses it as an address and walks the suffix list.
@lru_cache(maxsize=4096)
def registrable_domain(host: str) -> str:
    """The part of ``host`` one owner registers (``x.com`` for ``a.b.x.com``,
    ``bar.co.uk`` for ``foo.bar.co.uk``), by the public suffix list; an address, or a
    name that is itself a public suffix (``localhost``), is its own."""
    name = host.lower().rstrip(".")
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        pass
    return _suffixes().privatesuffix(name) or name


@dataclass(frozen=True)
class HostKeys:
    """The host keys one attempt counts against."""

    domain: str
    address: str | None


class ShareKeys:
    """What one callback attempt counts against besides its app: the registrable domain
    of its URL's host, so ``a.x.com``, ``b.x.com``, ... share one share, and the address
    the host resolves to, so two names on one address share one too; each with the
    port, so two services of one machine are two receivers."""

    def __init__(self, address_of: AddressOf = no_address) -> None:
        self._address_of = address_of

    def of(self, url: str) -> HostKeys:
        """The registrable domain of ``url``'s host, and the address it resolves to
        (None when it does not, or when the host is an address itself)."""
        try:
            host, port = host_and_port(url)
        except ValueError:
            return HostKeys(url, None)
        address = self._address_of(host, port)
        # With the port: two services on one machine are two receivers.
        resolved = f"{address}:{port}" if address is not None and address != host else None
        return HostKeys(f"{registrable_domain(host)}:{port}", resolved)


@lru_cache(maxsize=4096)
def host_and_port(url: str) -> tuple[str, int]:
    """The host of ``url`` and its port (the scheme's when none is given); raises
    ValueError for a URL that has none that can be read."""
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def lookup_address(
    lookups: HostLookups, timeout: float, keep_seconds: float = ADDRESS_KEEP_SECONDS
) -> AddressOf:
    """An ``AddressOf`` on ``lookups`` (threads of their own): the first TCP address,
    kept ``keep_seconds``; None when the name does not resolve within ``timeout`` (the
    attempt then fails on its own lookup, and counts by domain meanwhile)."""
    kept: dict[tuple[str, int], tuple[float, str | None]] = {}

    def address_of(host: str, port: int) -> str | None:
        now = time.monotonic()
        cached = kept.get((host, port))
        if cached is not None and now - cached[0] < keep_seconds:
            return cached[1]
        try:
            found = lookups.lookup(host, port, timeout)
        except (OSError, TimeoutError):
            return None
        address = str(found[0][4][0]) if found else None
        if len(kept) > 10_000:
            kept.clear()
        kept[(host, port)] = (now, address)
        return address

    return address_of


class BackgroundAddresses:
    """An ``AddressOf`` that never blocks its caller (the consumer's connection thread):
    a name's address as last looked up, kept ``keep_seconds``; a name not looked up yet,
    or whose answer is older, is looked up in a thread of its own, and counts by its
    answer from then on (by domain alone until the first one)."""

    def __init__(self, lookup: AddressOf, keep_seconds: float = ADDRESS_KEEP_SECONDS) -> None:
        self._lookup = lookup
        self._keep = keep_seconds
        self._kept: dict[tuple[str, int], tuple[float, str | None]] = {}
        self._asked: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def __call__(self, host: str, port: int) -> str | None:
        """The address last found for ``host``, looking it up again if it is stale."""
        key = (host, port)
        with self._lock:
            kept = self._kept.get(key)
            fresh = kept is not None and time.monotonic() - kept[0] < self._keep
            if not fresh and key not in self._asked and len(self._asked) < MAX_LOOKUPS:
                self._asked.add(key)
                threading.Thread(target=self._refresh, args=key, daemon=True).start()
        return kept[1] if kept is not None else None

    def _refresh(self, host: str, port: int) -> None:
        try:
            address = self._lookup(host, port)
        finally:
            with self._lock:
                self._asked.discard((host, port))
        with self._lock:
            if len(self._kept) > 10_000:
                self._kept.clear()
            self._kept[(host, port)] = (time.monotonic(), address)


# Lookups under way at once, at most; a name past it counts by domain until one ends.
MAX_LOOKUPS = 64


class DeliveryShares:
    """An attempt takes a slot of its app's share and of its receiving host's shares
    (domain and address), all or none.

    Nothing waits here: a callback over a share stays in the notifier's line
    (``services.notifier.fair_line``) without a slot, and the callbacks behind it go
    first. Not thread-safe by itself: ``AttemptScheduler`` holds the lock.
    """

    def __init__(self, apps: AppShares, hosts: AppShares) -> None:
        self._apps = apps
        self._domains = hosts
        self._addresses = hosts.twin()

    def take(self, app_id: int, hosts: HostKeys) -> bool:
        """Count one more attempt of the app to these host keys; False if one of its
        shares is full."""
        if not (self._apps.allows(app_id) and self._hosts_allow(hosts)):
            return False
        self._apps.take(app_id)
        self._domains.take(hosts.domain)
        if hosts.address is not None:
            self._addresses.take(hosts.address)
        return True

    def _hosts_allow(self, hosts: HostKeys) -> bool:
        if not self._domains.allows(hosts.domain):
            return False
        return hosts.address is None or self._addresses.allows(hosts.address)

    def give_back(self, app_id: int, hosts: HostKeys) -> None:
        """The attempt ``take`` counted ended: its very keys are given back, even when
        the host resolves elsewhere by then."""
        self._apps.give_back(app_id)
        self._domains.give_back(hosts.domain)
        if hosts.address is not None:
            self._addresses.give_back(hosts.address)
