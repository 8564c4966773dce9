"""The notifiers' reports of their receiving hosts and apps, read back and added up as
``kairos callbacks hosts`` and the console show them."""

from __future__ import annotations

from common.notifier_standing import (
    AppStanding,
    HostStanding,
    NotifierStanding,
    merged_apps,
    merged_hosts,
)
from services.notifier.fair_line import Backlog, FairLine
from services.notifier.host_limits import HostLimits
from services.notifier.posting import PostOutcome
from services.notifier.scheduler import AttemptScheduler
from services.notifier.shares import AppShares, DeliveryShares
from services.notifier.standing import app_standings, host_standings
from tests.unit.test_notifier_fair_line import callback, fill


def report(name: str, hosts: list[HostStanding], apps: list[AppStanding]) -> NotifierStanding:
    return NotifierStanding(name, 1_000, hosts, apps)


def test_a_report_reads_back_as_written() -> None:
    written = report(
        "n1", [HostStanding("x.com:443", 2, 5, 4, 2_000, 9, 1)], [AppStanding(3, 2, 5)]
    )
    assert NotifierStanding.from_json(written.to_json()) == written


def test_hosts_add_up_over_notifiers_busiest_first() -> None:
    one = report("n1", [HostStanding("slow:80", 4, 100, 4, 2_000, 10, 0)], [AppStanding(1, 4, 100)])
    two = report(
        "n2",
        [
            HostStanding("slow:80", 4, 50, 4, 1_000, 30, 0),
            HostStanding("fast:80", 1, 0, 16, 5, 9, 0),
        ],
        [AppStanding(1, 4, 50), AppStanding(2, 1, 0)],
    )
    slow, fast = merged_hosts([one, two])
    assert (slow.host, slow.in_flight, slow.waiting, slow.limit, slow.notifiers) == (
        "slow:80",
        8,
        150,
        8,
        2,
    )
    assert slow.latency_ms == 1_250, "weighted by each notifier's attempts"
    assert fast.host == "fast:80"
    assert merged_apps([one, two]) == [AppStanding(1, 8, 150), AppStanding(2, 1, 0)]


def test_a_notifier_reports_what_waits_and_goes_by_host_and_app() -> None:
    shares = DeliveryShares(AppShares(8, 2), AppShares(8, 8))
    plan = AttemptScheduler(8, shares, HostLimits(8, slow_seconds=1.0, slow_floor=2))
    line = FairLine(plan, Backlog(100, 100))
    fill(line, [callback(1, "slow.example") for _ in range(10)] + [callback(2, "fast.example")])
    taken = line.take(8)
    plan.observe(taken[0][1], 2.0, PostOutcome(204, None))
    hosts = {h.host: h for h in host_standings(plan, line)}
    slow = hosts["slow.example:80"]
    assert (slow.in_flight, slow.waiting, slow.limit, slow.latency_ms) == (5, 5, 7, 2_000), (
        "2 slots stay free for others"
    )
    assert hosts["fast.example:80"].in_flight == 1
    assert app_standings(plan, line) == [AppStanding(1, 5, 5), AppStanding(2, 1, 0)]
