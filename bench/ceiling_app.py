"""The real dealbroker app plus one plain JSON route, the benchmark's throughput ceiling.

``GET /bench/ceiling`` runs through the same ASGI stack as every API route (the request-log
middleware, FastAPI routing, the orjson ``dump``) but touches neither the database nor a token.
Serve it with::

    python -m uvicorn bench.ceiling_app:factory --factory --no-access-log

run from the repository root (``bench_api.py`` does this for you). Logging is configured as
``dealbroker serve`` configures it (``DEALBROKER_LOG_LEVEL``, ``DEALBROKER_LOG_FORMAT``), so at
the default level ``info`` every request writes its access line, as in production.
"""

from fastapi import FastAPI
from starlette.responses import Response

from dealbroker.app import create_app
from dealbroker.core import logs
from dealbroker.core.responses import dump
from dealbroker.core.settings import get_settings

CEILING_PATH = "/bench/ceiling"


async def ceiling() -> Response:
    """A small JSON body, built the way the API builds its bodies; no database work."""
    return Response(dump({"status": "ok"}), media_type="application/json")


def factory() -> FastAPI:
    """``dealbroker.app.create_app()`` with the ceiling route added, tried first (settings from
    the env)."""
    settings = get_settings()
    logs.configure(settings.log_level, settings.log_format)
    app = create_app(settings)
    app.add_api_route(CEILING_PATH, ceiling, methods=["GET"], include_in_schema=False)
    # First, as the health checks are: added last, every request to it would try the app's
    # other routes first, and it would measure them rather than the stack around a route.
    app.router.routes.insert(0, app.router.routes.pop())
    return app
