"""Jobs, executions, deliveries and workers in memory: MySQL's twin for unit tests.

``MemoryStore`` keeps the contract of ``common.db.outcome_store.OutcomeStore`` (as
procrastinate's InMemoryConnector keeps its connector's): the same rows come back, the
same unique keys refuse a second row with the same ``IntegrityError`` (MySQL's 1062),
so the logic above it can be tested without a server. ``tests/contracts/outcome_store.py``
runs one test class against it and against MySQL.

It keeps ``DispatchStore`` (``unmark_queued``), ``FireStore`` (what is due, and the
writes that settle it) and ``RescueStore`` (gone and draining workers, forgetting one,
moving what is QUEUED on it) too, and ``FireTransactions`` and ``RescueTransactions``:
a ``transaction`` that undoes what it changed when it raises, as a rolled-back one
does, and a plain ``reading``. What it leaves out: locks and isolation (one caller at a
time: nothing is ever held by another transaction, so ``skip_locked`` passes nothing
over and ``forget_worker_unless_held`` never finds the row held), the apps table and
its keys, and every column that recording, firing, sending and rescue do not touch.
"""

from __future__ import annotations

from common.memory.firing import FireTables
from common.memory.outcomes import OutcomeTables
from common.memory.workers import WorkerTables


class MemoryStore(OutcomeTables, FireTables, WorkerTables):
    """The jobs, executions, deliveries and workers tables: ``OutcomeStore``,
    ``FireStore``, ``RescueStore``, their transactions, and seeding."""
