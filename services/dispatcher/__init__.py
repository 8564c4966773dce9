"""The dispatcher: where a job's triggers become executions on workers, and outcomes land.

Read it in the order a trigger travels:

``trigger/`` — from a due job to a message on a worker's queue
    ``claim_thread``   thread: claims batches of due triggers, back to back or on a wake-up
    ``claim``          one claim: due scan, misfire plan, version compare-and-set, executions
    ``claim_handover`` a claim's due executions written QUEUED, its transaction handed open
                       to the dispatch loop (pika is not thread-safe)
    ``fire``           executions SCHEDULED for later (claimed ahead, retries, manual runs)
                       held in a heap and fired at their time
    ``wake_thread``    thread: the API's wake-ups for jobs due now

``routing/`` — which worker, and the way out (trigger and upkeep both use it)
    ``workers``        the live workers, their load and the room in their queues
    ``route``          a live worker for each execution (fire, rescue, and a claim's
                       hand-over on its own copy of the worker view)
    ``dispatch``       the one path out: packs per worker, publish, put back what bounced

``outcomes/`` — from a worker's result to the job's state and its callback
    ``results_thread`` thread: consumes kairos.results in batches
    ``recording``      execution outcome, retry or job end, callback delivery: one commit
    ``callbacks``      callback deliveries created, their payload, their hand-off to the
                       notifier

``leadership/`` — which dispatcher leads
    ``lease``          the Redis lease itself: one holder, renewed and released by its token
    ``lease_thread``   thread: the lease that makes one dispatcher the leader
    ``progress``       the leader's loops' progress, which the lease is kept on

``upkeep/`` — what keeps the rest honest while this dispatcher leads
    ``retention``      thread: old history deleted, in batches sized to keep up
    ``sweep``          the leader's once-a-second sweep, running:
    ``rescue``         dead workers' executions reported, lost or moved
    ``rescue_plan``    which of them is reported, lost or moved, from their started keys
    ``timeouts``       runs past their timeout that no worker reported
    ``reconcile``      executions QUEUED far too long on live workers

``main`` is the process and its dispatch loop (the thread that owns the broker
connection): it sends handed-over claims, fires what is due and runs the sweep.

Recording, dispatch, firing and rescue reach their stores through ports (``common/db/
outcome_store.py``, ``dispatch_store.py``, ``fire_store.py``, ``rescue_store.py``, and
the workers aggregate's ``workers.py``;
``common.broker.Publisher``; ``common.loadbalance.LiveWorkers`` and ``WorkerQueues``;
``common.started_marks.StartedMarks``), each with a MySQL, RabbitMQ or Redis
implementation and an in-memory twin (``common/memory/``: ``store.py``, ``broker.py``,
``live_workers.py``, ``started_marks.py``) that ``tests/contracts`` holds to the same
tests, so the stages' logic is unit-tested without servers.
"""
