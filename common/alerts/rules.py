"""Alert rules: their rows, how operators add, list and remove them (each change in
the audit trail), and the cache the firing stages read them through."""

from __future__ import annotations

import base64
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from common.alerts.kinds import AlertKind, AlertRuleInvalid, kinds_text, parse_kinds
from common.callback_urls import CallbackUrlPolicy
from common.db.audit import AuditEntry, record_audit
from common.db.rows import AnyRow
from common.db.schema import alert_rules, apps
from common.documents import JsonObject
from common.timefmt import iso_ms

DEFAULT_EVERY_SECONDS = 600
MAX_STREAK = 10_000
# Rules are read again this often by the stages that fire them.
REFRESH_SECONDS = 3.0


@dataclass(frozen=True, slots=True)
class AlertRule:
    """One ``alert_rules`` row, without its secret."""

    rule_pk: int
    rule_id: str
    app_pk: int | None
    app_id: str | None
    url: str
    kinds: tuple[AlertKind, ...]
    streak: int
    every_seconds: int
    created_at: int
    created_by: str

    @classmethod
    def from_row(cls, row: AnyRow) -> AlertRule:
        """The rule a ``select(alert_rules, apps.c.app_id)`` row holds."""
        return cls(
            rule_pk=int(row.id),
            rule_id=row.rule_id,
            app_pk=row.app_pk,
            app_id=row.app_id,
            url=row.url,
            kinds=parse_kinds(row.kinds),
            streak=int(row.streak),
            every_seconds=int(row.every_seconds),
            created_at=int(row.created_at),
            created_by=row.created_by,
        )

    @property
    def every_ms(self) -> int:
        """At most one alert per this many ms per kind and job (or worker)."""
        return self.every_seconds * 1000

    def covers(self, kind: AlertKind, app_pk: int | None) -> bool:
        """Whether an event of ``kind`` of the app ``app_pk`` (None: no app) fires it."""
        return kind in self.kinds and (self.app_pk is None or self.app_pk == app_pk)

    def as_dict(self) -> JsonObject:
        """The rule as ``kairos alerts list -o json`` and the audit trail show it."""
        return {
            "ruleId": self.rule_id,
            "app": self.app_id,
            "url": self.url,
            "on": kinds_text(self.kinds),
            "streak": self.streak,
            "everySeconds": self.every_seconds,
            "createdAt": iso_ms(self.created_at),
            "createdBy": self.created_by,
        }


@dataclass(frozen=True)
class NewAlertRule:
    """What an operator asks for: ``kairos alerts add``."""

    url: str
    kinds: tuple[AlertKind, ...]
    app_id: str | None = None
    streak: int = 1
    every_seconds: int = DEFAULT_EVERY_SECONDS

    def check(self) -> None:
        """Raise ``AlertRuleInvalid`` saying what to change when the rule cannot work."""
        if not self.url.startswith(("http://", "https://")):
            raise AlertRuleInvalid("the webhook URL must start with http:// or https://")
        if not 1 <= self.streak <= MAX_STREAK:
            raise AlertRuleInvalid(f"--streak must be between 1 and {MAX_STREAK}")
        if self.every_seconds < 1:
            raise AlertRuleInvalid("--every must be at least 1 second")
        if self.app_id is not None and AlertKind.WORKER_GONE in self.kinds:
            raise AlertRuleInvalid(
                "WORKER_GONE concerns every app's workers: add it in a rule without --app"
            )


def new_signing_secret() -> str:
    """A fresh ``whsec_`` secret, as an app's."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def _rules_query() -> sa.Select[tuple[object, ...]]:
    return sa.select(alert_rules, apps.c.app_id).select_from(
        alert_rules.outerjoin(apps, apps.c.id == alert_rules.c.app_pk)
    )


def read_rules(conn: Connection) -> list[AlertRule]:
    """Every rule, oldest first."""
    return [AlertRule.from_row(r) for r in conn.execute(_rules_query().order_by(alert_rules.c.id))]


def add_rule(
    conn: Connection,
    asked: NewAlertRule,
    actor: str,
    now_ms: int,
    policy: CallbackUrlPolicy | None = None,
) -> tuple[AlertRule, str]:
    """Store a rule and its audit row in the caller's transaction: the rule, and its
    signing secret (to show once). With the callback URL ``policy``, a webhook the
    notifier would refuse to reach is refused now (``CallbackUrlRefusedError``) rather
    than at its first alert."""
    asked.check()
    if policy is not None:
        policy.target(asked.url)
    app_pk = None
    if asked.app_id is not None:
        app_pk = conn.execute(sa.select(apps.c.id).where(apps.c.app_id == asked.app_id)).scalar()
        if app_pk is None:
            raise AlertRuleInvalid(f"no app {asked.app_id}: see kairos app list")
    secret = new_signing_secret()
    rule_id = "alr_" + secrets.token_hex(8)
    conn.execute(
        alert_rules.insert().values(
            rule_id=rule_id,
            app_pk=app_pk,
            url=asked.url,
            kinds=kinds_text(asked.kinds),
            streak=asked.streak,
            every_seconds=asked.every_seconds,
            signing_secret=secret,
            created_at=now_ms,
            created_by=actor[:128],
        )
    )
    rule = find_rule(conn, rule_id)
    assert rule is not None
    entry = AuditEntry(actor, "alert.add", "alert_rule", rule_id, app_pk, after=rule.as_dict())
    record_audit(conn, [entry], now_ms)
    return rule, secret


def find_rule(conn: Connection, rule_id: str) -> AlertRule | None:
    """One rule by its id."""
    row = conn.execute(_rules_query().where(alert_rules.c.rule_id == rule_id)).first()
    return AlertRule.from_row(row) if row is not None else None


def remove_rule(conn: Connection, rule_id: str, actor: str, now_ms: int) -> AlertRule | None:
    """Delete a rule (its state and its alerts not yet delivered go with it) and write
    its audit row; the rule removed, None when there is none by that id."""
    rule = find_rule(conn, rule_id)
    if rule is None:
        return None
    conn.execute(alert_rules.delete().where(alert_rules.c.id == rule.rule_pk))
    entry = AuditEntry(
        actor, "alert.remove", "alert_rule", rule_id, rule.app_pk, before=rule.as_dict()
    )
    record_audit(conn, [entry], now_ms)
    return rule


def signing_secret(conn: Connection, rule_pk: int) -> str | None:
    """The secret that signs a rule's alerts; None when the rule is gone."""
    found = conn.execute(
        sa.select(alert_rules.c.signing_secret).where(alert_rules.c.id == rule_pk)
    ).scalar()
    return str(found) if found is not None else None


class RuleCache:
    """The rules as a firing stage reads them: from MySQL at most every
    ``refresh_seconds``, so a run's end costs no query (safe from any thread)."""

    def __init__(
        self,
        engine: Engine,
        refresh_seconds: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._refresh = refresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._rules: tuple[AlertRule, ...] = ()
        self._read_at: float | None = None

    def rules(self) -> Sequence[AlertRule]:
        """The rules, read again when the last read is older than the refresh."""
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= self._refresh:
                with self._engine.connect() as conn:
                    self._rules = tuple(read_rules(conn))
                self._read_at = now
            return self._rules


class FixedRules:
    """Rules that never change: for unit tests and stages given rules outright."""

    def __init__(self, rules: Sequence[AlertRule]) -> None:
        self._rules = tuple(rules)

    def rules(self) -> Sequence[AlertRule]:
        """The rules given."""
        return self._rules


class RuleSource(Protocol):
    """Where a firing stage reads the rules: ``RuleCache``, or ``FixedRules``."""

    def rules(self) -> Sequence[AlertRule]:
        """The rules as they stand (or stood a few seconds ago)."""
        ...
