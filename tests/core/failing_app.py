"""The real app with two routes that fail as bugs would, for a real server process in the log
tests: ``python -m uvicorn tests.core.failing_app:factory --factory``."""

from fastapi import FastAPI
from sqlalchemy import text

from dealbroker.app import create_app
from dealbroker.core.db import Session


async def boom() -> None:
    raise RuntimeError("a bug")


async def bad_sql(session: Session) -> None:
    await session.execute(text("SELECT no_such_column FROM deals"))


def factory() -> FastAPI:
    app = create_app()
    app.add_api_route("/boom", boom)
    app.add_api_route("/bad-sql", bad_sql)
    return app
