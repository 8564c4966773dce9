"""/docs (Swagger UI) and /redoc (ReDoc), served with their scripts and styles from an
installed package (fastapi-offline's copies) instead of a CDN, so the pages work on a
network without internet access."""

from __future__ import annotations

import base64
import hashlib
import re
from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from starlette.requests import Request
from starlette.responses import HTMLResponse

ASSETS_PATH = "/docs/assets"

# The pages fetch nothing off this server (ReDoc's sidebar shows a logo from its
# vendor's CDN, which the browser is told not to load: the page is complete without
# it). They share the console's origin, so they run only scripts from this server plus
# their own inline start-up script (by its hash), and no other site may frame them.
# Both viewers style their elements inline.
OFFLINE_POLICY = (
    "default-src 'none'; script-src 'self'{hashes}; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def offline_policy(html: str) -> str:
    """The page's Content-Security-Policy: ``OFFLINE_POLICY`` admitting the inline
    scripts of ``html`` by their SHA-256 (never any inline script, never another host)."""
    hashes = "".join(
        f" 'sha256-{base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()}'"
        for body in _INLINE_SCRIPT.findall(html)
    )
    return OFFLINE_POLICY.format(hashes=hashes)


def _secured(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = offline_policy(bytes(page.body).decode())
    page.headers["X-Frame-Options"] = "DENY"
    page.headers["X-Content-Type-Options"] = "nosniff"
    page.headers["Referrer-Policy"] = "same-origin"
    return page


def _assets_directory() -> str:
    return str(files("fastapi_offline") / "static")


def install_docs_pages(app: FastAPI, openapi_url: str = "/openapi.json") -> None:
    """Serve /docs and /redoc, and their assets under ``ASSETS_PATH``."""
    app.mount(ASSETS_PATH, StaticFiles(directory=_assets_directory()), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_swagger_ui_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_PATH}/favicon.png",
        )
        return _secured(page)

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_redoc_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS_PATH}/favicon.png",
            with_google_fonts=False,
        )
        return _secured(page)
