"""The app store contract, which ``MySqlAppStore`` and ``MemoryStore`` keep: apps and
their API keys (made, rotated with an overlap, revoked, found by key on the store's
clock), signing secrets, grants and limits, the dispatcher's policies, what an app's
jobs and runs amount to, and the audit row of a change written in its transaction.

A store may hold apps other than those a test makes (MySQL's harness has one): every
read is compared on the test's own apps.
"""

from __future__ import annotations

import dataclasses

import pytest

from common.callback_urls import parse_networks
from common.db.apps import App, AppCredentials, AppPolicy, AppRecord
from common.db.executions import NewExecution, Outcome
from common.db.records import NO_LIMITS, AppLimits
from common.handler_patterns import EVERY_HANDLER, NO_HANDLER, HandlerPatterns
from common.operator_roles import AppScope
from common.states import ExecutionStatus, JobStatus
from tests.contracts.store_harness import StoreHarness

REPORTS = HandlerPatterns(("report.*", "billing.export"))
HOUR_MS = 3_600_000


class AppStoreContract(StoreHarness):
    """What every app store does, call by call."""

    def an_app(self, name: str = "billing", at: int = 1_000) -> AppCredentials:
        return self.app_store.create_app(name, at, REPORTS)

    def record(self, app_id: str) -> AppRecord:
        found = self.app_store.app_record(app_id)
        assert found is not None
        return found

    def mine(self, *apps: AppCredentials) -> list[str]:
        """The ids of ``apps`` in the order ``all_apps`` lists them."""
        ids = {a.app_id for a in apps}
        return [r.app_id for r in self.app_store.all_apps() if r.app_id in ids]

    # create_app, app_record, all_apps

    def test_a_new_app_is_listed_oldest_first_with_its_grants_and_no_limits(self) -> None:
        billing = self.an_app("billing", 1_000)
        reports = self.app_store.create_app("reports", 2_000, NO_HANDLER)
        assert billing.app_id.startswith("app_") and billing.key_id.startswith("key_")
        assert billing.api_key.startswith("kairos_") and billing.signing_secret
        assert len({billing.app_id, reports.app_id}) == 2
        assert self.mine(reports, billing) == [billing.app_id, reports.app_id]
        record = self.record(billing.app_id)
        assert (record.name, record.created_at, record.handlers) == ("billing", 1_000, REPORTS)
        assert (record.disabled_at, record.callback_networks, record.limits) == (
            None,
            None,
            NO_LIMITS,
        )
        assert record in self.app_store.all_apps()
        assert self.record(reports.app_id).handlers == NO_HANDLER
        assert self.app_store.app_record("app_nope") is None

    # apps_by_key

    def test_apps_by_key_are_those_in_scope_by_name_with_their_fences(self) -> None:
        zeta, alpha = self.an_app("zeta"), self.app_store.create_app("alpha", 2, NO_HANDLER)
        zeta_pk, alpha_pk = self.record(zeta.app_id).id, self.record(alpha.app_id).id
        self.app_store.set_disabled(zeta.app_id, 3)
        every = {
            pk: a for pk, a in self.app_store.apps_by_key().items() if pk in {zeta_pk, alpha_pk}
        }
        assert list(every) == [alpha_pk, zeta_pk]
        assert every[alpha_pk] == App(alpha_pk, alpha.app_id, "alpha", NO_HANDLER)
        assert every[zeta_pk] == App(zeta_pk, zeta.app_id, "zeta", REPORTS, disabled=True)
        scoped = self.app_store.apps_by_key(AppScope(frozenset({zeta_pk})))
        assert list(scoped) == [zeta_pk]

    # find_app_by_key, database_now_ms

    def test_a_key_finds_its_app_with_its_grants_and_key_id(self) -> None:
        created = self.an_app()
        other = self.an_app("other")
        found = self.app_store.find_app_by_key(created.api_key)
        assert found is not None
        assert (found.app_id, found.name, found.handlers) == (created.app_id, "billing", REPORTS)
        assert (found.disabled, found.key_expires_in_ms) == (False, None)
        assert (found.callback_networks, found.limits) == (None, NO_LIMITS)
        assert found.actor == created.key_id
        assert found.id == self.record(created.app_id).id
        found_other = self.app_store.find_app_by_key(other.api_key)
        assert found_other is not None and found_other.app_id == other.app_id
        assert self.app_store.find_app_by_key("kairos_nope") is None

    # rotate_api_key, app_keys

    def test_a_rotated_key_leaves_the_others_working_until_the_overlap_ends(self) -> None:
        created = self.an_app()
        now = self.app_store.database_now_ms()
        rotated = self.app_store.rotate_api_key(created.app_id, now, now + HOUR_MS)
        assert rotated is not None and rotated.api_key != created.api_key
        old = self.app_store.find_app_by_key(created.api_key)
        assert old is not None and old.key_expires_in_ms is not None
        assert HOUR_MS - 60_000 < old.key_expires_in_ms <= HOUR_MS
        new = self.app_store.find_app_by_key(rotated.api_key)
        assert new is not None and new.key_expires_in_ms is None
        assert new.actor == rotated.key_id
        keys = self.app_store.app_keys(created.app_id)
        assert keys is not None
        assert [(k.key_id, k.expires_at, k.revoked_at) for k in keys] == [
            (created.key_id, now + HOUR_MS, None),
            (rotated.key_id, None, None),
        ]
        assert [k.created_at for k in keys] == [1_000, now]
        assert self.app_store.rotate_api_key("app_nope", now, now) is None
        assert self.app_store.app_keys("app_nope") is None

    def test_a_rotation_without_overlap_stops_the_other_keys_at_once(self) -> None:
        created = self.an_app()
        now = self.app_store.database_now_ms()
        first = self.app_store.rotate_api_key(created.app_id, now, now + HOUR_MS)
        assert first is not None
        second = self.app_store.rotate_api_key(created.app_id, now, now - 1)
        assert second is not None
        assert self.app_store.find_app_by_key(created.api_key) is None
        assert self.app_store.find_app_by_key(first.api_key) is None
        assert self.app_store.find_app_by_key(second.api_key) is not None
        keys = self.app_store.app_keys(created.app_id) or []
        assert [k.expires_at for k in keys] == [now - 1, now - 1, None]

    # revoke_api_key

    def test_a_revoked_key_finds_nothing_and_keeps_its_first_revocation(self) -> None:
        created = self.an_app()
        assert self.app_store.revoke_api_key(created.app_id, created.key_id, 5_000)
        assert self.app_store.find_app_by_key(created.api_key) is None
        assert self.app_store.revoke_api_key(created.app_id, created.key_id, 6_000), "again"
        keys = self.app_store.app_keys(created.app_id) or []
        assert [(k.key_id, k.revoked_at) for k in keys] == [(created.key_id, 5_000)]
        other = self.an_app("other")
        assert not self.app_store.revoke_api_key(other.app_id, created.key_id, 5_000)
        assert not self.app_store.revoke_api_key(created.app_id, "key_nope", 5_000)
        assert not self.app_store.revoke_api_key("app_nope", created.key_id, 5_000)
        assert self.app_store.find_app_by_key(other.api_key) is not None

    # set_disabled, set_handler_patterns, handler_patterns

    def test_a_disabled_app_is_found_disabled_until_enabled_again(self) -> None:
        created = self.an_app()
        assert self.app_store.set_disabled(created.app_id, 7_000)
        found = self.app_store.find_app_by_key(created.api_key)
        assert found is not None and found.disabled
        assert self.record(created.app_id).disabled_at == 7_000
        assert self.app_store.set_disabled(created.app_id, None)
        found = self.app_store.find_app_by_key(created.api_key)
        assert found is not None and not found.disabled
        assert not self.app_store.set_disabled("app_nope", 7_000)

    def test_handler_patterns_are_granted_read_and_found_with_the_key(self) -> None:
        created = self.an_app()
        assert self.app_store.handler_patterns(created.app_id) == REPORTS
        assert self.app_store.set_handler_patterns(created.app_id, EVERY_HANDLER)
        assert self.app_store.set_handler_patterns(created.app_id, EVERY_HANDLER), "unchanged"
        assert self.app_store.handler_patterns(created.app_id) == EVERY_HANDLER
        found = self.app_store.find_app_by_key(created.api_key)
        assert found is not None and found.handlers == EVERY_HANDLER
        assert not self.app_store.set_handler_patterns("app_nope", EVERY_HANDLER)
        assert self.app_store.handler_patterns("app_nope") is None

    # rotate_signing_secret, previous_secret_until, signing_secrets

    def test_a_rotated_secret_signs_with_the_previous_one_until_its_overlap_ends(self) -> None:
        created = self.an_app()
        pk = self.record(created.app_id).id
        assert self.app_store.signing_secrets(pk, 1_000) == [created.signing_secret]
        assert self.app_store.previous_secret_until(created.app_id) is None
        new = self.app_store.rotate_signing_secret(created.app_id, 1_000, 2_000)
        assert new is not None and new != created.signing_secret
        assert self.app_store.signing_secrets(pk, 1_999) == [new, created.signing_secret]
        assert self.app_store.signing_secrets(pk, 2_000) == [new]
        assert self.app_store.rotate_signing_secret(created.app_id, 1_500, 9_000) is None
        assert self.app_store.previous_secret_until(created.app_id) == 2_000
        forced = self.app_store.rotate_signing_secret(created.app_id, 1_500, 9_000, force=True)
        assert forced is not None
        assert self.app_store.signing_secrets(pk, 1_999) == [forced, new]
        assert self.app_store.rotate_signing_secret("app_nope", 1_000, 2_000) is None
        assert self.app_store.signing_secrets(pk + 1_000, 0) == []

    # set_callback_networks, callback_networks

    def test_callback_networks_are_granted_and_reset_to_the_default(self) -> None:
        created = self.an_app()
        pk = self.record(created.app_id).id
        assert self.app_store.callback_networks(pk) is None
        networks = parse_networks("10.0.0.0/8,192.168.1.7")
        assert self.app_store.set_callback_networks(created.app_id, networks)
        assert self.app_store.callback_networks(pk) == networks
        assert self.record(created.app_id).callback_networks == networks
        found = self.app_store.find_app_by_key(created.api_key)
        assert found is not None and found.callback_networks == networks
        assert self.app_store.set_callback_networks(created.app_id, ())
        assert self.app_store.callback_networks(pk) == ()
        assert self.app_store.set_callback_networks(created.app_id, None)
        assert self.app_store.callback_networks(pk) is None
        assert not self.app_store.set_callback_networks("app_nope", networks)
        assert self.app_store.callback_networks(pk + 1_000) is None

    # set_limits, app_limits, run_log_quotas, app_policies

    def test_limits_are_stored_whole_and_read_by_each_stage(self) -> None:
        capped, plain = self.an_app("capped"), self.an_app("plain")
        capped_pk, plain_pk = self.record(capped.app_id).id, self.record(plain.app_id).id
        limits = AppLimits(3, 4, 100, 60, 1_000_000)
        assert self.app_store.set_limits(capped.app_id, limits)
        assert self.app_store.app_limits(capped_pk) == limits
        assert self.app_store.app_limits(plain_pk) == NO_LIMITS
        assert self.app_store.app_limits(plain_pk + capped_pk + 1_000) is None
        assert self.record(capped.app_id).limits == limits
        found = self.app_store.find_app_by_key(capped.api_key)
        assert found is not None and found.limits == limits
        quotas = self.app_store.run_log_quotas()
        assert quotas.get(capped_pk) == 1_000_000 and plain_pk not in quotas
        assert not self.app_store.set_limits("app_nope", limits)
        self.app_store.set_disabled(plain.app_id, 9)
        policies = self.app_store.app_policies()
        assert policies[capped_pk] == AppPolicy(capped.app_id, 3, 4, False, REPORTS)
        assert policies[plain_pk] == AppPolicy(plain.app_id, 1, None, True, REPORTS)

    # live_job_handlers, stored_job_count

    def test_an_apps_live_jobs_are_counted_by_handler_not_the_ended_or_deleted(self) -> None:
        created, other = self.an_app(), self.an_app("other")
        pk, other_pk = self.record(created.app_id).id, self.record(other.app_id).id
        self.a_job(app_pk=pk, handler="report.daily")
        self.a_job(app_pk=pk, handler="report.daily", status=JobStatus.PAUSED)
        self.a_job(app_pk=pk, handler="report.weekly", status=JobStatus.WAITING)
        self.a_job(app_pk=pk, handler="report.old", status=JobStatus.SUCCEEDED)
        self.a_job(app_pk=pk, handler="report.gone", deleted=True)
        self.a_job(app_pk=other_pk, handler="other.job")
        handlers = self.app_store.live_job_handlers(created.app_id)
        assert handlers == {"report.daily": 2, "report.weekly": 1}
        assert self.app_store.stored_job_count(pk) == 3
        assert self.app_store.stored_job_count(other_pk) == 1
        assert self.app_store.live_job_handlers("app_nope") == {}

    # running_by_app, app_activity

    def test_an_apps_standing_counts_its_runs_waiting_and_going(self) -> None:
        busy, idle = self.an_app("busy"), self.an_app("idle")
        pk = self.record(busy.app_id).id
        self.app_store.set_limits(busy.app_id, AppLimits(weight=2, max_running=5))
        job = self.a_job(app_pk=pk)
        rows = [
            NewExecution("due-1", job, 1, 1_000, 4_000),
            NewExecution("due-2", job, 1, 2_000, 5_000),
            NewExecution("later", job, 1, 3_000, 9_000),
            NewExecution("going", job, 1, 500, 500).queued_on("w1"),
            NewExecution("done", job, 1, 100, 100, ExecutionStatus.SUCCEEDED),
        ]
        self.store.insert_executions(rows, 400)
        assert self.app_store.running_by_app().get(pk) == 1
        ids = {busy.app_id, idle.app_id}
        standing = [a for a in self.app_store.app_activity(5_000) if a.app_id in ids]
        assert [a.app_id for a in standing] == sorted(ids)
        by_id = {a.app_id: a for a in standing}
        mine = by_id[busy.app_id]
        assert (mine.app_pk, mine.name, mine.weight, mine.max_running) == (pk, "busy", 2, 5)
        assert (mine.waiting, mine.running, mine.started, mine.start_lag) == (2, 1, 0, {})
        assert (by_id[idle.app_id].waiting, by_id[idle.app_id].running) == (0, 0)
        [alone] = self.app_store.app_activity(5_000, busy.app_id)
        assert dataclasses.replace(alone, max_start_lag=None) == mine
        assert self.app_store.app_activity(5_000, "app_nope") == []

    def test_one_apps_standing_has_the_start_lag_of_its_recent_first_attempts(self) -> None:
        created = self.an_app()
        pk = self.record(created.app_id).id
        job = self.a_job(app_pk=pk)
        rows = [
            NewExecution("a", job, 1, 100_000, 100_000),
            NewExecution("b", job, 1, 200_000, 200_000),
            NewExecution("retry", job, 2, 200_000, 200_000),
            NewExecution("manual", job, 1, 300_000, 300_000, manual=True),
            NewExecution("early", job, 1, 400_000, 400_000),
            NewExecution("old", job, 1, 50_000, 50_000),
        ]
        self.store.insert_executions([r.queued_on("w1") for r in rows], 1_000)
        started = {"a": 101_000, "b": 203_000, "retry": 290_000, "manual": 390_000}
        started |= {"early": 399_000, "old": 60_000}
        ended = ExecutionStatus.SUCCEEDED
        self.store.record_outcomes(
            [Outcome(self.locked(e), ended, "w1", None, None, at, at) for e, at in started.items()]
        )
        [alone] = self.app_store.app_activity(700_000, created.app_id)
        assert (alone.started, alone.max_start_lag) == (3, 3.0)
        assert alone.start_lag == {0.5: 1.0, 0.9: 3.0, 0.99: 3.0}
        [listed] = [a for a in self.app_store.app_activity(700_000) if a.app_pk == pk]
        assert (listed.started, listed.start_lag, listed.max_start_lag) == (0, {}, None)

    # audit_change

    def test_a_change_is_audited_as_it_was_and_is_without_secrets(self) -> None:
        created = self.an_app()
        before = self.record(created.app_id)
        self.app_store.set_handler_patterns(created.app_id, EVERY_HANDLER)
        extra = {"signingSecret": "rotated", "newKeyId": "key_1"}
        self.app_store.audit_change("cli:ops", "app.handlers", created.app_id, before, 8_000, extra)
        self.app_store.audit_change("cli:ops", "app.x", "app_nope", None, 8_000)
        [row] = self.audit_rows()
        assert (row.at, row.actor, row.action) == (8_000, "cli:ops", "app.handlers")
        assert (row.object_type, row.object_id, row.app_pk) == ("app", created.app_id, before.id)
        limits = dataclasses.asdict(NO_LIMITS)
        assert row.before == {
            "name": "billing",
            "handlers": list(REPORTS.patterns),
            "callbackNetworks": None,
            "limits": limits,
            "disabled": False,
        }
        assert row.after == {
            **row.before,
            "handlers": ["*"],
            "signingSecret": "***",
            "newKeyId": "key_1",
        }

    def test_a_change_undone_with_its_transaction_leaves_no_trace(self) -> None:
        created = self.an_app()
        before = self.record(created.app_id)
        with pytest.raises(RuntimeError), self.undone_on_error():
            self.app_store.set_limits(created.app_id, AppLimits(weight=9))
            self.app_store.rotate_api_key(created.app_id, 2_000, 2_000)
            self.app_store.audit_change("cli:ops", "app.limits", created.app_id, before, 2_000)
            raise RuntimeError("the command failed after its writes")
        assert self.record(created.app_id) == before
        assert self.audit_rows() == []
        assert self.app_store.find_app_by_key(created.api_key) is not None
        assert len(self.app_store.app_keys(created.app_id) or []) == 1
