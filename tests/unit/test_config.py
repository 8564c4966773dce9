"""Settings: the namespace rule, the notifier's retry tiers, the worker's prefetch."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from common.config import NotifierSettings, StoreSettings, WorkerSettings


@pytest.mark.parametrize("namespace", ["kairos", "a", "t_0123abcd", "ns_2", "a" * 48])
def test_valid_namespaces_are_kept(namespace: str) -> None:
    assert StoreSettings(namespace=namespace).namespace == namespace


@pytest.mark.parametrize(
    "namespace",
    ["", "Kairos", "1kairos", "_kairos", "kai-ros", "kai ros", "kairos.test", "a" * 49, "k\u00e9"],
)
def test_invalid_namespaces_are_refused(namespace: str) -> None:
    with pytest.raises(ValidationError, match="KAIROS_NAMESPACE"):
        StoreSettings(namespace=namespace)


def test_namespace_with_a_trailing_newline_is_refused() -> None:
    with pytest.raises(ValidationError):
        StoreSettings(namespace="kairos\n")


def test_namespace_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAIROS_NAMESPACE", "from_env")
    assert StoreSettings().namespace == "from_env"


def test_invalid_namespace_from_the_environment_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KAIROS_NAMESPACE", "Bad-Name")
    with pytest.raises(ValidationError):
        StoreSettings()


def test_namespace_defaults_to_kairos(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAIROS_NAMESPACE", raising=False)
    assert StoreSettings().namespace == "kairos"


def test_retry_tiers_parse_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAIROS_RETRY_TIERS_SECONDS", raising=False)
    assert NotifierSettings().retry_tiers() == [5, 300, 1800, 7200, 18000, 36000, 36000]


@pytest.mark.parametrize(
    ("text", "tiers"),
    [
        ("5,30,300", [5, 30, 300]),
        (" 5 , 30 ,300 ", [5, 30, 300]),
        ("60", [60]),
        ("5,,30,", [5, 30]),
        ("", []),
    ],
)
def test_retry_tiers_parse_comma_separated_seconds(text: str, tiers: list[int]) -> None:
    assert NotifierSettings(retry_tiers_seconds=text).retry_tiers() == tiers


def test_retry_tiers_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAIROS_RETRY_TIERS_SECONDS", "1,2,3")
    assert NotifierSettings().retry_tiers() == [1, 2, 3]


def test_a_worker_prefetch_below_one_is_refused() -> None:
    with pytest.raises(ValidationError, match="prefetch"):
        WorkerSettings(prefetch=0)
