"""``dealbroker portal members``: an integration's members by CLI, each change in the audit
trail as the system user who ran the command; the last owner stays."""

import json

import pytest

from dealbroker.integrations import service as integrations
from tests.processes import cli

pytestmark = pytest.mark.server


def lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


async def test_members_by_cli(db_url, sessionmaker):
    async with sessionmaker() as session, session.begin():
        created = await integrations.create(session, "Marketplace")
    client_id = created.integration.client_id

    added = cli(db_url, "portal", "members", "add", client_id, "Ann@Example.com", "owner")
    assert added.returncode == 0, added.stderr
    assert lines(added.stdout)[0]["role"] == "owner"
    again = cli(db_url, "portal", "members", "add", client_id, "ann@example.com", "developer")
    assert again.returncode == 1
    assert "member of this integration already" in again.stderr
    unknown = cli(db_url, "portal", "members", "add", client_id, "bob@example.com", "boss")
    assert unknown.returncode == 1
    assert "unknown role boss" in unknown.stderr
    nowhere = cli(db_url, "portal", "members", "add", "dbc_nope", "bob@example.com", "owner")
    assert nowhere.returncode == 1

    cli(db_url, "portal", "members", "add", client_id, "bob@example.com", "read-only")
    last = cli(db_url, "portal", "members", "role", client_id, "ANN@example.com", "developer")
    assert last.returncode == 1
    assert "last owner" in last.stderr
    promoted = cli(db_url, "portal", "members", "role", client_id, "bob@example.com", "owner")
    assert lines(promoted.stdout)[0]["role"] == "owner"
    removed = cli(db_url, "portal", "members", "remove", client_id, "ann@example.com")
    assert removed.returncode == 0, removed.stderr
    listed = lines(cli(db_url, "portal", "members", "list", client_id).stdout)
    assert [(m["email"], m["role"]) for m in listed] == [("bob@example.com", "owner")]
    final = cli(db_url, "portal", "members", "remove", client_id, "bob@example.com")
    assert final.returncode == 1
    assert "last owner" in final.stderr

    trail = lines(cli(db_url, "audit", "list").stdout)
    actions = [r["action"] for r in trail if r["action"].startswith("portal.")]
    assert sorted(actions) == sorted(
        ["portal.member.add"] * 2 + ["portal.member.role", "portal.member.remove"]
    )
    assert all(r["actor"].startswith("system:") for r in trail)
