"""``GET /ping``: liveness and database reachability, no token needed."""

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict
from sqlalchemy import text
from starlette.responses import Response

from dealbroker.core.db import Session
from dealbroker.core.errors import problem
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
