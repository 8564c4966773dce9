"""Jobs, executions, deliveries and workers in memory: MySQL's twin for unit tests.

``MemoryStore`` keeps the contract of ``common.db.outcome_store.OutcomeStore`` (as
procrastinate's InMemoryConnector keeps its connector's): the same rows come back, the
same unique keys refuse a second row with the same ``IntegrityError`` (MySQL's 1062),
so the logic above it can be tested without a server. ``tests/contracts/outcome_store.py``
runs one test class against it and against MySQL.

It keeps ``DispatchStore`` (``unmark_queued``), ``FireStore`` (what is due, and the
writes that settle it), ``RescueStore`` (moving what is QUEUED on a worker) and
``WorkerStore`` (the workers aggregate: heartbeats, live, gone and draining workers,
forgetting one, listings, pruning), ``DeliveryStore`` (a callback's delivery from its
record to its attempts) and ``AppStore`` (the apps aggregate: apps, their
keys, secrets, grants and limits, their standing, and the audit rows of changes to
them) too, and ``FireTransactions``, ``RescueTransactions``, ``WorkerTransactions`` and
``AppTransactions``:
a ``transaction`` that undoes what it changed when it raises, as a rolled-back one
does, and a plain ``reading``. What it leaves out: locks and isolation (one caller at a
time: nothing is ever held by another transaction, so ``skip_locked`` passes nothing
over and ``forget_worker_unless_held`` never finds the row held), and every column that
recording, firing, sending, rescue and the apps aggregate do not touch.
"""

from __future__ import annotations

from common.memory.apps import AppTables
from common.memory.deliveries import DeliveryTables
from common.memory.firing import FireTables
from common.memory.outcomes import OutcomeTables
from common.memory.worker_moves import MoveTables


class MemoryStore(OutcomeTables, DeliveryTables, FireTables, MoveTables, AppTables):
    """The jobs, executions, deliveries, workers and apps tables: ``OutcomeStore``,
    ``FireStore``, ``RescueStore``, ``WorkerStore``, ``AppStore``, their transactions,
    and seeding."""
