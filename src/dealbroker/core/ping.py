"""Health checks, no token needed: ``/ping`` (the interface's: the service and its database
answer), ``/healthz`` (the process is alive, for a supervisor's liveness probe) and ``/readyz``
(the database answers and its schema is current, for a load balancer's readiness probe)."""

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import text
from starlette.responses import Response

from dealbroker.core.db import Session
from dealbroker.core.errors import Unavailable, problem
from dealbroker.core.migrate import schema_mismatch
from dealbroker.core.responses import dump

router = APIRouter(tags=["Health"])


class Pong(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"status": "ok"}]})
    status: str


@router.get(
    "/ping",
    operation_id="ping",
    summary="Check that the service and its database answer",
    response_model=Pong,
    responses={503: problem(503, "Service Unavailable", "The database does not answer.")},
)
async def ping(session: Session) -> Response:
    await session.execute(text("SELECT 1"))
    return Response(dump({"status": "ok"}), media_type="application/json")


@router.get(
    "/healthz",
    operation_id="healthz",
    summary="Liveness: the process answers (no database call)",
    response_model=Pong,
)
async def healthz() -> Response:
    return Response(dump({"status": "ok"}), media_type="application/json")


class Ready(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"status": "ready", "schema": "0009"}]}
    )
    status: str
    schema_: str = Field(alias="schema")


@router.get(
    "/readyz",
    operation_id="readyz",
    summary="Readiness: the database answers and its schema is the one this code needs",
    response_model=Ready,
    responses={
        503: problem(
            503,
            "Service Unavailable",
            "The database schema is at 0008; this code needs 0009: run dealbroker migrate.",
        )
    },
)
async def readyz(session: Session) -> Response:
    current = await session.scalar(text("SELECT version_num FROM alembic_version"))
    mismatch = schema_mismatch(current)
    if mismatch is not None:
        raise Unavailable(f"{mismatch[0].upper()}{mismatch[1:]}.")
    return Response(dump({"status": "ready", "schema": current}), media_type="application/json")
