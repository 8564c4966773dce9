"""The store contracts' harness on MySQL: the test's own database, rows read back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from common.db.apps import AppStore, MySqlAppStore
from common.db.deliveries import NewDelivery
from common.db.delivery_store import DeliveryStore, MySqlDeliveryStore
from common.db.dispatch_store import DispatchStore, MySqlDispatchStore
from common.db.fire_store import FireStore, MySqlFireStore
from common.db.job_dependencies import insert_edges
from common.db.outcome_store import MySqlOutcomeStore, OutcomeStore
from common.db.rescue_store import MySqlRescueStore, RescueStore
from common.db.schema import apps, audit_events, callback_deliveries, jobs, workers
from common.db.schema import executions as executions_table
from common.db.workers import MySqlWorkerStore, WorkerRecord, WorkerStore
from common.memory.rows import MemoryDelivery, MemoryExecution, MemoryJob
from common.states import DeliveryStatus, ExecutionStatus, JobStatus
from tests.contracts.store_harness import AuditRow, StoreHarness
from tests.integration.helpers import make_app


class MySqlStoreHarness(StoreHarness):
    """A store under test on the test's own database, in one transaction rolled back after."""

    @pytest.fixture(autouse=True)
    def _database(self, engine: Engine) -> Iterator[None]:
        make_app(engine)
        with engine.connect() as conn:
            self._conn: Connection = conn
            self._store = MySqlOutcomeStore(conn)
            self._dispatch_store = MySqlDispatchStore(conn)
            self._fire_store = MySqlFireStore(conn)
            self._rescue_store = MySqlRescueStore(conn)
            self._worker_store = MySqlWorkerStore(conn)
            self._app_store = MySqlAppStore(conn)
            self._delivery_store = MySqlDeliveryStore(conn)
            with conn.begin() as transaction:
                self._app_pk = int(conn.execute(sa.text("SELECT MAX(id) FROM apps")).scalar_one())
                yield
                transaction.rollback()

    @property
    def store(self) -> OutcomeStore:
        return self._store

    @property
    def dispatch_store(self) -> DispatchStore:
        return self._dispatch_store

    @property
    def fire_store(self) -> FireStore:
        return self._fire_store

    @property
    def rescue_store(self) -> RescueStore:
        return self._rescue_store

    @property
    def worker_store(self) -> WorkerStore:
        return self._worker_store

    @property
    def delivery_store(self) -> DeliveryStore:
        return self._delivery_store

    @property
    def app_store(self) -> AppStore:
        return self._app_store

    def audit_rows(self) -> list[AuditRow]:
        query = sa.select(audit_events).order_by(audit_events.c.id)
        return [
            AuditRow(
                int(r.at),
                r.actor,
                r.action,
                r.object_type,
                r.object_id,
                r.app_pk,
                None if r.before_doc is None else json.loads(r.before_doc),
                None if r.after_doc is None else json.loads(r.after_doc),
            )
            for r in self._conn.execute(query)
        ]

    def undone_on_error(self) -> AbstractContextManager[object]:
        return self._conn.begin_nested()

    @property
    def app_pk(self) -> int:
        return self._app_pk

    def add_job(self, job: MemoryJob) -> int:
        values = {
            "app_pk": job.app_pk,
            "job_name": job.job_name,
            "handler": job.handler,
            "params": job.params,
            "cron_expr": "* * * * *" if job.recurring else None,
            "next_trigger_time": job.next_trigger_time,
            "status": job.status.value,
            "version": job.version,
            "callback_url": job.callback_url,
            "client_request_id": job.client_request_id,
            "created_at": job.created_at,
            "updated_at": job.updated_at,
            "has_dependencies": bool(job.after),
            "deleted_at": 1 if job.deleted else None,
            "max_retries": job.max_retries,
            "retry_backoff_seconds": job.retry_backoff_seconds,
            "retry_backoff_max_seconds": job.retry_backoff_max_seconds,
            "timeout_seconds": job.timeout_seconds,
            "overlap_policy": job.overlap_policy,
            "misfire_policy": job.misfire_policy,
            "misfire_threshold_seconds": job.misfire_threshold_seconds,
            "priority": job.priority,
        }
        key = self._conn.execute(jobs.insert(), values).inserted_primary_key
        assert key is not None
        insert_edges(self._conn, [(int(key[0]), a) for a in job.after])
        return int(key[0])

    def limit_retries(self, max_retries: int) -> None:
        update = apps.update().where(apps.c.id == self._app_pk)
        self._conn.execute(update.values(max_retries=max_retries))

    def job(self, job_id: int) -> MemoryJob:
        r = self._conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).one()
        return MemoryJob(
            int(r.app_pk),
            r.job_name,
            JobStatus(r.status),
            r.cron_expr is not None or r.fixed_rate_seconds is not None,
            r.next_trigger_time,
            r.callback_url,
            r.client_request_id,
            int(r.max_retries),
            int(r.retry_backoff_seconds),
            int(r.retry_backoff_max_seconds),
            int(r.version),
            int(r.updated_at),
            int(r.id),
            r.handler,
            r.params,
            r.timeout_seconds,
            r.overlap_policy,
            r.misfire_policy,
            int(r.misfire_threshold_seconds),
        )

    def execution(self, execution_id: str) -> MemoryExecution:
        query = sa.select(executions_table).where(executions_table.c.execution_id == execution_id)
        r = self._conn.execute(query).one_or_none()
        if r is None:
            raise KeyError(execution_id)
        return MemoryExecution(
            int(r.id),
            r.execution_id,
            int(r.job_id),
            int(r.attempt),
            int(r.trigger_time),
            r.scheduled_at,
            ExecutionStatus(r.status),
            bool(r.manual),
            r.worker_id,
            r.message,
            r.result,
            int(r.created_at),
            r.dispatched_at,
            r.started_at,
            r.ended_at,
            r.params,
            r.traceparent,
            bool(r.backfill),
            r.waited_for,
        )

    def deliveries(self) -> list[MemoryDelivery]:
        query = sa.select(callback_deliveries).order_by(callback_deliveries.c.id)
        return [
            MemoryDelivery(
                NewDelivery(
                    r.delivery_id, r.execution_id, int(r.job_id), int(r.app_pk), r.url, r.payload
                ),
                DeliveryStatus(r.status),
                int(r.attempts),
                int(r.created_at),
                int(r.updated_at),
            )
            for r in self._conn.execute(query)
        ]

    def set_delivery_status(self, delivery_id: str, status: DeliveryStatus) -> None:
        self._conn.execute(
            callback_deliveries.update()
            .where(callback_deliveries.c.delivery_id == delivery_id)
            .values(status=status)
        )

    def worker(self, worker_id: str) -> WorkerRecord:
        query = sa.select(workers).where(workers.c.worker_id == worker_id)
        return WorkerRecord.from_row(self._conn.execute(query).one())
