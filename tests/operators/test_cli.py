"""``dealbroker operators``: operators and roles by CLI, a one-time login link, each change in
the audit trail as the system user who ran the command."""

import json
import os
import pwd
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from dealbroker.core import clock
from dealbroker.core.errors import Unauthorized
from dealbroker.core.security import hash_token
from dealbroker.operators import service
from dealbroker.operators.models import OperatorLoginLink
from tests.processes import cli

pytestmark = pytest.mark.server


def lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


async def test_operators_by_cli_and_their_audit_trail(db_url, sessionmaker):
    added = cli(
        db_url,
        "operators",
        "add",
        "Ann@Example.com",
        "--role",
        "admin",
        "--role",
        "support",
        "--name",
        "Ann",
    )
    assert added.returncode == 0, added.stderr
    ann = lines(added.stdout)[0]
    assert ann["roles"] == ["support", "admin"]
    # One address is one operator, whatever the case of its letters.
    again = cli(db_url, "operators", "add", "ann@example.com", "--role", "finance")
    assert again.returncode == 1
    assert "operator already" in again.stderr
    unknown = cli(db_url, "operators", "add", "bob@example.com", "--role", "boss")
    assert unknown.returncode == 1
    assert "unknown role boss" in unknown.stderr

    roles = cli(db_url, "operators", "roles", "ANN@example.com", "--role", "finance")
    assert lines(roles.stdout)[0]["roles"] == ["finance"]
    disabled = cli(db_url, "operators", "disable", "ann@example.com")
    assert lines(disabled.stdout)[0]["disabled"] is True
    link = cli(db_url, "operators", "login-link", "ann@example.com")
    assert link.returncode == 1
    assert "disabled" in link.stderr
    cli(db_url, "operators", "disable", "ann@example.com", "--enable")
    listed = lines(cli(db_url, "operators", "list").stdout)
    assert [(o["email"], o["disabled"]) for o in listed] == [("Ann@example.com", False)]

    trail = lines(cli(db_url, "audit", "list").stdout)
    assert [r["action"] for r in trail] == [
        "operator.enable",
        "operator.disable",
        "operator.roles",
        "operator.add",
    ]
    assert {r["actor"] for r in trail} == {f"system:{pwd.getpwuid(os.getuid()).pw_name}"}
    assert trail[2]["before"]["roles"] == ["support", "admin"]
    assert trail[2]["after"]["roles"] == ["finance"]
    exported = cli(db_url, "audit", "export").stdout.splitlines()
    assert exported[0] == "id,at,actor,action,target_type,target_id,before,after,request_id"
    assert len(exported) == 5


async def test_a_login_link_is_hashed_single_use_and_expires(db_url, sessionmaker):
    cli(db_url, "operators", "add", "ann@example.com", "--role", "support")
    printed = cli(db_url, "operators", "login-link", "ann@example.com")
    assert printed.returncode == 0, printed.stderr
    link = lines(printed.stdout)[0]["link"]
    assert "/back-office/login/" in link
    token = link.rsplit("/", 1)[1]
    async with sessionmaker() as session:
        stored = (await session.scalars(select(OperatorLoginLink))).all()
    assert [row.token_hash for row in stored] == [hash_token(token)]  # never the token itself

    async with sessionmaker() as session, session.begin():
        operator = await service.redeem_login_link(session, token)
        assert operator.email == "ann@example.com"
    async with sessionmaker() as session, session.begin():
        with pytest.raises(Unauthorized):
            await service.redeem_login_link(session, token)  # a second use

    # Another link, past its minutes.
    late = lines(cli(db_url, "operators", "login-link", "ann@example.com").stdout)[0]["link"]
    later = datetime.now(UTC) + timedelta(minutes=11)
    clock.set_clock(lambda: later)
    async with sessionmaker() as session, session.begin():
        with pytest.raises(Unauthorized):
            await service.redeem_login_link(session, late.rsplit("/", 1)[1])
