"""What both clients share: the HTTP client's settings and the waiting in ``wait``."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from kairos_client._version import VERSION
from kairos_client.enums import FINISHED_JOB_STATUSES
from kairos_client.models import Job

DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=5.0)
DEFAULT_PAGE_SIZE = 100


def client_headers(api_key: str) -> dict[str, str]:
    """The headers of every request: the API key, what answers are read, who asks."""
    if not api_key:
        raise ValueError("api_key is empty: pass the app's API key (`kairos app create`)")
    return {
        "Authorization": f"Bearer {api_key}",
        "Accept": "application/json, application/problem+json",
        "User-Agent": f"kairos-client-python/{VERSION} httpx/{httpx.__version__}",
    }


def base_url_of(base_url: str) -> str:
    """The API's root URL, without a trailing slash (``http://127.0.0.1:8000``)."""
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
    return base_url.rstrip("/")


def merged_headers(call_headers: Mapping[str, str]) -> dict[str, str] | None:
    """The call's own headers for httpx, or None when it has none."""
    return dict(call_headers) if call_headers else None


def finished(job: Job) -> bool:
    """True once the job is in a status it never leaves (SUCCEEDED, FAILED, CANCELLED)."""
    return job.status in FINISHED_JOB_STATUSES


def next_poll(poll_interval: float, polls: int, remaining: float) -> float:
    """The wait before the next read in ``wait``: the interval, doubled after every
    ten reads up to 8x, never past the deadline."""
    grown = poll_interval * (1 << min(3, polls // 10))
    return max(0.0, min(grown, remaining))
