"""Callback URLs checked at submission against the callback URL policy, names resolved.

A create, a batch or a patch that carries a callback URL has it checked here before
anything is written: the URL itself and every address its host resolves to
(``common.callback_urls``). Resolving runs off the event loop and is bounded in time
(``SystemResolver``), so a slow DNS server refuses a URL rather than holding the API.
The synchronous routes (batch, patch) run in worker threads and call in through
``anyio.from_thread``.

Each app resolves with a resolver of its own (``ResolverPerApp``): a lookup that hangs
holds its thread until the DNS gives up, and one resolver holds a bounded number of
threads, so an app naming a thousand fresh subdomains of a silent domain in one batch
uses up its own lookups, never another app's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

import anyio.from_thread

from common.callback_urls import (
    CachingResolver,
    CallbackUrlPolicy,
    Resolver,
    SystemResolver,
    checked_addresses,
)
from common.errors import CallbackUrlRefusedError

# Lookups one app's resolver runs at once (a thousand hosts at ~100 ms each: ~1.6 s).
APP_LOOKUP_THREADS = 64


def system_resolver() -> Resolver:
    """One app's resolver by default: the system's, each answer kept 30 s."""
    return CachingResolver(SystemResolver(max_threads=APP_LOOKUP_THREADS))


class ResolverPerApp:
    """Each app's own resolver, built by ``build`` at the app's first lookup."""

    def __init__(self, build: Callable[[], Resolver] = system_resolver) -> None:
        self._build = build
        self._resolvers: dict[int, Resolver] = {}
        self._lock = threading.Lock()

    def __call__(self, app_pk: int) -> Resolver:
        """The resolver of the app whose primary key is ``app_pk``."""
        with self._lock:
            found = self._resolvers.get(app_pk)
            if found is None:
                found = self._resolvers[app_pk] = self._build()
            return found


async def screen_callback_url(policy: CallbackUrlPolicy, resolver: Resolver, url: str) -> None:
    """Raise ``CallbackUrlRefusedError`` (a 422 naming ``callbackUrl``) if the policy
    refuses ``url`` or any address it resolves to."""
    await checked_addresses(policy, resolver, url)


async def refused_callback_urls(
    policy: CallbackUrlPolicy, resolver: Resolver, urls: Sequence[str | None]
) -> dict[int, CallbackUrlRefusedError]:
    """The refusal of each URL the policy refuses, by index; each distinct URL is
    checked once, all of them at once."""
    distinct = sorted({url for url in urls if url})
    outcomes = await asyncio.gather(
        *(screen_callback_url(policy, resolver, url) for url in distinct),
        return_exceptions=True,
    )
    refusals: dict[str, CallbackUrlRefusedError] = {}
    for url, outcome in zip(distinct, outcomes, strict=True):
        if isinstance(outcome, CallbackUrlRefusedError):
            refusals[url] = outcome
        elif isinstance(outcome, BaseException):
            raise outcome
    return {i: refusals[url] for i, url in enumerate(urls) if url and url in refusals}


def refused_callback_urls_from_thread(
    policy: CallbackUrlPolicy, resolver: Resolver, urls: Sequence[str | None]
) -> dict[int, CallbackUrlRefusedError]:
    """``refused_callback_urls`` for a synchronous route's worker thread: run on the
    event loop; a route without any callback URL skips it."""
    if not any(urls):
        return {}
    return anyio.from_thread.run(refused_callback_urls, policy, resolver, urls)


def screen_callback_url_from_thread(
    policy: CallbackUrlPolicy, resolver: Resolver, url: str | None
) -> None:
    """``screen_callback_url`` for a synchronous route's worker thread (None: nothing)."""
    refused = refused_callback_urls_from_thread(policy, resolver, [url])
    if refused:
        raise refused[0]
