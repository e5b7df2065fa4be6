"""Health checks, no token needed: ``/ping`` (the interface's: the service and its database
answer), ``/healthz`` (the process is alive, for a supervisor's liveness probe) and ``/readyz``
(the database answers and its schema is current, for a load balancer's readiness probe; it
also names the process's background tasks that failed and wait to start again,
``core.background``).

The two that ask the database do so on a connection of their own (``app.state.probe_engine``,
``core.db.create_probe_engine``), never one of the request pool's, and give up after
``PROBE_TIMEOUT`` seconds: under load, when every pooled connection is busy and requests are
being shed, they still answer at once, so a load balancer does not drop every busy instance
together. The concurrency cap lets them through too (``core.concurrency``).
"""

import asyncio

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from sqlalchemy import text
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.responses import Response

from dealbroker.core.errors import Unavailable, problem
from dealbroker.core.fastpath.routes import DirectRoute
from dealbroker.core.migrate import schema_mismatch
from dealbroker.core.responses import dump
from dealbroker.core.validation import examples

router = APIRouter(tags=["Health"], route_class=DirectRoute)
# Seconds a probe may take, its wait for its connection included: within a load balancer's
# usual one-second probe timeout.
PROBE_TIMEOUT = 0.5


async def _probe(request: Request, statement: str) -> str | None:
    """The one value ``statement`` selects, on the probe connection, within ``PROBE_TIMEOUT``;
    ``Unavailable`` (503) if the database takes longer."""
    engine: AsyncEngine = request.app.state.probe_engine

    async def run() -> str | None:
        async with engine.connect() as conn:
            value = await conn.scalar(text(statement))
            return None if value is None else str(value)

    # Waited for ``PROBE_TIMEOUT`` and no longer: a probe cut short is left to end by itself
    # (``_abandon``). ``asyncio.wait_for`` would wait for its end too: for a database that
    # does not answer, the probe connection's closing, seconds more.
    probe = asyncio.ensure_future(run())
    try:
        await asyncio.wait((probe,), timeout=PROBE_TIMEOUT)
    except asyncio.CancelledError:
        _abandon(probe)
        raise
    if not probe.done():
        _abandon(probe)
    else:
        try:
            value = probe.result()
        except (TimeoutError, PoolTimeout):
            pass  # the probe connection's own timeouts (``core.db.create_probe_engine``)
        else:
            answered = getattr(request.app.state, "database_answered", None)
            if answered is not None:  # the end of an outage, if there was one (``app``)
                answered()
            return value
    raise Unavailable(f"The database did not answer within {PROBE_TIMEOUT:g} seconds.")


# Probes cut short, until they have ended (a task must be referenced while it runs).
_abandoned: set["asyncio.Future[str | None]"] = set()


def _abandon(probe: "asyncio.Future[str | None]") -> None:
    probe.cancel()
    _abandoned.add(probe)
    probe.add_done_callback(_ended)


def _ended(probe: "asyncio.Future[str | None]") -> None:
    _abandoned.discard(probe)
    if not probe.cancelled():
        probe.exception()  # retrieved: ended by an error nobody awaits any more


class Pong(BaseModel):
    model_config = examples({"status": "ok"})
    status: str


@router.get(
    "/ping",
    operation_id="ping",
    summary="Check that the service and its database answer",
    description=(
        "200 when the service answers and its database does; 503 otherwise. Takes no credential."
    ),
    response_model=Pong,
    responses={503: problem(503, "Service Unavailable", "The database does not answer.")},
)
async def ping(request: Request) -> Response:
    await _probe(request, "SELECT 1")
    return Response(dump({"status": "ok"}), media_type="application/json")


@router.get(
    "/healthz",
    operation_id="healthz",
    summary="Liveness: the process answers (no database call)",
    description=(
        "For a process supervisor: 200 as long as the process serves requests. Takes no credential."
    ),
    response_model=Pong,
)
async def healthz() -> Response:
    return Response(dump({"status": "ok"}), media_type="application/json")


class Ready(BaseModel):
    model_config = examples({"status": "ready", "schema": "0009", "restarting": []})
    status: str
    schema_: str = Field(alias="schema")
    restarting: list[str] = Field(
        description="This process's background tasks (the request log's writer, the embedded "
        "worker, ...) that failed and wait to be started again, by name; normally none. They "
        "do not make the process unready."
    )


@router.get(
    "/readyz",
    operation_id="readyz",
    summary="Readiness: the database answers and its schema is the one this code needs",
    description=(
        "For a load balancer: 503 while the database does not answer or its schema is not "
        "the one this code needs. Takes no credential. `restarting` names the process's "
        "background tasks that failed and wait to be started again."
    ),
    response_model=Ready,
    responses={
        503: problem(
            503,
            "Service Unavailable",
            "The database schema is at 0008; this code needs 0009: run dealbroker migrate.",
        )
    },
)
async def readyz(request: Request) -> Response:
    current = await _probe(request, "SELECT version_num FROM alembic_version")
    mismatch = schema_mismatch(current)
    if mismatch is not None:
        raise Unavailable(f"{mismatch[0].upper()}{mismatch[1:]}.")
    background = getattr(request.app.state, "background", None)  # None: no lifespan ran
    restarting = [] if background is None else background.restarting()
    return Response(
        dump({"status": "ready", "schema": current, "restarting": restarting}),
        media_type="application/json",
    )
