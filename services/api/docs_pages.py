"""/docs (Swagger UI) and /redoc (ReDoc), served with their scripts and styles from an
installed package (fastapi-offline's copies) instead of a CDN, so the pages work on a
network without internet access."""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from starlette.requests import Request
from starlette.responses import HTMLResponse

ASSETS_PATH = "/docs/assets"

# The pages fetch nothing off this server: ReDoc's sidebar shows a logo from its
# vendor's CDN, which the browser is told not to load (the page is complete without it).
OFFLINE_POLICY = "img-src 'self' data:; font-src 'self' data:; connect-src 'self'"


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
        page.headers["Content-Security-Policy"] = OFFLINE_POLICY
        return page

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
        page.headers["Content-Security-Policy"] = OFFLINE_POLICY
        return page
