"""What the API process holds for its requests: stores, clock and small caches."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from sqlalchemy.engine import Engine

from common.callback_urls import CallbackUrlPolicy
from common.clock import ClusterClock
from common.config import ApiSettings
from common.db.apps import App, MySqlAppTransactions
from common.db.workers import MySqlWorkerTransactions
from common.keys import RedisKeys
from common.tracing.spans import NO_TRACING, Tracing
from common.worker_marks import RedisWorkerMarks
from services.api.auth_failures import FailedAuthentications
from services.api.callback_screening import ResolverPerApp
from services.api.group_insert import GroupInserter
from services.api.rate_limit import RateLimiter


@dataclass
class ApiState:
    """Built once in ``create_app`` and reached by dependencies through ``app.state``."""

    settings: ApiSettings
    engine: Engine
    redis: redis.Redis
    clock: ClusterClock
    keys: RedisKeys
    # Set by create_app: it announces stored jobs through this state.
    inserter: GroupInserter = field(init=False)
    # None when KAIROS_RATE_LIMIT_PER_SECOND is 0 (on by default).
    rate_limiter: RateLimiter | None = None
    # Failed authentications per client address (KAIROS_AUTH_FAILURE_*); set by
    # create_app, counting nothing until then.
    failed_auth: FailedAuthentications | None = None
    # Which callback URLs a job may carry (KAIROS_CALLBACK_*; an app's own networks
    # replace the default's, ``policy_for``), and how each app's callback hosts resolve.
    callback_policy: CallbackUrlPolicy = field(default_factory=CallbackUrlPolicy)
    resolvers: ResolverPerApp = field(default_factory=ResolverPerApp)
    # Spans of traced jobs (``common.tracing.spans``); none unless OTLP is set up.
    tracing: Tracing = NO_TRACING
    # The clock the caches age by; tests move a fake one.
    monotonic: Callable[[], float] = time.monotonic
    _handlers: frozenset[str] = frozenset()
    _handlers_at: float = -1e18
    _apps: dict[str, tuple[float, App]] = field(default_factory=dict)
    _misses: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def policy_for(self, app: App) -> CallbackUrlPolicy:
        """The callback URL policy of ``app``: its own allowed networks, or the cluster's
        default (``KAIROS_CALLBACK_ALLOWED_NETWORKS``) when it has none."""
        return self.callback_policy.for_app(app.callback_networks)

    def apps(self) -> MySqlAppTransactions:
        """The apps aggregate on the engine (``common/db/apps``)."""
        return MySqlAppTransactions(self.engine)

    def workers(self) -> MySqlWorkerTransactions:
        """The workers aggregate on the engine (``common/db/workers.py``)."""
        return MySqlWorkerTransactions(self.engine)

    def worker_marks(self) -> RedisWorkerMarks:
        """The workers' heartbeat hashes and operators' orders (``common/worker_marks.py``)."""
        return RedisWorkerMarks(self.redis, self.keys)

    def known_handlers(self) -> frozenset[str]:
        """Handler names some worker has registered, re-read every few seconds."""
        with self._lock:
            if self.monotonic() - self._handlers_at > self.settings.handler_cache_seconds:
                with self.workers().reading() as workers:
                    self._handlers = frozenset(workers.registered_handlers())
                self._handlers_at = self.monotonic()
            return self._handlers

    def caches_fresh(self) -> bool:
        """Whether the handler list and the cluster clock answer without a store."""
        handlers_age = self.monotonic() - self._handlers_at
        return handlers_age <= self.settings.handler_cache_seconds and self.clock.fresh()

    def cached_app(self, api_key: str) -> App | None:
        """The app owning ``api_key`` if a recent lookup found it; never touches MySQL.

        The app comes with its handler patterns and whether it is disabled, so a change
        to them (``kairos app handlers``, ``disable``, ``revoke-key``) applies here once
        the entry is ``auth_cache_seconds`` old. A key's own end (an overlapping
        rotation) applies at once, by the database's clock read at the lookup.
        """
        cached = self._apps.get(api_key)
        if not cached:
            return None
        age = self.monotonic() - cached[0]
        app = cached[1]
        if age >= self.settings.auth_cache_seconds:
            return None
        if app.key_expires_in_ms is not None and age * 1000 >= app.key_expires_in_ms:
            return None
        return app

    def known_key(self, api_key: str) -> bool:
        """Whether a lookup found ``api_key`` before (however long ago) and none has
        failed it since: such a key is looked up again even from a throttled address,
        so an app sharing an address with a flood keeps working after its cache entry
        lapses."""
        return api_key in self._apps

    def known_miss(self, api_key: str) -> bool:
        """Whether a lookup found no app for ``api_key`` less than
        ``auth_miss_cache_seconds`` ago; never touches MySQL."""
        at = self._misses.get(api_key)
        return at is not None and self.monotonic() - at < self.settings.auth_miss_cache_seconds

    def app_for_key(self, api_key: str) -> App | None:
        """The app owning ``api_key``, with its handler patterns. Hits are cached for
        ``auth_cache_seconds``, misses for ``auth_miss_cache_seconds``, so a flood of
        one bad key costs one query."""
        now = self.monotonic()
        cached = self.cached_app(api_key)
        if cached is not None:
            return cached
        if self.known_miss(api_key):
            return None
        with self.apps().reading() as apps:
            app = apps.find_app_by_key(api_key)
        remembered = self._apps if app is not None else self._misses
        # Bounded: many distinct keys start the cache afresh rather than grow it.
        if len(remembered) > 10_000:
            remembered.clear()
        if app is not None:
            self._apps[api_key] = (now, app)
        else:
            self._apps.pop(api_key, None)
            self._misses[api_key] = now
        return app
