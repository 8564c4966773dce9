"""Single creates stored together: one INSERT and one commit for the jobs waiting at once."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from common.db.job_dependencies import check_parents, insert_edges
from common.db.jobs import NewJob, insert_job, insert_jobs
from common.db.retry import retry_conflicts
from common.errors import IdempotencyConflictError, ValidationFailedError
from common.states import JobStatus
from common.store_errors import is_store_outage
from services.api.created_audit import audit_created
from services.api.idempotency import Submitted, resolve_earlier
from services.api.store_refusals import as_refusal

log = logging.getLogger(__name__)

MAX_GROUP = 500
STAGE = "api_insert"

Announce = Callable[[Sequence[NewJob], Sequence[int], int], None]


Answer = Submitted | Exception


@dataclass(frozen=True)
class _Pending:
    job: NewJob
    now_ms: int
    actor: str = ""
    stored: Future[Submitted] = field(default_factory=Future)


class GroupInserter:
    """Stores the jobs of concurrent single creates in shared transactions.

    A caller's future resolves once the transaction holding its job has committed, so
    an answer still means "stored". While one group commits the next one gathers, so
    under load the statements, the commit and their round trips are paid once per
    group instead of once per request; a request that finds no other waits for nothing
    extra. A clientRequestId used before maps to its earlier job (or conflicts) as it
    would alone; if the group's INSERT still hits the unique key (a concurrent request
    elsewhere, or two ids MySQL's collation takes as equal), or MySQL refuses the data of
    some row, each job of the group is stored on its own instead: a row refused for its
    data fails its own request alone (a 422 naming the field), the others are stored.
    Only a failure of the store itself (lost, timed out) fails the whole group.
    """

    def __init__(self, engine: Engine, announce: Announce, max_group: int = MAX_GROUP) -> None:
        self._engine = engine
        self._announce = announce
        self._max_group = max_group
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, job: NewJob, now_ms: int, actor: str = "") -> Future[Submitted]:
        """Queue ``job`` (created by ``actor``, for the audit trail); the future gets its
        answer once the answer is committed.

        Or the error the job met: ``IdempotencyConflictError``, or what storing it
        raised (the database is down, say), in which case nothing of it was written.
        """
        self._ensure_started()
        pending = _Pending(job, now_ms, actor)
        self._queue.put(pending)
        return pending.stored

    def stop(self) -> None:
        """Store what is queued, then end the thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=10)

    def _ensure_started(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="group-insert", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                return
            group = [first]
            while len(group) < self._max_group:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                group.append(item)
            self._store(group)

    def _store(self, group: Sequence[_Pending]) -> None:
        now_ms = max(p.now_ms for p in group)
        try:
            answers = _insert_group(self._engine, group, now_ms)
        except Exception as e:
            if is_store_outage(e):
                # Lost or timed out: every job of the group alike, and at once.
                answers = [e] * len(group)
            else:
                answers = [self._store_alone(p, now_ms) for p in group]
        for pending, answer in zip(group, answers, strict=True):
            if isinstance(answer, Exception):
                pending.stored.set_exception(answer)
            else:
                pending.stored.set_result(answer)
        created = [
            (p.job, a.job_id)
            for p, a in zip(group, answers, strict=True)
            if isinstance(a, Submitted) and a.created
        ]
        if not created:
            return
        try:
            self._announce([job for job, _ in created], [i for _, i in created], now_ms)
        except Exception:
            log.exception("could not announce %d stored jobs", len(created))

    def _store_alone(self, pending: _Pending, now_ms: int) -> Answer:
        """One job in its own transaction, as a single create without company would be."""
        job = pending.job
        try:
            try:
                return _insert_alone(self._engine, pending, now_ms)
            except IntegrityError:
                # A concurrent request with the same clientRequestId won the unique key.
                with self._engine.connect() as conn:
                    earlier = _earlier(conn, job)
                if earlier is None:
                    raise
                return earlier
        except Exception as e:
            refusal = as_refusal(e)
            if refusal is None:
                return e
            log.warning("a job MySQL refused was answered 422: %s", refusal)
            return refusal


@retry_conflicts(STAGE)
def _insert_group(engine: Engine, group: Sequence[_Pending], now_ms: int) -> list[Answer]:
    """Store a group of jobs in one transaction with their audit rows, again in place
    after a lock conflict."""
    with engine.begin() as conn:
        answers = store_group(conn, [p.job for p in group], now_ms)
        _audit(conn, group, answers, now_ms)
        return answers


@retry_conflicts(STAGE)
def _insert_alone(engine: Engine, pending: _Pending, now_ms: int) -> Answer:
    """Store one job in its own transaction with its audit row, again in place after a
    lock conflict."""
    with engine.begin() as conn:
        answer = _earlier_or_insert(conn, pending.job, now_ms)
        _audit(conn, [pending], [answer], now_ms)
        return answer


def _audit(
    conn: Connection, group: Sequence[_Pending], answers: Sequence[Answer], now_ms: int
) -> None:
    created = [
        (p.actor or f"app-pk:{p.job.app_pk}", p.job.app_pk, a.job_id)
        for p, a in zip(group, answers, strict=True)
        if isinstance(a, Submitted) and a.created
    ]
    audit_created(conn, created, now_ms)


def _earlier(conn: Connection, job: NewJob) -> Answer | None:
    return resolve_earlier(conn, [job])[0]


def _earlier_or_insert(conn: Connection, job: NewJob, now_ms: int) -> Answer:
    earlier = _earlier(conn, job)
    if earlier is not None:
        return earlier
    check_parents(conn, job.app_pk, job.after)
    job_id = insert_job(conn, job, now_ms)
    insert_edges(conn, [(job_id, a) for a in job.after])
    return Submitted(job_id, JobStatus.WAITING, created=True)


def store_group(conn: Connection, new_jobs: Sequence[NewJob], now_ms: int) -> list[Answer]:
    """Per job, in order: its earlier twin, a conflict, or the job inserted now.

    Jobs whose clientRequestId was used before are answered from the stored job; the
    rest go in one INSERT (which raises IntegrityError if a key was taken meanwhile).

    A clientRequestId repeated inside the group is stored once: the later requests get
    the first one's job, or a conflict when their bodies differ.
    """
    repeats = _repeats(new_jobs)
    answers: dict[int, Answer] = {
        i: earlier for i, earlier in enumerate(resolve_earlier(conn, new_jobs)) if earlier
    }
    answers.update(refused_parents(conn, new_jobs, set(answers) | set(repeats)))
    fresh = [i for i in range(len(new_jobs)) if i not in answers and i not in repeats]
    ids = dict(zip(fresh, insert_jobs(conn, [new_jobs[i] for i in fresh], now_ms), strict=True))
    insert_edges(conn, [(ids[i], a) for i in fresh for a in new_jobs[i].after])
    for index, job_id in ids.items():
        answers[index] = Submitted(job_id, JobStatus.WAITING, created=True)
    for index, original in repeats.items():
        job = new_jobs[index]
        if index in answers:
            continue  # stored before this group: answered as its original is
        if original not in ids:
            answers[index] = answers[original]  # its original was refused: so is it
        elif job.request_hash != new_jobs[original].request_hash:
            answers[index] = IdempotencyConflictError(str(job.client_request_id), ids[original])
        else:
            answers[index] = Submitted(ids[original], JobStatus.WAITING, created=False)
    return [answers[i] for i in range(len(new_jobs))]


def refused_parents(
    conn: Connection, new_jobs: Sequence[NewJob], answered: set[int]
) -> dict[int, ValidationFailedError]:
    """The jobs (by index, those not ``answered``) whose ``after`` names a job that is
    missing, another app's or deleted; only jobs with parents cost a query."""
    refused: dict[int, ValidationFailedError] = {}
    for index, job in enumerate(new_jobs):
        if job.after and index not in answered:
            try:
                check_parents(conn, job.app_pk, job.after)
            except ValidationFailedError as e:
                refused[index] = e
    return refused


def _repeats(new_jobs: Sequence[NewJob]) -> dict[int, int]:
    """The index of each job whose app and clientRequestId an earlier job of the group
    carries, mapped to that earlier job's index."""
    first: dict[tuple[int, str], int] = {}
    repeats: dict[int, int] = {}
    for index, job in enumerate(new_jobs):
        if job.client_request_id is None:
            continue
        seen = first.setdefault((job.app_pk, job.client_request_id), index)
        if seen != index:
            repeats[index] = seen
    return repeats
