"""A callback URL that could reach an address it should not is refused at submission:
a 422 naming the field and KAIROS_CALLBACK_ALLOWED_NETWORKS, nothing written; on create,
in a batch and on a patch."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.callback_urls import CachingResolver, SystemResolver, TableResolver, parse_networks
from common.config import ApiSettings, StoreSettings
from common.db.apps import AppCredentials, MySqlAppTransactions
from tests.integration.helpers import PUBLIC_ADDRESS, make_app

JOBS = "/openapi/jobs"
BATCH = "/openapi/jobs/batch"
SETTING = "KAIROS_CALLBACK_ALLOWED_NETWORKS"

# Names of this test's own DNS: public, or pointing inside.
NAMES = {
    "hooks.example.com": [PUBLIC_ADDRESS],
    "localhost": ["127.0.0.1", "::1"],
    "internal.example.com": ["10.1.2.3"],
    "metadata.example.com": ["169.254.169.254"],
    "mixed.example.com": [PUBLIC_ADDRESS, "127.0.0.1"],
    "mapped.example.com": ["::ffff:127.0.0.1"],
    "v6.example.com": ["2606:4700::1111", "fd00::1"],
}

REFUSED_URLS = [
    "http://127.0.0.1:8080/h",
    "http://localhost/h",
    "http://2130706433/h",
    "http://0x7f000001/h",
    "http://127.1/h",
    "http://0/h",
    "http://10.0.0.1/h",
    "http://192.168.0.1/h",
    "http://172.16.0.1/h",
    "http://169.254.169.254/latest/meta-data/",
    "http://0xa9fea9fe/latest/meta-data/",
    "http://100.64.0.1/h",
    "http://224.0.0.1/h",
    "http://240.0.0.1/h",
    "http://[::1]/h",
    "http://[::]/h",
    "http://[fe80::1]/h",
    "http://[fd00::1]/h",
    "http://[::ffff:127.0.0.1]/h",
    "http://[::ffff:169.254.169.254]/h",
    "http://[64:ff9b::a9fe:a9fe]/h",
    "http://[2002:a9fe:a9fe::]/h",
    "http://internal.example.com/h",
    "http://metadata.example.com/h",
    "http://mixed.example.com/h",
    "http://mapped.example.com/h",
    "http://v6.example.com/h",
]


def body(**fields: Any) -> dict[str, Any]:
    return {"jobName": "cb", "jobHandler": "demo.noop", "triggerAt": "2100-01-01T00:00:00Z"} | (
        fields
    )


def job_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT COUNT(*) FROM jobs")).scalar_one())


def api(
    namespace: StoreSettings,
    credentials: AppCredentials,
    resolver: Any = None,
    new_resolver: Any = None,
    **settings: Any,
) -> TestClient:
    from services.api.app import create_app

    configured = ApiSettings(namespace=namespace.namespace, **settings)
    shared = resolver or TableResolver(NAMES)
    client = TestClient(create_app(configured, new_resolver or (lambda: shared)))
    client.headers["Authorization"] = f"Bearer {credentials.api_key}"
    return client


@pytest.fixture
def client(namespace: StoreSettings, app_credentials: AppCredentials) -> Iterator[TestClient]:
    with api(namespace, app_credentials) as opened:
        yield opened


def refusal(response: Any, field: str = "callbackUrl") -> str:
    """The refusal's message, once it is seen to be a 422 naming ``field``."""
    assert response.status_code == 422, response.text
    [error] = response.json()["errors"]
    assert error["field"] == field
    return str(error["message"])


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_each_refused_form_is_a_422_naming_the_field_and_the_setting(
    client: TestClient, engine: Engine, url: str
) -> None:
    message = refusal(client.post(JOBS, json=body(callbackUrl=url)))
    assert SETTING in message
    assert job_count(engine) == 0


def test_a_batch_names_each_refused_item_and_writes_nothing(
    client: TestClient, engine: Engine
) -> None:
    items = [
        body(jobName="a", callbackUrl="https://hooks.example.com/h"),
        body(jobName="b", callbackUrl="http://169.254.169.254/"),
        body(jobName="c"),
        body(jobName="d", callbackUrl="http://internal.example.com/h"),
        body(jobName="e", callbackUrl="http://169.254.169.254/"),
    ]
    response = client.post(BATCH, json={"jobs": items})
    assert response.status_code == 422, response.text
    errors = response.json()["errors"]
    assert [e["field"] for e in errors] == [f"jobs[{i}].callbackUrl" for i in (1, 3, 4)]
    assert all(SETTING in e["message"] for e in errors)
    assert job_count(engine) == 0


def test_a_patch_to_a_refused_url_changes_nothing(client: TestClient, engine: Engine) -> None:
    created = client.post(JOBS, json=body(callbackUrl="https://hooks.example.com/h"))
    assert created.status_code == 202, created.text
    job_id = created.json()["jobId"]
    patched = client.patch(f"{JOBS}/{job_id}", json={"callbackUrl": "http://[::1]:8080/h"})
    assert SETTING in refusal(patched)
    assert client.get(f"{JOBS}/{job_id}").json()["callbackUrl"] == "https://hooks.example.com/h"
    assert client.patch(f"{JOBS}/{job_id}", json={"callbackUrl": None}).status_code == 200


def test_public_urls_are_accepted_everywhere(client: TestClient) -> None:
    url = "https://hooks.example.com/h"
    created = client.post(JOBS, json=body(callbackUrl=url))
    assert created.status_code == 202, created.text
    batch = client.post(BATCH, json={"jobs": [body(callbackUrl=url), body(callbackUrl=url)]})
    assert batch.status_code == 202, batch.text
    job_id = created.json()["jobId"]
    patched = client.patch(f"{JOBS}/{job_id}", json={"callbackUrl": "http://8.8.8.8/h"})
    assert patched.status_code == 200, patched.text


def test_an_unknown_host_is_a_422_naming_the_field(client: TestClient) -> None:
    message = refusal(client.post(JOBS, json=body(callbackUrl="https://nowhere.invalid/h")))
    assert "did not resolve" in message


@pytest.mark.parametrize(
    "url", ["http://user:secret@hooks.example.com/h", "gopher://hooks.example.com/h"]
)
def test_credentials_and_other_schemes_are_refused(client: TestClient, url: str) -> None:
    refusal(client.post(JOBS, json=body(callbackUrl=url)))


def test_allowed_networks_admit_internal_receivers(
    namespace: StoreSettings, app_credentials: AppCredentials
) -> None:
    allowed = "127.0.0.0/8,10.0.0.0/8"
    with api(namespace, app_credentials, callback_allowed_networks=allowed) as client:
        for url in ("http://127.0.0.1:9/h", "http://internal.example.com/h", "http://0x7f000001/"):
            assert client.post(JOBS, json=body(callbackUrl=url)).status_code == 202, url
        refusal(client.post(JOBS, json=body(callbackUrl="http://metadata.example.com/h")))


def test_an_apps_own_networks_admit_only_its_callbacks_and_replace_the_default(
    namespace: StoreSettings, engine: Engine, app_credentials: AppCredentials
) -> None:
    allowed, other = app_credentials, make_app(engine, "other")
    with MySqlAppTransactions(engine).transaction() as apps:
        apps.set_callback_networks(allowed.app_id, parse_networks("127.0.0.0/8"))
    loopback = body(callbackUrl="http://127.0.0.1:9/h")
    # The cluster's default admits 10.0.0.0/8: the app with a list of its own loses it.
    with api(namespace, allowed, callback_allowed_networks="10.0.0.0/8") as client:
        assert client.post(JOBS, json=loopback).status_code == 202
        batch = client.post(BATCH, json={"jobs": [loopback, loopback]})
        assert batch.status_code == 202, batch.text
        assert "kairos app networks" in refusal(
            client.post(JOBS, json=body(callbackUrl="http://internal.example.com/h"))
        )
    with api(namespace, other, callback_allowed_networks="10.0.0.0/8") as client:
        assert "loopback" in refusal(client.post(JOBS, json=loopback))
        refused = client.post(BATCH, json={"jobs": [loopback]})
        assert refused.status_code == 422 and job_count(engine) == 3
        ok = client.post(JOBS, json=body(callbackUrl="http://internal.example.com/h"))
        assert ok.status_code == 202, ok.text
        job_id = ok.json()["jobId"]
        patched = client.patch(f"{JOBS}/{job_id}", json={"callbackUrl": "http://127.0.0.1:9/"})
        assert "loopback" in refusal(patched)


def test_https_only_refuses_http(namespace: StoreSettings, app_credentials: AppCredentials) -> None:
    with api(namespace, app_credentials, callback_https_only=True) as client:
        message = refusal(client.post(JOBS, json=body(callbackUrl="http://hooks.example.com/h")))
        assert "KAIROS_CALLBACK_HTTPS_ONLY" in message
        ok = client.post(JOBS, json=body(callbackUrl="https://hooks.example.com/h"))
        assert ok.status_code == 202


def test_a_resolver_that_hangs_holds_neither_the_request_nor_the_api(
    namespace: StoreSettings, app_credentials: AppCredentials
) -> None:
    released = threading.Event()

    def hanging_getaddrinfo(*args: Any, **kwargs: Any) -> Any:
        released.wait(30)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    answers: dict[str, Any] = {}
    try:
        with api(namespace, app_credentials, SystemResolver(0.5, hanging_getaddrinfo)) as client:

            def submit() -> None:
                slow = body(callbackUrl="https://slow.example.com/h")
                answers["create"] = client.post(JOBS, json=slow)

            began = time.monotonic()
            creating = threading.Thread(target=submit)
            creating.start()
            # While the create waits for DNS, the API answers others.
            answers["health"] = client.get("/healthz")
            creating.join(20)
            took = time.monotonic() - began
    finally:
        released.set()
    assert answers["health"].status_code == 200
    assert "no answer within 0.5 s" in refusal(answers["create"])
    assert took < 10


def hanging_dns(released: threading.Event) -> Any:
    """A getaddrinfo that hangs (until ``released``) for names starting "hang" and
    answers the public address for any other."""

    def getaddrinfo(host: str, port: int, **kwargs: Any) -> Any:
        if host.startswith("hang"):
            released.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (PUBLIC_ADDRESS, port))]

    return getaddrinfo


def test_creates_naming_hosts_whose_dns_hangs_hold_no_other_create(
    namespace: StoreSettings, app_credentials: AppCredentials
) -> None:
    released = threading.Event()
    resolver = CachingResolver(SystemResolver(1.0, hanging_dns(released)))
    try:
        with api(namespace, app_credentials, resolver) as client:

            def submit(i: int) -> int:
                hung = body(jobName=f"h{i}", callbackUrl=f"https://hang{i}.example.com/h")
                return client.post(JOBS, json=hung).status_code

            with ThreadPoolExecutor(40) as pool:
                hanging = list(pool.map(submit, range(40)))
                # Forty lookups hang past their timeout; another host's still answers.
                ok = client.post(JOBS, json=body(callbackUrl="https://hooks.example.com/h"))
    finally:
        released.set()
    assert hanging == [422] * 40
    assert ok.status_code == 202, ok.text


def test_an_app_naming_hosts_whose_dns_hangs_holds_no_other_apps_lookups(
    namespace: StoreSettings, app_credentials: AppCredentials, engine: Engine
) -> None:
    # One app names a thousand fresh subdomains of a domain whose DNS never answers: it
    # may use up lookup threads of its own, never those another app's create needs.
    released = threading.Event()

    def new_resolver() -> CachingResolver:
        return CachingResolver(SystemResolver(1.0, hanging_dns(released), max_threads=8))

    other = make_app(engine, "other")
    try:
        with api(namespace, app_credentials, new_resolver=new_resolver) as client:
            items = [
                body(jobName=f"h{i}", callbackUrl=f"https://hang{i}.example.com/h")
                for i in range(1000)
            ]
            hung = client.post(BATCH, json={"jobs": items})
            client.headers["Authorization"] = f"Bearer {other.api_key}"
            ok = client.post(JOBS, json=body(callbackUrl="https://hooks.example.com/h"))
    finally:
        released.set()
    assert hung.status_code == 422
    assert ok.status_code == 202, ok.text


def test_a_batch_naming_one_host_a_thousand_times_resolves_it_once(
    namespace: StoreSettings, app_credentials: AppCredentials, engine: Engine
) -> None:
    names = TableResolver(NAMES)
    with api(namespace, app_credentials, CachingResolver(names)) as client:
        items = [
            body(jobName=f"j{i}", callbackUrl=f"https://hooks.example.com/{i}") for i in range(1000)
        ]
        response = client.post(BATCH, json={"jobs": items})
        assert response.status_code == 202, response.text[:500]
        again = client.post(JOBS, json=body(callbackUrl="https://hooks.example.com/again"))
        assert again.status_code == 202
    assert names.asked == ["hooks.example.com"]
    assert job_count(engine) == 1001
