"""Rendering console pages: the Jinja2 environment, time and size formats, the headers
every console response carries, and one-shot notices (flash) across a redirect."""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeAlias
from urllib.parse import quote, unquote

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from common.jsontext import read_stored_json
from common.timefmt import iso_ms

PageContext: TypeAlias = dict[str, Any]
"""The names a page's template reads, by name: records, views, figures, each its own type
(the template reads them by attribute, unchecked)."""

TEMPLATES = Path(__file__).parent / "templates"
FLASH_COOKIE = "kairos_console_notice"
COOKIE_PATH = "/console"

# No script or style from anywhere but the console itself, no framing, no form posted
# elsewhere: a page that shows a job's stored text can run nothing it carries.
SECURITY_HEADERS = MappingProxyType(
    {
        "Content-Security-Policy": (
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        ),
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
        "Cache-Control": "no-store",
    }
)


def when(epoch_ms: int | None) -> str:
    """``2026-12-01 10:15:30 UTC``; a dash for no time."""
    text = iso_ms(epoch_ms)
    return "-" if text is None else text[:10] + " " + text[11:19] + " UTC"


def span(ms: float | None) -> str:
    """A duration in the largest unit that reads well: ``350 ms``, ``4.2 s``, ``3 min 5 s``."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours < 48 else f"{hours // 24} d {hours % 24} h"


def relative(epoch_ms: int | None, now_ms: int) -> str:
    """``12 s ago`` or ``in 3 min 5 s``, against the cluster clock's now."""
    if epoch_ms is None:
        return ""
    delta = epoch_ms - now_ms
    return f"in {span(delta)}" if delta > 0 else f"{span(-delta)} ago"


def pretty_json(raw: str | None) -> str:
    """Stored JSON text indented for reading; the text itself when it is not JSON."""
    if raw is None:
        return ""
    try:
        return json.dumps(read_stored_json(raw), indent=2, ensure_ascii=False)
    except ValueError:
        return raw


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(when=when, span=span, pretty_json=pretty_json)
    env.globals.update(relative=relative)
    return env


ENVIRONMENT = _environment()


def secured(response: Response) -> Response:
    """``response`` with the console's security headers."""
    response.headers.update(SECURITY_HEADERS)
    return response


def _notice(request: Request) -> dict[str, str] | None:
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return None
    kind, _, text = unquote(raw).partition(":")
    return {"kind": "error" if kind == "error" else "done", "text": text}


def page(request: Request, template: str, status: int = 200, **context: Any) -> Response:
    """A console page, with the notice a redirect left for it (shown once)."""
    notice = _notice(request)
    html = ENVIRONMENT.get_template(template).render(request=request, notice=notice, **context)
    response = secured(HTMLResponse(html, status_code=status))
    if notice:
        response.delete_cookie(FLASH_COOKIE, path=COOKIE_PATH)
    return response


def redirect(to: str, notice: str | None = None, error: bool = False) -> Response:
    """303 to a console path, leaving ``notice`` (an error when ``error``) for the page
    it lands on."""
    response = secured(RedirectResponse(to, status_code=303))
    if notice:
        kind = "error" if error else "done"
        response.set_cookie(
            FLASH_COOKIE,
            quote(f"{kind}:{notice}"[:1500]),
            max_age=60,
            path=COOKIE_PATH,
            httponly=True,
            samesite="strict",
        )
    return response
