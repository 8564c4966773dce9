"""Every Redis key Kairos uses, built from the namespace prefix in one place."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RedisKeys:
    """Redis key names for one namespace."""

    namespace: str

    def _key(self, *parts: str) -> str:
        return ":".join((self.namespace, *parts))

    @property
    def dispatcher_lease(self) -> str:
        """The lease one dispatcher holds while it claims and publishes."""
        return self._key("dispatcher", "lease")

    @property
    def wake(self) -> str:
        """A list the API pushes to when a job is due now; the dispatcher pops it."""
        return self._key("dispatcher", "wake")

    def execution_started(self, execution_id: str) -> str:
        """Set by the worker that runs an execution, so a redelivery does not run it twice."""
        return self._key("execution", execution_id, "started")

    @property
    def started_epoch(self) -> str:
        """The cluster time (ms) the execution-started keys have been kept since: set
        (NX, no expiry) by every worker taking keys and by the leader's sweeps. It is
        missing, or later than an execution's dispatch, when Redis lost its data since:
        that execution's started key may be gone with it (``common/started_marks.py``)."""
        return self._key("execution", "started-epoch")

    def worker(self, worker_id: str) -> str:
        """A hash with the last heartbeat of one worker (``Heartbeat.as_dict``, and
        ``WORKER_HELD`` with ``WORKER_HELD_AT``)."""
        return self._key("worker", worker_id)

    def worker_drain(self, worker_id: str) -> str:
        """Set by an operator (the console) to ask a worker to drain and stop; the worker
        takes it (GET and DEL) with its next heartbeat."""
        return self._key("worker", worker_id, "drain")

    def worker_drained(self, worker_id: str) -> str:
        """Set by an operator (``kairos workers drain``) until ``undrain``: the worker
        takes no new work (its unstarted work moves to others), finishes its runs and
        stays up, so it may then be stopped. Read by the worker with every heartbeat."""
        return self._key("worker", worker_id, "drained")

    def activity(self, minute_ms: int) -> str:
        """A hash of one minute's activity (``common.activity``): outcomes recorded and
        trigger-lag buckets, added to by every dispatcher."""
        return self._key("activity", str(minute_ms))

    def rate_limit(self, app_id: str) -> str:
        """A hash with one app's token bucket (tokens left, when last counted)."""
        return self._key("ratelimit", "app", app_id)

    def run_log_quota(self, app_pk: int) -> str:
        """A hash with one app's run-log byte bucket (bytes left, when last counted),
        shared by every worker."""
        return self._key("runlogquota", "app", str(app_pk))

    def notifier_standing(self, notifier_id: str) -> str:
        """One notifier's last report of its receiving hosts and apps
        (``common.notifier_standing``), expiring unless renewed."""
        return self._key("notifier", notifier_id, "standing")

    @property
    def notifier_standings(self) -> str:
        """The pattern every notifier's standing key matches."""
        return self._key("notifier", "*", "standing")

    def auth_failures(self, client: str) -> str:
        """A counter of one client address's failed authentications in the current
        window (it expires with the window)."""
        return self._key("authfail", client)


# Fields of a worker's heartbeat hash: how many dispatch messages it held unacked
# (waiting for a slot, running, or reporting), counted at or after the cluster time in
# ``WORKER_HELD_AT``; 0 means its hands were empty then.
WORKER_HELD = "held"
WORKER_HELD_AT = "held_at"
# The id of the worker process that sent the heartbeat: a new one on every start, so a
# restart with the same worker id shows.
WORKER_INCARNATION = "incarnation"
