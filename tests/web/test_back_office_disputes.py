"""The back office's disputes over HTTP, on SQLite and PostgreSQL: the queue, the dossier with
both parties' evidence and its photos, a decision with its reason sent to both parties, four
eyes on large deals (a proposal another operator approves or rejects; two approvals racing,
one wins), the CLI on the same service, and the audit trail of every step."""

import asyncio
import html
import os
import pwd
import re
import shutil
import subprocess
import sys
import uuid

import httpx
import pytest
from sqlalchemy import select

from dealbroker.audit.models import AuditRecord
from dealbroker.audit.service import Actor
from dealbroker.core.errors import Conflict, Forbidden
from dealbroker.deals import flows
from dealbroker.disputes import service as disputes
from dealbroker.disputes.models import DisputeProposal
from dealbroker.operators import service as operators
from tests.conftest import BASE_URL, SELLER, row_counts
from tests.evidence import hostile
from tests.lifecycle_helpers import SETTINGS, run_provider_calls
from tests.processes import env
from tests.web.back_office import csrf, log_in, make_operator
from tests.web.evidence import disputed, upload
from tests.web.pages import outbox_of, status_of, submit

REASON = "The photos show the buyer took the item; the seller is paid."


def text(page: httpx.Response) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page.text)).split())


async def with_evidence(client, caller) -> tuple[dict, str, str]:
    """A disputed pickup deal with a statement and a photo from each side, through the pages."""
    deal, seller, buyer = await disputed(client, caller)
    assert (
        await submit(client, seller, "evidence", statement="He took it <b>&</b> ran.")
    ).status_code == 303
    assert (await submit(client, buyer, "evidence", statement="I never got it.")).status_code == 303
    assert (await upload(client, seller, hostile.jpeg_with_gps((320, 240)))).status_code == 303
    assert (await upload(client, buyer, hostile.png())).status_code == 303
    return deal, seller, buyer


async def audit_of(sessionmaker, deal_id: str) -> list[AuditRecord]:
    async with sessionmaker() as session:
        return list(
            await session.scalars(
                select(AuditRecord)
                .where(AuditRecord.target_id == deal_id, AuditRecord.action.like("dispute.%"))
                .order_by(AuditRecord.id)
            )
        )


def decision_form(page: str) -> dict[str, str]:
    return {"csrf": csrf(page)}


async def test_an_operator_decides_a_dispute_from_the_queue(client, caller, sessionmaker):
    deal, seller, buyer = await with_evidence(client, caller)
    await make_operator(sessionmaker, "ann@example.com", "support")
    await log_in(client, sessionmaker, "ann@example.com")

    home = await client.get("/back-office/")
    assert 'href="/back-office/disputes"' in home.text
    queue = await client.get("/back-office/disputes")
    assert queue.status_code == 200
    assert queue.headers["cache-control"] == "no-store"
    assert queue.headers["content-security-policy"].startswith("default-src 'none'")
    assert re.findall(r'data-dispute="([0-9a-f-]+)"', queue.text) == [deal["id"]]
    assert f'href="/back-office/disputes/{deal["id"]}"' in queue.text

    shown = await client.get(f"/back-office/disputes/{deal['id']}")
    assert shown.status_code == 200
    said = text(shown)
    assert "He took it <b>&</b> ran." in said
    assert "<b>&" not in shown.text  # escaped
    assert "I never got it." in said
    assert SELLER["email"] in said
    assert re.findall(r'data-statement="(\w+)"', shown.text) == ["seller", "buyer"]
    photos = re.findall(r'data-photo="([0-9a-f-]{36})"', shown.text)
    assert len(photos) == 2
    assert 'data-message="' in shown.text  # the messages sent for the deal
    # The dossier on its own page, for any support work.
    dossier = await client.get(f"/back-office/deals/{deal['id']}")
    assert dossier.status_code == 200
    assert re.findall(r'data-photo="([0-9a-f-]{36})"', dossier.text) == photos
    for photo in photos:
        served = await client.get(f"/back-office/deals/{deal['id']}/photos/{photo}")
        assert served.status_code == 200
        assert served.headers["content-type"] == "image/jpeg"
        assert served.headers["cache-control"] == "no-store"
        assert served.headers["x-content-type-options"] == "nosniff"
        assert served.content[:3] == b"\xff\xd8\xff"
    # Another deal's photo, or no photo: not found.
    assert (
        await client.get(f"/back-office/deals/{uuid.uuid4()}/photos/{photos[0]}")
    ).status_code == 404
    assert (
        await client.get(f"/back-office/deals/{deal['id']}/photos/{uuid.uuid4()}")
    ).status_code == 404
    assert (await client.get(f"/back-office/deals/{deal['id']}/photos/nothing")).status_code == 404
    assert (await client.get(f"/back-office/deals/{uuid.uuid4()}")).status_code == 404

    # No reason, no return address for a return: refused next to the fields, nothing changed.
    before = await row_counts(sessionmaker)
    action = f"/back-office/disputes/{deal['id']}"
    refused = await client.post(action, data={**decision_form(shown.text), "outcome": "release"})
    assert refused.status_code == 400
    assert 'data-field-error="reason"' in refused.text
    refused = await client.post(
        action,
        data={**decision_form(shown.text), "outcome": "return_then_refund", "reason": "x"},
    )
    assert 'data-field-error="return_address"' in refused.text
    refused = await client.post(
        action,
        data={**decision_form(shown.text), "outcome": "release", "reason": "x" * 2001},
    )
    assert 'data-field-error="reason"' in refused.text
    assert await row_counts(sessionmaker) == before

    decided = await client.post(
        action, data={**decision_form(shown.text), "outcome": "release", "reason": REASON}
    )
    assert decided.status_code == 303, decided.text
    assert decided.headers["location"] == f"{action}?done=dispute-decided"
    after = await client.get(decided.headers["location"])
    assert "The dispute is decided." in text(after)
    assert "data-decision-form" not in after.text  # no form any more
    assert "data-decision-reason" in after.text
    await run_provider_calls(sessionmaker)
    assert (await status_of(client, caller, deal))[0] == "Completed"
    told = [m for m in await outbox_of(sessionmaker, deal) if f"Our reasons: {REASON}" in m.body]
    assert len({m.to_email for m in told}) == 2  # both parties, with the reason
    assert re.findall(r'data-dispute="', (await client.get("/back-office/disputes")).text) == []

    # Twice (a second tab): refused, nothing more recorded.
    again = await client.post(
        action, data={**decision_form(shown.text), "outcome": "refund", "reason": REASON}
    )
    assert again.status_code == 409
    (record,) = await audit_of(sessionmaker, deal["id"])
    assert (record.action, record.actor) == ("dispute.resolve", "operator:ann@example.com")
    assert record.before == {"status": "Pickup_Denied"}
    assert record.after["outcome"] == "release"
    assert record.after["reason"] == REASON
    assert record.after["status"] == "Completed"
    assert record.request_id


async def test_a_decision_wants_a_recent_login(client, caller, sessionmaker):
    from datetime import timedelta

    from dealbroker.core import clock

    deal, _seller, _buyer = await disputed(client, caller)
    await make_operator(sessionmaker, "ann@example.com", "support")
    start = clock.now()
    now = [start]
    clock.set_clock(lambda: now[0])
    await log_in(client, sessionmaker, "ann@example.com")
    now[0] = start + timedelta(minutes=16)
    shown = await client.get(f"/back-office/disputes/{deal['id']}")
    answer = await client.post(
        f"/back-office/disputes/{deal['id']}",
        data={**decision_form(shown.text), "outcome": "refund", "reason": REASON},
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == "/back-office/login?again=fresh"
    assert await status_of(client, caller, deal) == ("Pickup_Denied", "Paid")


async def second_operator(client, sessionmaker, email: str) -> httpx.AsyncClient:
    other = httpx.AsyncClient(transport=client._transport, base_url=BASE_URL)
    await make_operator(sessionmaker, email, "support")
    await log_in(other, sessionmaker, email)
    return other


async def test_four_eyes_a_second_operator_approves(client, caller, sessionmaker):
    deal, _seller, _buyer = await with_evidence(client, caller)
    settings = client._transport.app.state.settings  # type: ignore[attr-defined]
    async with sessionmaker() as session:
        price = (await flows.operator_view(session, uuid.UUID(deal["id"]))).price_minor
    settings.dispute_four_eyes_minor = price - 1
    await make_operator(sessionmaker, "ann@example.com", "support")
    await log_in(client, sessionmaker, "ann@example.com")
    bob = await second_operator(client, sessionmaker, "bob@example.com")
    try:
        action = f"/back-office/disputes/{deal['id']}"
        shown = await client.get(action)
        proposed = await client.post(
            action, data={**decision_form(shown.text), "outcome": "refund", "reason": REASON}
        )
        assert proposed.headers["location"] == f"{action}?done=dispute-proposed"
        assert await status_of(client, caller, deal) == ("Pickup_Denied", "Paid")
        mine = await client.get(action)
        (proposal_id,) = re.findall(r'data-pending-proposal="([0-9a-f-]+)"', mine.text)
        assert "data-own-proposal" in mine.text
        assert "data-approve" not in mine.text
        assert "data-decision-form" not in mine.text  # one decision at a time
        assert f'data-proposal="{proposal_id}"' in (await client.get("/back-office/disputes")).text
        # The proposer's own approval, posted anyway: refused, nothing changed.
        own = await client.post(
            f"/back-office/disputes/proposals/{proposal_id}/approve", data=decision_form(mine.text)
        )
        assert own.status_code == 403
        assert "another operator must approve it" in text(own)
        # A second decision meanwhile: refused.
        second = await client.post(
            action, data={**decision_form(mine.text), "outcome": "release", "reason": "no"}
        )
        assert second.status_code == 409

        theirs = await bob.get(action)
        assert "data-approve" in theirs.text
        approved = await bob.post(
            f"/back-office/disputes/proposals/{proposal_id}/approve",
            data=decision_form(theirs.text),
        )
        assert approved.headers["location"] == f"{action}?done=proposal-approved"
        await run_provider_calls(sessionmaker)
        assert await status_of(client, caller, deal) == ("Refunded", "Refunded")
        told = [m for m in await outbox_of(sessionmaker, deal) if REASON in m.body]
        assert len({m.to_email for m in told}) == 2
        late = await bob.post(
            f"/back-office/disputes/proposals/{proposal_id}/reject", data=decision_form(theirs.text)
        )
        assert late.status_code == 409
        records = await audit_of(sessionmaker, deal["id"])
        assert [(r.action, r.actor) for r in records] == [
            ("dispute.propose", "operator:ann@example.com"),
            ("dispute.approve", "operator:bob@example.com"),
        ]
        assert records[0].after["proposalId"] == proposal_id
        assert records[0].after["amountMinor"] == price
        assert records[1].before["proposal"] == "pending"
        assert records[1].after["status"] == "Refunded"
        assert records[1].after["proposedBy"] == "operator:ann@example.com"
    finally:
        await bob.aclose()


async def test_a_rejected_proposal_decides_nothing(client, caller, sessionmaker):
    deal, _seller, _buyer = await disputed(client, caller)
    settings = client._transport.app.state.settings  # type: ignore[attr-defined]
    settings.dispute_four_eyes_minor = 0
    await make_operator(sessionmaker, "ann@example.com", "support")
    await log_in(client, sessionmaker, "ann@example.com")
    action = f"/back-office/disputes/{deal['id']}"
    shown = await client.get(action)
    await client.post(
        action,
        data={
            **decision_form(shown.text),
            "outcome": "return_then_refund",
            "return_address": "Storgata 1, 0155 Oslo",
            "reason": REASON,
        },
    )
    mine = await client.get(action)
    (proposal_id,) = re.findall(r'data-pending-proposal="([0-9a-f-]+)"', mine.text)
    rejected = await client.post(
        f"/back-office/disputes/proposals/{proposal_id}/reject", data=decision_form(mine.text)
    )
    assert rejected.headers["location"] == f"{action}?done=proposal-rejected"
    page = await client.get(action)
    assert "data-decision-form" in page.text  # a new decision may be made
    assert 'data-proposal-status="rejected"' in page.text
    assert await status_of(client, caller, deal) == ("Pickup_Denied", "Paid")
    actions = [r.action for r in await audit_of(sessionmaker, deal["id"])]
    assert actions == ["dispute.propose", "dispute.reject"]


async def test_two_approvals_racing_one_wins(client, caller, sessionmaker):
    deal, _seller, _buyer = await disputed(client, caller)
    settings = SETTINGS.model_copy(update={"dispute_four_eyes_minor": 0})
    deal_id = uuid.UUID(deal["id"])
    async with sessionmaker() as session, session.begin():
        decided = await disputes.decide(
            session,
            deal_id,
            disputes.Decision(disputes.Outcome.REFUND, REASON),
            settings,
            Actor("operator:ann@example.com", uuid.uuid4()),
        )
    assert decided.proposal is not None
    proposal_id = decided.proposal.id

    async def approve(who: str) -> object:
        async with sessionmaker() as session, session.begin():
            return await disputes.approve(session, proposal_id, settings, Actor(who, uuid.uuid4()))

    results = await asyncio.gather(
        approve("operator:bob@example.com"),
        approve("operator:cid@example.com"),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["Conflict", "DisputeProposal"]
    actions = [r.action for r in await audit_of(sessionmaker, deal["id"])]
    assert actions == ["dispute.propose", "dispute.approve"]
    async with sessionmaker() as session:
        row = await session.get(DisputeProposal, proposal_id)
        assert row is not None
        assert row.status == "approved"
    # The proposer, as the same operator under any label: refused.
    with pytest.raises((Conflict, Forbidden)):
        async with sessionmaker() as session, session.begin():
            await disputes.approve(
                session, proposal_id, settings, Actor("operator:ann@example.com")
            )


def run_cli(
    db_url: str, *args: str, names: dict[str, str] | None = None, account: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``dealbroker disputes ARGS`` as this test's own account, or as ``account`` (its uid and
    group, by ``setpriv``, when this test runs as root); ``names``: more variables, such as a
    ``LOGNAME`` of the caller's choosing."""
    switch, home = [], {}
    if account is not None:
        entry = pwd.getpwnam(account)
        switch = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]
        home = {"HOME": entry.pw_dir}  # not root's (asyncpg looks for client keys there)
    return subprocess.run(
        [*switch, sys.executable, "-m", "dealbroker", "disputes", *args],
        env=env(db_url, DEALBROKER_DISPUTE_FOUR_EYES_MINOR="0", **home, **(names or {})),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd="/" if account else None,
    )


async def test_the_cli_proposes_and_approves_through_the_same_service(
    client, caller, sessionmaker, db_url
):
    import json

    deal, _seller, _buyer = await disputed(client, caller)
    proposed = run_cli(db_url, "resolve", deal["id"], "--refund", "--reason", REASON)
    assert proposed.returncode == 0, proposed.stderr
    shown = json.loads(proposed.stdout)
    assert (shown["status"], shown["outcome"]) == ("pending", "refund")
    assert shown["proposedBy"].startswith("system:")
    (queued,) = [json.loads(line) for line in run_cli(db_url, "list").stdout.splitlines()]
    assert queued["proposalId"] == shown["proposalId"]
    own = run_cli(db_url, "approve", shown["proposalId"])
    assert own.returncode == 1
    assert "cannot approve" in own.stderr
    # The proposer names another account in the variables a shell lets anyone set: still the
    # proposer (the operating system's uid says who runs the command).
    others = {name: "mallory" for name in ("LOGNAME", "USER", "LNAME", "USERNAME")}
    disguised = run_cli(db_url, "approve", shown["proposalId"], names=others)
    assert disguised.returncode == 1, disguised.stdout
    assert "cannot approve" in disguised.stderr
    rejected = run_cli(db_url, "reject", shown["proposalId"])
    assert json.loads(rejected.stdout)["status"] == "rejected"

    # An operator's proposal in the back office, approved by the system user at the CLI.
    async with sessionmaker() as session, session.begin():
        await operators.add(session, "ann@example.com", ["support"], Actor("system:test"))
        ann = await operators.find(session, "ann@example.com")
        decided = await disputes.decide(
            session,
            uuid.UUID(deal["id"]),
            disputes.Decision(disputes.Outcome.RELEASE, REASON),
            SETTINGS.model_copy(update={"dispute_four_eyes_minor": 0}),
            Actor.operator(ann.id, ann.email),
        )
        assert decided.proposal is not None
    approved = run_cli(db_url, "approve", str(decided.proposal.id))
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["status"] == "Completed"
    actions = [(r.action, r.actor.split(":")[0]) for r in await audit_of(sessionmaker, deal["id"])]
    assert actions == [
        ("dispute.propose", "system"),
        ("dispute.reject", "system"),
        ("dispute.propose", "operator"),
        ("dispute.approve", "system"),
    ]


@pytest.mark.skipif(
    os.getuid() != 0 or shutil.which("setpriv") is None,
    reason="running the approver as another account needs root and setpriv",
)
async def test_another_account_approves_a_cli_proposal(client, caller, sessionmaker, db_url):
    """Four eyes between two operating system accounts: the proposer's (root, this test's)
    and another's (``nobody``, by ``setpriv``), whose approval carries the decision out and is
    recorded under its own name, whatever ``LOGNAME`` says. The other account reaches the
    database over the network only, so PostgreSQL (SQLite's file is the test's own)."""
    import json

    if db_url.startswith("sqlite"):
        pytest.skip("the other account cannot open this test's SQLite file")
    deal, _seller, _buyer = await disputed(client, caller)
    proposed = run_cli(db_url, "resolve", deal["id"], "--refund", "--reason", REASON)
    assert proposed.returncode == 0, proposed.stderr
    proposal = json.loads(proposed.stdout)["proposalId"]
    me = pwd.getpwuid(os.getuid()).pw_name
    approved = run_cli(
        db_url, "approve", proposal, names={"LOGNAME": me, "USER": me}, account="nobody"
    )
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["status"] == "Refunded"
    actors = [(r.action, r.actor) for r in await audit_of(sessionmaker, deal["id"])]
    assert actors == [("dispute.propose", f"system:{me}"), ("dispute.approve", "system:nobody")]


@pytest.mark.parametrize("lang", ["nb", "sv"])
async def test_the_disputes_pages_read_in_norwegian_and_swedish(client, caller, sessionmaker, lang):
    from tests.web.english import ENGLISH, WORD

    def english(page: str) -> set[str]:
        # The parties' own words and the messages' subjects (in each recipient's language,
        # English here) are shown as they are.
        page = re.sub(r"<(code|style|script)[^>]*>.*?</\1>", " ", page, flags=re.S)
        page = re.sub(r'<[^>]*class="message-body"[^>]*>.*?</', " ", page, flags=re.S)
        page = re.sub(r"<[^>]+>", " ", page)
        return {w for w in WORD.findall(html.unescape(page)) if w.lower() in ENGLISH}

    deal, _seller, _buyer = await with_evidence(client, caller)
    settings = client._transport.app.state.settings  # type: ignore[attr-defined]
    settings.dispute_four_eyes_minor = 0
    await make_operator(sessionmaker, "ann@example.com", "support")
    await log_in(client, sessionmaker, "ann@example.com")
    await client.get(f"/back-office/?lang={lang}")
    action = f"/back-office/disputes/{deal['id']}"
    for path in (
        "/back-office/",
        "/back-office/disputes",
        action,
        f"/back-office/deals/{deal['id']}",
    ):
        assert not english((await client.get(path)).text), path
    shown = await client.get(action)
    refused = await client.post(action, data={**decision_form(shown.text), "outcome": "x"})
    assert not english(refused.text)
    await client.post(
        action, data={**decision_form(shown.text), "outcome": "refund", "reason": "Ja"}
    )
    assert not english((await client.get(action + "?done=dispute-proposed")).text)
