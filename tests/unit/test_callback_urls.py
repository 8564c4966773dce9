"""The callback URL policy: every form of an address callbacks may not reach is refused,
public addresses and allowed networks are accepted."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Sequence
from ipaddress import IPv4Address, ip_address
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.callback_urls import (
    CachingResolver,
    CallbackUrlPolicy,
    IPAddress,
    SystemResolver,
    TableResolver,
    checked_addresses,
    embedded_ipv4,
    numeric_host,
    parse_networks,
    refusal_kind,
)
from common.config import ApiSettings, NotifierSettings
from common.errors import (
    CallbackAddressRefusedError,
    CallbackHostUnresolvedError,
    CallbackUrlRefusedError,
    ConfigurationError,
    ValidationFailedError,
)

OPEN = CallbackUrlPolicy()

# Every way of writing an address callbacks may not reach, with the address it is.
REFUSED_HOSTS = [
    ("127.0.0.1", "127.0.0.1"),
    ("127.9.9.9", "127.9.9.9"),
    ("2130706433", "127.0.0.1"),  # decimal
    ("0x7f000001", "127.0.0.1"),  # hex
    ("0X7F000001", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"),  # octal
    ("0177.0.0.01", "127.0.0.1"),
    ("127.1", "127.0.0.1"),  # short
    ("0x7f.1", "127.0.0.1"),
    ("127.0.0.1.", "127.0.0.1"),  # trailing dot
    ("0", "0.0.0.0"),
    ("0.0.0.0", "0.0.0.0"),
    ("10.0.0.1", "10.0.0.1"),
    ("012.0.0.1", "10.0.0.1"),
    ("167772161", "10.0.0.1"),
    ("172.16.5.4", "172.16.5.4"),
    ("192.168.1.1", "192.168.1.1"),
    ("0xc0a80101", "192.168.1.1"),
    ("169.254.169.254", "169.254.169.254"),  # the cloud metadata address
    ("2852039166", "169.254.169.254"),
    ("0xa9fea9fe", "169.254.169.254"),
    ("0251.0376.0251.0376", "169.254.169.254"),
    ("100.64.0.1", "100.64.0.1"),  # CGNAT
    ("100.127.255.254", "100.127.255.254"),
    ("224.0.0.1", "224.0.0.1"),  # multicast
    ("239.255.255.250", "239.255.255.250"),
    ("240.0.0.1", "240.0.0.1"),  # reserved
    ("255.255.255.255", "255.255.255.255"),
    ("192.0.2.10", "192.0.2.10"),  # documentation
    ("198.18.0.1", "198.18.0.1"),  # benchmarking
    ("[::1]", "::1"),
    ("[::]", "::"),
    ("[0:0:0:0:0:0:0:1]", "::1"),
    ("[fe80::1]", "fe80::1"),
    ("[fe80::1%25eth0]", "fe80::1%eth0"),
    ("[fc00::1]", "fc00::1"),
    ("[fd12:3456::1]", "fd12:3456::1"),
    ("[fec0::1]", "fec0::1"),  # site-local
    ("[ff02::1]", "ff02::1"),
    ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),  # IPv4-mapped
    ("[::FFFF:7f00:1]", "::ffff:7f00:1"),
    ("[::ffff:169.254.169.254]", "::ffff:a9fe:a9fe"),
    ("[::ffff:10.0.0.1]", "::ffff:a00:1"),
    ("[::127.0.0.1]", "::7f00:1"),  # IPv4-compatible
    ("[::169.254.169.254]", "::a9fe:a9fe"),
    ("[2002:7f00:1::]", "2002:7f00:1::"),  # 6to4 of 127.0.0.1
    ("[2002:a9fe:a9fe::1]", "2002:a9fe:a9fe::1"),
    ("[64:ff9b::7f00:1]", "64:ff9b::7f00:1"),  # NAT64
    ("[64:ff9b::a9fe:a9fe]", "64:ff9b::a9fe:a9fe"),
    ("[2001:db8::1]", "2001:db8::1"),  # documentation
]

# Dotted quads with a leading zero httpx refuses to read at all (it could not send to
# them either): refused as unreadable, not for their address.
UNREADABLE = {"0177.0.0.1", "0177.0.0.01", "012.0.0.1", "0251.0376.0251.0376"}

PUBLIC_HOSTS = ["93.184.215.14", "8.8.8.8", "134744072", "[2606:4700::1111]", "[::ffff:8.8.8.8]"]


@pytest.mark.parametrize(("host", "address"), REFUSED_HOSTS)
def test_every_form_of_a_refused_address_is_refused(host: str, address: str) -> None:
    url = f"http://{host}:8080/hook"
    if host in UNREADABLE:
        with pytest.raises(CallbackUrlRefusedError, match="cannot be read as a URL"):
            OPEN.target(url)
        assert numeric_host(host) == ip_address(address)
        return
    with pytest.raises(CallbackAddressRefusedError) as caught:
        OPEN.target(url)
    assert caught.value.address == str(ip_address(address))
    assert caught.value.field == "callbackUrl"
    assert "KAIROS_CALLBACK_ALLOWED_NETWORKS" in caught.value.message


@pytest.mark.parametrize(("host", "address"), REFUSED_HOSTS)
def test_a_name_resolving_to_a_refused_address_is_refused(host: str, address: str) -> None:
    resolver = TableResolver({"hooks.example.com": ["93.184.215.14", address]})
    with pytest.raises(CallbackAddressRefusedError) as caught:
        asyncio.run(checked_addresses(OPEN, resolver, "https://hooks.example.com/h"))
    assert caught.value.address == str(ip_address(address))
    assert "hooks.example.com" in caught.value.message


@pytest.mark.parametrize(("host", "address"), REFUSED_HOSTS)
def test_a_refused_name_says_why_without_the_address_it_resolved_to(
    host: str, address: str
) -> None:
    # An app could map internal names through it: the refusal tells what kind of
    # address, never which one.
    resolver = TableResolver({"db.internal.example": [address]})
    with pytest.raises(CallbackAddressRefusedError) as caught:
        asyncio.run(checked_addresses(OPEN, resolver, "https://db.internal.example/h"))
    message = caught.value.message
    assert str(ip_address(address)) not in message
    carried = embedded_ipv4(ip_address(address))
    assert carried is None or str(carried) not in message
    assert "'db.internal.example'" in message and caught.value.kind.split(" (")[0] in message
    assert "kairos app networks" in message


@pytest.mark.parametrize("host", PUBLIC_HOSTS)
def test_public_addresses_are_accepted(host: str) -> None:
    target = OPEN.target(f"https://{host}/hook")
    assert target.port == 443


def test_a_name_resolving_to_public_addresses_only_is_accepted() -> None:
    resolver = TableResolver({"hooks.example.com": ["93.184.215.14", "2606:4700::1111"]})
    target, addresses = asyncio.run(
        checked_addresses(OPEN, resolver, "http://hooks.example.com:81/h")
    )
    assert (target.host, target.port) == ("hooks.example.com", 81)
    assert [str(a) for a in addresses] == ["93.184.215.14", "2606:4700::1111"]


@pytest.mark.parametrize(
    ("allowed", "host"),
    [
        ("127.0.0.0/8", "127.0.0.1"),
        ("127.0.0.0/8", "0x7f000001"),
        ("127.0.0.0/8", "[::ffff:127.0.0.1]"),
        ("10.0.0.0/8, 192.168.0.0/16", "192.168.1.1"),
        ("169.254.169.254", "169.254.169.254"),
        ("::1/128", "[::1]"),
        ("fd00::/8", "[fd12:3456::1]"),
    ],
)
def test_an_allowed_network_admits_its_addresses(allowed: str, host: str) -> None:
    CallbackUrlPolicy.from_settings(allowed, False).target(f"http://{host}/h")


def test_an_allowed_network_admits_only_itself() -> None:
    policy = CallbackUrlPolicy.from_settings("10.0.0.0/8", False)
    for host in ("127.0.0.1", "192.168.1.1", "169.254.169.254"):
        with pytest.raises(CallbackAddressRefusedError):
            policy.target(f"http://{host}/h")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/h",
        "file:///etc/passwd",
        "gopher://127.0.0.1:6379/_INFO",
        "http://user:secret@example.com/h",
        "https://user@example.com/h",
        "https://:secret@example.com/h",
        "http:///h",
        "http://[::1/h",
    ],
)
def test_other_schemes_credentials_and_broken_urls_are_refused(url: str) -> None:
    with pytest.raises(CallbackUrlRefusedError) as caught:
        OPEN.target(url)
    assert not isinstance(caught.value, CallbackAddressRefusedError)
    assert caught.value.field == "callbackUrl"


def test_https_only_refuses_http() -> None:
    policy = CallbackUrlPolicy(https_only=True)
    policy.target("https://example.com/h")
    with pytest.raises(CallbackUrlRefusedError, match="KAIROS_CALLBACK_HTTPS_ONLY"):
        policy.target("http://example.com/h")


def test_the_refusal_is_a_validation_error_naming_the_field_and_the_setting() -> None:
    with pytest.raises(ValidationFailedError) as caught:
        OPEN.target("http://169.254.169.254/latest/meta-data/")
    assert caught.value.field == "callbackUrl"
    assert "link-local" in caught.value.message
    assert "KAIROS_CALLBACK_ALLOWED_NETWORKS" in caught.value.message
    assert "169.254.169.254/32" in caught.value.message


def test_an_unknown_host_is_refused_as_unresolved() -> None:
    with pytest.raises(CallbackHostUnresolvedError, match=r"nowhere\.invalid"):
        asyncio.run(checked_addresses(OPEN, TableResolver(), "https://nowhere.invalid/h"))


def test_a_resolver_answering_nothing_is_refused_as_unresolved() -> None:
    resolver = TableResolver({"empty.example.com": []})
    with pytest.raises(CallbackHostUnresolvedError, match="no address"):
        asyncio.run(checked_addresses(OPEN, resolver, "https://empty.example.com/h"))


def test_a_numeric_host_is_never_sent_to_the_resolver() -> None:
    resolver = TableResolver()
    asyncio.run(checked_addresses(OPEN, resolver, "https://134744072/h"))
    assert resolver.asked == []


def test_the_system_resolver_gives_up_after_its_timeout() -> None:
    released = threading.Event()

    def hangs(*args: object, **kwargs: object) -> list[object]:
        # asyncio.run waits for its executor's threads at the end: hang briefly only.
        released.wait(1)
        return []

    resolver = SystemResolver(0.05, hangs)
    try:
        with pytest.raises(CallbackHostUnresolvedError, match=r"no answer within 0\.05 s"):
            asyncio.run(checked_addresses(OPEN, resolver, "https://slow.example.com/h"))
    finally:
        released.set()


def hangs_for_names_starting_hang(
    released: threading.Event, calls: list[str]
) -> Callable[..., list[Any]]:
    """A getaddrinfo that hangs (until ``released``) for names starting "hang" and
    answers a public address for any other, recording each call's host."""

    def getaddrinfo(host: str, port: int, **kwargs: object) -> list[Any]:
        calls.append(host)
        if host.startswith("hang"):
            released.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port))]

    return getaddrinfo


def test_lookups_that_hang_hold_no_lookup_of_another_host() -> None:
    # A receiver's DNS that never answers (or an app naming fresh subdomains of one) must
    # not make every other host's lookup wait behind it until it times out.
    released, calls = threading.Event(), list[str]()
    resolver = SystemResolver(1.0, hangs_for_names_starting_hang(released, calls))

    async def scenario() -> Sequence[IPAddress]:
        hung = [asyncio.ensure_future(resolver(f"hang{i}.example.com", 443)) for i in range(40)]
        await asyncio.sleep(0.05)
        try:
            return await resolver("hooks.example.com", 443)
        finally:
            released.set()
            await asyncio.gather(*hung, return_exceptions=True)

    try:
        assert asyncio.run(scenario()) == [ip_address("93.184.215.14")]
    finally:
        released.set()


def test_lookups_of_one_host_share_a_thread_and_threads_are_bounded() -> None:
    released, calls = threading.Event(), list[str]()
    resolver = SystemResolver(0.2, hangs_for_names_starting_hang(released, calls), max_threads=3)

    async def scenario() -> None:
        same = [resolver("hang.example.com", 443) for _ in range(50)]
        others = [resolver(f"hang{i}.example.com", 443) for i in range(2)]
        # Three threads hang; a fourth host's lookup waits for one, in vain.
        late = resolver("hooks.example.com", 443)
        outcomes = await asyncio.gather(*same, *others, late, return_exceptions=True)
        assert all(isinstance(o, TimeoutError) for o in outcomes), outcomes

    try:
        asyncio.run(scenario())
        assert sorted(calls) == ["hang.example.com", "hang0.example.com", "hang1.example.com"]
    finally:
        released.set()


def test_a_thousand_hosts_looked_up_at_once_all_resolve() -> None:
    # More hosts than threads: the rest wait their turn instead of failing.
    calls = list[str]()
    resolver = SystemResolver(30, hangs_for_names_starting_hang(threading.Event(), calls), 16)

    async def many() -> list[list[IPAddress]]:
        return await asyncio.gather(*(resolver(f"h{i}.example.com", 443) for i in range(1000)))

    assert all(a == [ip_address("93.184.215.14")] for a in asyncio.run(many()))
    assert len(calls) == 1000


def test_a_lookup_with_no_thread_to_run_in_is_unresolved_and_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resolver = SystemResolver(5, hangs_for_names_starting_hang(threading.Event(), []))
    start = threading.Thread.start

    def cannot_start(thread: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", cannot_start)
    with pytest.raises(CallbackHostUnresolvedError, match="no thread to look"):
        asyncio.run(checked_addresses(OPEN, resolver, "https://hooks.example.com/h"))
    monkeypatch.setattr(threading.Thread, "start", start)
    # Threads again: the same host is looked up afresh, not left queued for ever.
    asyncio.run(checked_addresses(OPEN, resolver, "https://hooks.example.com/h"))


def test_the_system_resolver_reads_localhost_as_loopback() -> None:
    with pytest.raises(CallbackAddressRefusedError, match="loopback"):
        asyncio.run(checked_addresses(OPEN, SystemResolver(), "http://localhost:9/h"))


def test_malformed_allowed_networks_name_the_setting() -> None:
    with pytest.raises(ConfigurationError, match="KAIROS_CALLBACK_ALLOWED_NETWORKS"):
        parse_networks("10.0.0.0/8,not-a-net")
    assert parse_networks(" 10.0.0.0/8 , ,::1 ") == parse_networks("10.0.0.0/8,::1")


def test_the_settings_default_to_public_only_over_http_or_https(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("KAIROS_CALLBACK_ALLOWED_NETWORKS", "KAIROS_CALLBACK_HTTPS_ONLY"):
        monkeypatch.delenv(name, raising=False)
    for settings in (ApiSettings(), NotifierSettings()):
        assert (settings.callback_allowed_networks, settings.callback_https_only) == ("", False)
    monkeypatch.setenv("KAIROS_CALLBACK_ALLOWED_NETWORKS", "127.0.0.0/8")
    monkeypatch.setenv("KAIROS_CALLBACK_HTTPS_ONLY", "true")
    settings = NotifierSettings()
    assert (settings.callback_allowed_networks, settings.callback_https_only) == (
        "127.0.0.0/8",
        True,
    )


_OCTET_TEXT = st.text(alphabet="0123456789abcdefx.", min_size=1, max_size=20)


@given(_OCTET_TEXT)
def test_numeric_hosts_read_as_the_socket_layer_reads_them(text: str) -> None:
    # One trailing dot (a fully qualified name) is read as if absent: Kairos connects to
    # the address it read, so reading more hosts as numeric only refuses more.
    bare = text[:-1] if text.endswith(".") else text
    try:
        expected: IPv4Address | None = IPv4Address(socket.inet_aton(bare))
    except OSError:
        expected = None
    assert numeric_host(text) == expected


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_every_spelling_of_an_ipv4_address_is_judged_alike(value: int) -> None:
    address = IPv4Address(value)
    kind = refusal_kind(address)
    spellings = [str(value), hex(value), f"0{value:o}", str(address)]
    for spelling in spellings:
        assert numeric_host(spelling) == address
        mapped = ip_address(f"::ffff:{address}")
        assert (refusal_kind(mapped) is None) == (kind is None)


class CountingResolver:
    """Answers after a moment, counting lookups; fails for ``failing`` hosts."""

    def __init__(self, failing: tuple[str, ...] = ()) -> None:
        self.lookups = 0
        self.failing = failing

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.lookups += 1
        await asyncio.sleep(0.01)
        if host in self.failing:
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return [ip_address("93.184.215.14")]


def test_the_caching_resolver_looks_a_host_up_once_for_concurrent_callers() -> None:
    inner = CountingResolver()
    cached = CachingResolver(inner)

    async def many() -> list[Sequence[IPAddress]]:
        return await asyncio.gather(*(cached("hooks.example.com", 443) for _ in range(200)))

    answers = asyncio.run(many())
    assert inner.lookups == 1
    assert all(list(a) == [ip_address("93.184.215.14")] for a in answers)


def test_the_caching_resolver_forgets_after_its_ttl_and_never_keeps_a_failure() -> None:
    now = [0.0]
    inner = CountingResolver(failing=("down.example.com",))
    cached = CachingResolver(inner, ttl_seconds=30, clock=lambda: now[0])

    async def scenario() -> None:
        await cached("hooks.example.com", 443)
        now[0] = 29.0
        await cached("hooks.example.com", 443)
        assert inner.lookups == 1
        now[0] = 30.0
        await cached("hooks.example.com", 443)
        assert inner.lookups == 2
        for _ in range(2):
            with pytest.raises(socket.gaierror):
                await cached("down.example.com", 443)
        assert inner.lookups == 4

    asyncio.run(scenario())


@given(st.integers(min_value=0, max_value=2**32 - 1), st.sampled_from(["dec", "hex", "dotted"]))
def test_a_url_is_refused_exactly_when_the_address_it_spells_is(value: int, form: str) -> None:
    address = IPv4Address(value)
    host = {"dec": str(value), "hex": hex(value), "dotted": str(address)}[form]
    refused = refusal_kind(address) is not None
    try:
        OPEN.target(f"http://{host}:8080/h")
    except CallbackAddressRefusedError as e:
        assert refused and e.address == str(address)
    else:
        assert not refused


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_ipv6_forms_carrying_an_ipv4_address_are_judged_by_it(value: int) -> None:
    address = IPv4Address(value)
    refused = refusal_kind(address) is not None
    high, low = value >> 16, value & 0xFFFF
    carriers = [
        f"::ffff:{address}",
        f"64:ff9b::{address}",
        f"2002:{high:x}:{low:x}::1",
    ]
    for carrier in carriers:
        assert (refusal_kind(ip_address(carrier)) is not None) == refused, carrier
