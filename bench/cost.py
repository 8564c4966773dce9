"""The cost of a job: CPU milliseconds per job by process, Kairos against Celery and
Dramatiq, in one run.

On a 2-core box throughput is the inverse of the CPU a job costs across every process,
the stores included, so that is the figure this prints beside jobs/s. Each round runs,
in turn, on a fresh namespace or vhost of its own (``bench/vs_peers.py``'s rounds,
imported, not copied):

- ``kairos``: N no-op jobs through ``POST /openapi/jobs/batch`` (api, one dispatcher,
  two workers of capacity 16), first POST to the last SUCCEEDED execution;
- ``kairos_callbacks``: the same with a notifier, every job calling back to
  ``bench/fast_receiver.py`` (its own process, not counted), first POST to the last
  DELIVERED callback;
- ``celery`` and ``dramatiq``: ``bench/peers`` as ``vs_peers.py`` runs them.

With ``--single`` the rounds are ``kairos`` and ``kairos_single`` instead: the same
jobs one per ``POST /openapi/jobs`` from 16 client threads, against the batch path in
the same sitting.
``--only kairos_callbacks`` (names comma-separated) runs only the systems named. Each
round's line also gives this process's own CPU per job (the clients, over the whole
round), apart from the total: it shares the cores with what it measures.

Per round it prints jobs/s and the CPU ms per job of every process (api, dispatcher,
each worker, notifier, and the store servers mysqld, rabbitmq, redis:
``bench/cpu_meter.py``); then the median of each figure per system, the medians'
ratios Kairos/Dramatiq and Kairos/Celery, and last one JSON line.

With ``--profile-dir DIR`` one more ``kairos`` round (``--profile-jobs`` jobs) runs
after the others with ``py-spy record --gil -f raw`` on its hungriest Kairos process (by
the median CPU ms per job of the ``kairos`` rounds); the raw profile and its summary
(``bench/profile_summary.py``) go to DIR. That round is not in the medians (the sampler
slows what it samples).

    .venv/bin/pip install -r bench/requirements-peers.txt -r bench/requirements-callbacks.txt
    .venv/bin/python bench/cost.py --jobs 10000 --rounds 3 --profile-dir /tmp/cost-profile
    .venv/bin/python bench/cost.py --jobs 3000 --rounds 2 --single
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path

import psutil
from harness import BenchError, Service, git_commit_dirty, log, stop_on_sigterm
from peers.kairos_round import KairosShape, run_kairos_round
from peers.rounds import RoundFigure, run_celery_round, run_dramatiq_round
from profile_summary import read_samples, summary_lines
from receiver_process import ReceiverProcess
from spy import SpyUnavailable, recording
from vs_peers import GUARANTEES, Results, missing_peers, print_figure

Runner = Callable[[int, float, str, int, Path], RoundFigure]
PEERS = ("celery", "dramatiq")
STORES = ("mysqld", "rabbitmq", "redis", "total")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=10_000, help="no-op jobs per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every system")
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds per round")
    parser.add_argument(
        "--single", action="store_true", help="batch against single-create rounds, no peers"
    )
    parser.add_argument(
        "--only", help="run only these systems (comma-separated, e.g. kairos_callbacks)"
    )
    parser.add_argument("--profile-dir", type=Path, help="py-spy the hungriest process here")
    parser.add_argument(
        "--profile-jobs", type=int, default=30_000, help="jobs of the profiled round"
    )
    return parser.parse_args(argv)


def runners(single: bool, receiver_url: str) -> dict[str, Runner]:
    """The systems of a round, in the order they run."""
    if single:
        return {
            "kairos": run_kairos_round,
            "kairos_single": partial(run_kairos_round, shape=KairosShape(single=True)),
        }
    return {
        "kairos": run_kairos_round,
        "kairos_callbacks": partial(run_kairos_round, shape=KairosShape(callback_url=receiver_url)),
        "celery": run_celery_round,
        "dramatiq": run_dramatiq_round,
    }


def own_cpu_seconds() -> float:
    """User plus system CPU seconds of this process (the submitting clients) so far."""
    times = psutil.Process().cpu_times()
    return float(times.user + times.system)


def relabel(figure: RoundFigure, system: str, client_s: float) -> RoundFigure:
    """The figure under the name of the variant that ran it, with what the clients cost:
    this process's CPU over the whole round (start-up polls too), apart from the total,
    for it shares the two cores with the systems measured."""
    client = f"this process {client_s * 1000 / max(figure.jobs, 1):.3f} CPU ms per job"
    return RoundFigure(
        system,
        figure.index,
        figure.jobs,
        figure.seconds,
        figure.submit_seconds,
        f"{figure.note}; {client}",
        figure.cpu_ms_per_job,
    )


def run_round(
    system: str, runner: Runner, args: argparse.Namespace, run_id: str, index: int, logs: Path
) -> RoundFigure | None:
    """One system's round on a namespace of its own; None (reported) when it failed."""
    before = own_cpu_seconds()
    try:
        # The variants of Kairos each get their own namespace and log folder.
        figure = runner(args.jobs, args.deadline, f"{run_id}{system[:8]}", index, logs / system)
    except BenchError as e:
        log(f"FAILED: {system} round {index}: {e}")
        return None
    return relabel(figure, system, own_cpu_seconds() - before)


def median_cpu(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Each process's median CPU ms per job over the rounds it ran in."""
    names = sorted({name for cpu in rounds for name in cpu})
    return {
        name: round(statistics.median([cpu[name] for cpu in rounds if name in cpu]), 3)
        for name in names
    }


def hungriest(cpu: dict[str, float]) -> str:
    """The Kairos process with the most CPU per job (the store servers left out)."""
    own = {name: ms for name, ms in cpu.items() if name not in STORES}
    return max(own, key=lambda name: own[name])


def print_medians(results: Results) -> dict[str, dict[str, float]]:
    """Median jobs/s and CPU ms per job by process of every system; the CPU medians."""
    medians = {system: median_cpu(rounds) for system, rounds in results.cpu.items()}
    for system, values in results.by_system.items():
        print(f"median {system:<16} {results.median(system)} jobs/s over {len(values)} rounds")
        cpu = ", ".join(f"{name} {ms:g}" for name, ms in medians.get(system, {}).items())
        print(f"  median CPU ms per job: {cpu}")
    return medians


def print_ratios(results: Results) -> dict[str, float | None]:
    """The medians' ratios Kairos/peer and the per-round ones, when the peers ran."""
    ratios: dict[str, float | None] = {}
    for peer in PEERS:
        if peer not in results.by_system or "kairos" not in results.by_system:
            continue
        pairs = zip(results.by_system["kairos"], results.by_system[peer], strict=True)
        each = [f"{k / o:.3f}" if k and o else "n/a" for k, o in pairs]
        ratios[peer] = results.ratio(peer)
        print(f"Kairos/{peer}: {ratios[peer]} (medians); per round {', '.join(each)}")
    return ratios


@contextmanager
def profiled(name: str, raw: Path, services: list[Service]) -> Iterator[None]:
    """py-spy on the service ``name`` while the block runs; a note when it cannot."""
    (service,) = [s for s in services if s.name == name]
    assert service.process is not None
    with ExitStack() as stack:
        try:
            stack.enter_context(recording(service.process.pid, raw))
        except SpyUnavailable as e:
            log(f"no profile: {e}")
        yield


def profile_round(args: argparse.Namespace, run_id: str, logs: Path, name: str) -> list[str] | None:
    """One more ``kairos`` round with py-spy on ``name``; the summary of its profile."""
    directory: Path = args.profile_dir
    directory.mkdir(parents=True, exist_ok=True)
    raw = directory / f"{name}.raw"
    shape = KairosShape(profile=partial(profiled, name, raw))
    runner = partial(run_kairos_round, shape=shape)
    # Long enough for thousands of samples: the measured rounds can be over in a second.
    more = argparse.Namespace(**{**vars(args), "jobs": args.profile_jobs})
    figure = run_round("kairos", runner, more, run_id, 0, logs)
    if figure is None or not raw.exists():
        return None
    lines = summary_lines(read_samples(raw.read_text().splitlines()), name == "dispatcher")
    (directory / f"{name}.summary.txt").write_text("\n".join(lines) + "\n")
    print(f"profile of {name} ({figure.jobs_per_s:.1f} jobs/s under the sampler):")
    print("\n".join(f"  {line}" for line in lines))
    return lines


def run_all(args: argparse.Namespace, run_id: str, logs: Path, receiver_url: str) -> Results:
    """Every round of every system, interleaved, each figure printed as it comes."""
    systems = runners(args.single, receiver_url)
    if args.only:
        wanted = args.only.split(",")
        systems = {name: run for name, run in systems.items() if name in wanted}
    results = Results({system: [] for system in systems})
    for index in range(1, args.rounds + 1):
        for system, runner in systems.items():
            figure = run_round(system, runner, args, run_id, index, logs)
            results.by_system[system].append(round(figure.jobs_per_s, 1) if figure else None)
            if figure is not None:
                results.cpu.setdefault(system, []).append(figure.cpu_ms_per_job)
                print_figure(figure)
    return results


def main(argv: list[str] | None = None) -> int:
    """Run every round; 0 when all finished, 1 when one failed, 2 when peers are missing."""
    args = parse_args(argv)
    missing = [] if args.single else missing_peers()
    if missing:
        print(f"cost.py needs {', '.join(missing)}: see its docstring", file=sys.stderr)
        return 2
    stop_on_sigterm()
    run_id = secrets.token_hex(3)
    logs = Path(tempfile.mkdtemp(prefix=f"kairos-cost-{run_id}-"))
    log(f"run {run_id}, logs in {logs}")
    with ReceiverProcess.start() as receiver:
        results = run_all(args, run_id, logs, receiver.url)
    if not args.single:
        print(GUARANTEES)
    medians = print_medians(results)
    ratios = print_ratios(results)
    profile = None
    if args.profile_dir is not None and "kairos" in medians:
        profile = profile_round(args, run_id, logs, hungriest(medians["kairos"]))
    line = {
        "jobs": args.jobs,
        "rounds": args.rounds,
        "jobs_per_s": results.by_system,
        "median": {system: results.median(system) for system in results.by_system},
        "ratio_vs": ratios,
        "cpu_ms_per_job": results.cpu,
        "median_cpu_ms_per_job": medians,
        "profile": profile,
        "commit": git_commit_dirty(),
    }
    print(json.dumps(line), flush=True)
    failed = any(v is None for values in results.by_system.values() for v in values)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
