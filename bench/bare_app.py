"""A bare FastAPI app with one plain JSON route: the benchmark's outside baseline.

No middleware, no settings, no database: what FastAPI and uvicorn (uvloop, httptools) cost for
a JSON answer on this machine, measured in the same run as dealbroker so the two compare on
the same noise. The body is made as TechEmpower's FastAPI JSON test makes it (orjson). Serve
it with::

    python -m uvicorn bench.bare_app:app --no-access-log --log-level warning

run from the repository root (``bench_api.py`` does this for you). Uvicorn picks uvloop and
httptools when they are installed (``uvicorn[standard]``), for this app as for dealbroker.
"""

import orjson
from fastapi import FastAPI
from starlette.responses import Response

BARE_PATH = "/json"

app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)


@app.get(BARE_PATH)
async def plain_json() -> Response:
    return Response(orjson.dumps({"status": "ok"}), media_type="application/json")
