"""The API reference at ``/docs``: Swagger UI, served by the service itself.

Its script and stylesheet come from the pinned ``swagger-ui-bundle-v2`` package (Swagger UI
under the Apache License 2.0, shipped with its license), never from a CDN: the page works
offline and loads no code from a third party. A Content-Security-Policy allows exactly that:
scripts from this origin plus the page's one inline script, by its hash.
"""

import base64
import hashlib
import re

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

DOCS = "/docs"
ASSETS = "/docs/assets"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def _policy(html: str) -> str:
    """The page's CSP: its own origin, and its inline scripts by hash."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in _INLINE_SCRIPT.findall(html)
    )
    return (
        f"default-src 'none'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    )


def _with_policy(page: HTMLResponse) -> tuple[str, dict[str, str]]:
    html = bytes(page.body).decode()
    return html, {"Content-Security-Policy": _policy(html)}


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs`` (create the app with ``docs_url=None`` so FastAPI's CDN page is off)."""
    page, page_headers = _with_policy(
        get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
            oauth2_redirect_url=OAUTH2_REDIRECT,
        )
    )
    redirect, redirect_headers = _with_policy(get_swagger_ui_oauth2_redirect_html())

    @app.get(DOCS, include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(page, headers=page_headers)

    @app.get(OAUTH2_REDIRECT, include_in_schema=False)
    async def oauth2_redirect() -> HTMLResponse:
        return HTMLResponse(redirect, headers=redirect_headers)

    app.mount(ASSETS, StaticFiles(directory=swagger_ui_path), name="docs-assets")
