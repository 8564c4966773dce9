"""Jobs, executions, deliveries and workers in memory: MySQL's twin for unit tests.

``MemoryStore`` keeps the contract of ``common.db.outcome_store.OutcomeStore`` (as
procrastinate's InMemoryConnector keeps its connector's): the same rows come back, the
same unique keys refuse a second row with the same ``IntegrityError`` (MySQL's 1062),
so the logic above it can be tested without a server. ``tests/contracts/outcome_store.py``
runs one test class against it and against MySQL.

It keeps ``DispatchStore`` (``unmark_queued``), ``FireStore`` (what is due, and the
writes that settle it), ``RescueStore`` (moving what is QUEUED on a worker) and
``WorkerStore`` (the workers aggregate: heartbeats, live, gone and draining workers,
forgetting one, listings, pruning) too, and ``FireTransactions``,
``RescueTransactions`` and ``WorkerTransactions``:
a ``transaction`` that undoes what it changed when it raises, as a rolled-back one
does, and a plain ``reading``. What it leaves out: locks and isolation (one caller at a
time: nothing is ever held by another transaction, so ``skip_locked`` passes nothing
over and ``forget_worker_unless_held`` never finds the row held), the apps table and
its keys, and every column that recording, firing, sending and rescue do not touch.
"""

from __future__ import annotations

from common.memory.firing import FireTables
from common.memory.outcomes import OutcomeTables
from common.memory.worker_moves import MoveTables


class MemoryStore(OutcomeTables, FireTables, MoveTables):
    """The jobs, executions, deliveries and workers tables: ``OutcomeStore``,
    ``FireStore``, ``RescueStore``, ``WorkerStore``, their transactions, and seeding."""
