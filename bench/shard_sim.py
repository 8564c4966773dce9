"""Where the next ceiling is once the leader is shared: a model fed with measured costs.

Each stage's cost is CPU milliseconds per job as ``bench/cost.py`` measured it (a core
gives 1,000 a second), the dispatcher's split by its profile into the leader's claim and
fire and the results recording (``--results-share``, the results thread's share). The
leader's loop is one process per shard, and every shard has a standby dispatcher
(``docs/production.md``); all of them record results from the shared queue. With N
shards a leader claims and fires 1/N of the jobs and records 1/(2N), so the leaders'
ceiling is N x 1,000 / (leader ms + results ms / 2). The API, the workers and the notifiers
scale out by adding processes and set no ceiling here; they only cost cores. The
stores stay one primary each: MySQL and RabbitMQ get ``--mysql-cores`` and
``--rabbitmq-cores`` at ``--store-efficiency`` (a server does not turn every added core
into throughput), Redis one core (it runs commands on one thread). Every shard also
costs the stores a fixed amount whether busy or not (its due scans, lease renewals and
its share of the slot ledger: ``--shard-overhead-ms`` of MySQL CPU a second, an
assumption to measure once shards exist). With ``--callback-share`` that share of the
jobs calls back, at the extra cost ``cost.py`` measured for a callback.

The model is linear: it assumes a store's cost per job stays what it was on one box,
which lock waits and replication make optimistic; it is for finding which ceiling comes
next, not for promising a figure.

    .venv/bin/python bench/shard_sim.py
    .venv/bin/python bench/shard_sim.py --from /tmp/cost.out --callback-share 0.3
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

CORE_MS = 1000.0
SHARDS = (1, 2, 4, 8)
# Dispatchers per shard: its leader and a standby, both recording results.
STANDBYS = 2


@dataclass(frozen=True)
class Costs:
    """CPU ms per job of each stage (per callback for ``notifier`` and the ``callback_*``
    store figures, the extra a callback costs)."""

    @property
    def leader(self) -> float:
        """The leader's own share, claim and fire."""
        return self.dispatcher * (1 - self.results_share)

    @property
    def results(self) -> float:
        """Results recording, which every dispatcher does."""
        return self.dispatcher * self.results_share

    api: float = 0.045
    dispatcher: float = 0.09
    # The share of the dispatcher's CPU its results thread takes (the rest: claim, fire).
    results_share: float = 0.7
    workers: float = 0.107
    mysqld: float = 0.10
    rabbitmq: float = 0.034
    redis: float = 0.014
    notifier: float = 4.4
    callback_dispatcher: float = 0.2
    callback_mysqld: float = 0.72
    callback_rabbitmq: float = 0.77
    callback_redis: float = 0.006

    def with_callbacks(self, share: float) -> Costs:
        """The cost of an average job when ``share`` of them call back."""
        return replace(
            self,
            dispatcher=self.dispatcher + share * self.callback_dispatcher,
            mysqld=self.mysqld + share * self.callback_mysqld,
            rabbitmq=self.rabbitmq + share * self.callback_rabbitmq,
            redis=self.redis + share * self.callback_redis,
            notifier=share * self.notifier,
        )


@dataclass(frozen=True)
class Stores:
    """What each store primary gets."""

    mysql_cores: float = 8.0
    rabbitmq_cores: float = 4.0
    efficiency: float = 0.7
    shard_overhead_ms: float = 20.0


@dataclass(frozen=True)
class Projection:
    """Each ceiling in jobs/s for one number of shards, and the lowest."""

    shards: int
    ceilings: dict[str, float]

    @property
    def jobs_per_s(self) -> float:
        """The lowest ceiling."""
        return min(self.ceilings.values())

    @property
    def bound_by(self) -> str:
        """The stage whose ceiling it is."""
        return min(self.ceilings, key=lambda name: self.ceilings[name])


def project(costs: Costs, stores: Stores, shards: int) -> Projection:
    """The ceilings with ``shards`` leading dispatchers."""
    mysql_budget = stores.mysql_cores * CORE_MS * stores.efficiency
    mysql_budget -= shards * stores.shard_overhead_ms
    rabbit_budget = stores.rabbitmq_cores * CORE_MS * stores.efficiency
    return Projection(
        shards,
        {
            "leaders": shards * CORE_MS / (costs.leader + costs.results / STANDBYS),
            "mysql": max(mysql_budget, 0.0) / costs.mysqld,
            "rabbitmq": rabbit_budget / costs.rabbitmq,
            "redis": CORE_MS / costs.redis,
        },
    )


def cores_needed(costs: Costs, jobs_per_s: float) -> dict[str, float]:
    """Cores the processes that scale out take at ``jobs_per_s``."""
    return {
        "api": jobs_per_s * costs.api / CORE_MS,
        "workers": jobs_per_s * costs.workers / CORE_MS,
        "notifiers": jobs_per_s * costs.notifier / CORE_MS,
    }


def _worker_ms(cpu: dict[str, float]) -> float:
    return sum(ms for name, ms in cpu.items() if name.startswith("bench-w"))


def results_share(profile: list[str] | None) -> float:
    """The results thread's share of a dispatcher profile's summary lines."""
    for line in profile or []:
        if line.strip().endswith("results thread"):
            return float(line.split("%")[0]) / 100
    return Costs.results_share


def costs_from(path: Path) -> Costs:
    """The medians of a ``bench/cost.py`` run, from its last JSON line."""
    lines = [line for line in path.read_text().splitlines() if line.startswith("{")]
    run = json.loads(lines[-1])
    medians: dict[str, dict[str, float]] = run["median_cpu_ms_per_job"]
    plain = medians["kairos"]
    found: dict[str, Any] = {
        "results_share": results_share(run.get("profile")),
        "api": plain["api"],
        "dispatcher": plain["dispatcher"],
        "workers": _worker_ms(plain),
        "mysqld": plain["mysqld"],
        "rabbitmq": plain["rabbitmq"],
        "redis": plain["redis"],
    }
    called = medians.get("kairos_callbacks")
    if called is not None:
        found["notifier"] = called["notifier"]
        for name in ("dispatcher", "mysqld", "rabbitmq", "redis"):
            found[f"callback_{name}"] = max(called[name] - plain[name], 0.0)
    return Costs(**found)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--from", dest="source", type=Path, help="a bench/cost.py output")
    parser.add_argument("--callback-share", type=float, default=0.0)
    parser.add_argument("--mysql-cores", type=float, default=Stores.mysql_cores)
    parser.add_argument("--rabbitmq-cores", type=float, default=Stores.rabbitmq_cores)
    parser.add_argument("--store-efficiency", type=float, default=Stores.efficiency)
    parser.add_argument("--shard-overhead-ms", type=float, default=Stores.shard_overhead_ms)
    return parser.parse_args(argv)


def print_projection(costs: Costs, stores: Stores) -> list[dict[str, Any]]:
    """One line per number of shards; the same as records."""
    print(
        f"stores: MySQL {stores.mysql_cores:g} cores, RabbitMQ {stores.rabbitmq_cores:g} "
        f"cores, at {stores.efficiency:.0%}; Redis 1 core; per shard "
        f"{stores.shard_overhead_ms:g} ms/s of MySQL"
    )
    each = ", ".join(f"{name} {ms:.3g}" for name, ms in vars(costs).items())
    print(f"costs (CPU ms per job): {each}; leader {costs.leader:.3g}")
    records = []
    for shards in SHARDS:
        p = project(costs, stores, shards)
        each = ", ".join(f"{name} {value:,.0f}" for name, value in p.ceilings.items())
        cores = cores_needed(costs, p.jobs_per_s)
        beside = ", ".join(f"{name} {value:.1f}" for name, value in cores.items())
        print(
            f"{shards} shard(s): {p.jobs_per_s:9,.0f} jobs/s, bound by {p.bound_by:<8} "
            f"({each}); cores beside: {beside}"
        )
        records.append({"shards": shards, "jobs_per_s": round(p.jobs_per_s), **p.ceilings})
    return records


def main(argv: list[str] | None = None) -> int:
    """Print the projection for 1, 2, 4 and 8 shards, then one JSON line."""
    args = parse_args(argv)
    costs = costs_from(args.source) if args.source is not None else Costs()
    stores = Stores(
        args.mysql_cores, args.rabbitmq_cores, args.store_efficiency, args.shard_overhead_ms
    )
    total = costs.api + costs.dispatcher + costs.workers
    total += costs.mysqld + costs.rabbitmq + costs.redis
    print(f"one 2-core box, everything on it: {2 * CORE_MS / total:,.0f} jobs/s")
    records = print_projection(costs.with_callbacks(args.callback_share), stores)
    print(json.dumps({"callback_share": args.callback_share, "projection": records}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
