"""The real dealbroker app plus one plain JSON route, the benchmark's throughput ceiling.

``GET /bench/ceiling`` runs through the same ASGI stack as every API route (the request-log
middleware, FastAPI routing, the orjson ``dump``) but touches neither the database nor a token.
Serve it with::

    python -m uvicorn bench.ceiling_app:factory --factory --no-access-log

run from the repository root (``bench_api.py`` does this for you).
"""

from fastapi import FastAPI
from starlette.responses import Response

from dealbroker.app import create_app
from dealbroker.core.responses import dump

CEILING_PATH = "/bench/ceiling"


async def ceiling() -> Response:
    """A small JSON body, built the way the API builds its bodies; no database work."""
    return Response(dump({"status": "ok"}), media_type="application/json")


def factory() -> FastAPI:
    """``dealbroker.app.create_app()`` with the ceiling route added (settings from the env)."""
    app = create_app()
    app.add_api_route(CEILING_PATH, ceiling, methods=["GET"], include_in_schema=False)
    return app
