"""The notifier's per-host share counts a receiver's registrable domain and the address
it resolves to, so fresh subdomains of one domain, or many names for one server, do not
get a share each."""

from __future__ import annotations

import pytest

from services.notifier.shares import (
    AppShares,
    DeliveryShares,
    HostKeys,
    ShareKeys,
    registrable_domain,
)

ADDRESSES = {
    "a.x.com": "198.51.100.1",
    "b.x.com": "198.51.100.2",
    "hooks.alpha.example": "203.0.113.9",
    "hooks.beta.example": "203.0.113.9",
    "other.example": "192.0.2.77",
}


def address_of(host: str, _port: int) -> str | None:
    return ADDRESSES.get(host)


class UrlShares:
    """Shares taken by URL, its host keys found as the notifier finds them."""

    def __init__(self, keys: ShareKeys | None = None) -> None:
        self.keys = keys or ShareKeys()
        # 8 slots, each app and each host may hold 2 while 2 stay free for the others.
        self.shares = DeliveryShares(AppShares(slots=8, share=8), AppShares(slots=8, share=2))

    def take(self, app_id: int, url: str) -> bool:
        return self.shares.take(app_id, self.keys.of(url))

    def give_back(self, app_id: int, hosts: HostKeys) -> None:
        self.shares.give_back(app_id, hosts)


def shares(keys: ShareKeys | None = None) -> UrlShares:
    return UrlShares(keys)


@pytest.mark.parametrize(
    ("host", "domain"),
    [
        ("a.x.com", "x.com"),
        ("deep.er.b.X.COM", "x.com"),
        ("x.com", "x.com"),
        ("foo.bar.co.uk", "bar.co.uk"),
        ("someone.github.io", "someone.github.io"),
        ("localhost", "localhost"),
        ("198.51.100.1", "198.51.100.1"),
        ("2001:db8::1", "2001:db8::1"),
    ],
)
def test_the_registrable_domain_comes_from_the_public_suffix_list(host: str, domain: str) -> None:
    assert registrable_domain(host) == domain


def test_subdomains_of_one_domain_share_one_share() -> None:
    delivery = shares(ShareKeys(address_of))
    urls = [f"https://s{n}.x.com/hook" for n in range(10)]
    taken = [delivery.take(n, url) for n, url in enumerate(urls)]
    assert taken.count(True) == 6, "2 of the share, then while 2 slots stay free"
    assert delivery.take(99, "https://other.example/hook"), "another domain has its own"


def test_two_names_on_one_address_share_one_share() -> None:
    delivery = shares(ShareKeys(address_of))
    alpha, beta = "https://hooks.alpha.example/", "https://hooks.beta.example/"
    taken = [delivery.take(n, alpha if n % 2 else beta) for n in range(10)]
    assert taken.count(True) == 6
    assert delivery.take(99, "https://other.example/hook")


def test_an_attempt_gives_back_what_it_took_though_the_name_moved() -> None:
    table = dict(ADDRESSES)
    delivery = shares(ShareKeys(lambda host, _port: table.get(host)))
    taken = delivery.keys.of("https://hooks.alpha.example/")
    assert all(delivery.shares.take(n, taken) for n in range(6))
    table["hooks.alpha.example"] = "192.0.2.200"
    for n in range(6):
        delivery.give_back(n, taken)
    assert all(delivery.take(n, "https://hooks.beta.example/") for n in range(6))


def test_without_a_resolver_the_domain_alone_counts() -> None:
    delivery = shares()
    assert [delivery.take(n, f"http://s{n}.x.com/") for n in range(8)].count(True) == 6


def test_two_services_on_one_address_are_two_receivers() -> None:
    """A port is a receiver of its own: a hanging service on a machine does not hold up
    the callbacks of another service of that machine."""
    delivery = shares(ShareKeys(address_of))
    slow = [delivery.take(n, "http://127.0.0.1:9001/hook") for n in range(10)]
    assert slow.count(True) == 6
    assert delivery.take(99, "http://127.0.0.1:9002/hook")
    assert ShareKeys(address_of).of("https://hooks.alpha.example/").domain == "alpha.example:443"


def test_a_url_read_again_follows_its_host_to_a_new_address() -> None:
    """The URL's host and port are kept once read; the address is the resolver's answer
    of the moment, so a name that moves is counted at its new address."""
    answers = iter(["10.0.0.1", "10.0.0.2"])
    keys = ShareKeys(lambda _host, _port: next(answers))
    first = keys.of("https://hooks.gamma.example/a")
    second = keys.of("https://hooks.gamma.example/a")
    assert (first.address, second.address) == ("10.0.0.1:443", "10.0.0.2:443")
    assert first.domain == second.domain == "gamma.example:443"


def test_a_url_whose_port_cannot_be_read_counts_as_itself_every_time() -> None:
    keys = ShareKeys(address_of)
    for _ in range(2):
        assert keys.of("http://hooks.alpha.example:99999/") == HostKeys(
            "http://hooks.alpha.example:99999/", None
        )
