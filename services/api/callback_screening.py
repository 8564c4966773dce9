"""Callback URLs checked at submission against the callback URL policy, names resolved.

A create, a batch or a patch that carries a callback URL has it checked here before
anything is written: the URL itself and every address its host resolves to
(``common.callback_urls``). Resolving runs off the event loop and is bounded in time
(``SystemResolver``), so a slow DNS server refuses a URL rather than holding the API.
The synchronous routes (batch, patch) run in worker threads and call in through
``anyio.from_thread``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import anyio.from_thread

from common.callback_urls import CallbackUrlPolicy, Resolver, checked_addresses
from common.errors import CallbackUrlRefusedError


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
