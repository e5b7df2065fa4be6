"""The real app with routes that fail as bugs would, run by a real server process for the log
and trace tests (``serve``)."""

import subprocess
import sys
from pathlib import Path

import httpx
from fastapi import FastAPI
from sqlalchemy import text

from dealbroker.app import create_app
from dealbroker.core.db import Session
from tests.processes import env

# A value the database's error message echoes back (personal data in a real request).
ECHOED = "kari.nordmann@example.com"

_SERVE = """
import logging.config, sys, uvicorn
from dealbroker.core import logs
config = logs.config("info", "json")
logging.config.dictConfig(config)
uvicorn.run("tests.core.failing_app:factory", factory=True, port=int(sys.argv[1]),
            log_config=config, access_log=False)
"""


async def boom() -> None:
    raise RuntimeError("a bug")


async def bad_sql(session: Session) -> None:
    await session.execute(text("SELECT no_such_column FROM deals"))


async def bad_param(session: Session) -> None:
    """A statement the database refuses, quoting its parameter in the error's message."""
    assert session.bind is not None
    if session.bind.dialect.name == "sqlite":
        statement = "SELECT json_extract('{}', :value)"  # JSON path error near '…'
    else:
        statement = "SELECT CAST(:value AS integer)"  # invalid input syntax for type integer
    await session.execute(text(statement), {"value": ECHOED})


def factory() -> FastAPI:
    app = create_app()
    app.add_api_route("/boom", boom)
    app.add_api_route("/bad-sql", bad_sql)
    app.add_api_route("/bad-param", bad_param)
    return app


def serve_failing(db_url: str, port: int, **settings: str) -> "subprocess.Popen[str]":
    """The app above under uvicorn on ``port``, JSON logs at info to its stderr (a pipe)."""
    return subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(port)],
        env=env(db_url, DEALBROKER_EMBEDDED_WORKER="off", **settings),
        cwd=Path(__file__).parent.parent.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def pings(base: str) -> bool:
    """Whether the server at ``base`` answers /ping yet."""
    try:
        return httpx.get(f"{base}/ping", timeout=2).status_code == 200
    except httpx.TransportError:
        return False
