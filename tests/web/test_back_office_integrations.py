"""The back office's integrations (admin) and deal search (support), spoken to over HTTP: the
secrets of a new integration and of a rotation are shown once and work against the API, a
disabled integration gets no token, refusals are counted after a real 429, every action is in
the audit trail without a secret, and the search finds deals by each key and nothing else."""

import re
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import orjson
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from dealbroker.app import create_app
from dealbroker.audit.models import AuditRecord
from dealbroker.core import clock
from dealbroker.integrations.models import RateLimitRefusal
from dealbroker.offers.models import Offer
from dealbroker.users.models import User
from tests.conftest import BASE_URL, make_caller, make_settings
from tests.lifecycle_helpers import new_deal
from tests.web.back_office import csrf, log_in, make_operator

FORM = {"grant_type": "client_credentials"}


def shown(page: str, name: str) -> str:
    found = re.search(rf"<code data-{name}>([^<]+)</code>", page)
    assert found, page
    return found.group(1)


async def token(client: httpx.AsyncClient, client_id: str, secret: str) -> httpx.Response:
    return await client.post("/oauth2/token", data=FORM, auth=(client_id, secret))


async def trigger(client: httpx.AsyncClient, secret: str) -> int:
    """A sandbox trigger, which takes the webhook secret: 200, or its refusal."""
    answer = await client.post("/webhooks/v1/dealStatus", headers={"webhook-secret": secret})
    return answer.status_code


async def admin(client: httpx.AsyncClient, sessionmaker) -> str:
    """Ann, an admin, logged in: the CSRF token of her session."""
    await make_operator(sessionmaker, "ann@example.com", "admin")
    await log_in(client, sessionmaker, "ann@example.com")
    return csrf((await client.get("/back-office/integrations")).text)


async def create(client: httpx.AsyncClient, token_: str, name: str = "Fleamarket") -> str:
    answer = await client.post(
        "/back-office/integrations",
        data={"csrf": token_, "name": name, "scope": ["deals:read", "deals:write"]},
    )
    assert answer.status_code == 200, answer.text
    return answer.text


async def records(sessionmaker) -> list[AuditRecord]:
    async with sessionmaker() as session:
        rows = await session.scalars(select(AuditRecord).order_by(AuditRecord.id))
        return [r for r in rows if r.target_type == "integration"]


async def test_a_new_integrations_secrets_are_shown_once_and_work(client, sessionmaker):
    token_ = await admin(client, sessionmaker)
    answer = await client.post(
        "/back-office/integrations",
        data={"csrf": token_, "name": " Fleamarket ", "scope": ["deals:read", "deals:write"]},
    )
    assert answer.status_code == 200  # answered directly, not through a redirect
    assert answer.headers["cache-control"] == "no-store"
    assert answer.headers["content-security-policy"].startswith("default-src 'none'")
    client_id = shown(answer.text, "client-id")
    secret = shown(answer.text, "client-secret")
    webhook_secret = shown(answer.text, "webhook-secret")
    got = await token(client, client_id, secret)
    assert got.status_code == 200, got.text
    assert got.json()["scope"] == "deals:read deals:write"
    assert await trigger(client, webhook_secret) == 200

    listed = (await client.get("/back-office/integrations")).text
    assert f'data-integration="{client_id}" data-active="true"' in listed
    assert "Fleamarket" in listed
    assert secret not in listed
    assert webhook_secret not in listed  # shown once
    (record,) = await records(sessionmaker)
    assert (record.action, record.actor) == ("integration.create", "operator:ann@example.com")
    assert record.target_id == client_id
    assert record.request_id
    assert record.after["name"] == "Fleamarket"
    dumped = orjson.dumps([record.before, record.after]).decode()
    assert secret not in dumped
    assert webhook_secret not in dumped


async def test_a_name_or_scopes_missing_are_refused_and_nothing_is_created(client, sessionmaker):
    token_ = await admin(client, sessionmaker)
    for data in ({"name": " ", "scope": "deals:read"}, {"name": "Fleamarket"}):
        refused = await client.post("/back-office/integrations", data={"csrf": token_, **data})
        assert refused.status_code == 400
        assert 'role="alert"' in refused.text
        assert "data-client-secret" not in refused.text
    assert await records(sessionmaker) == []


async def test_rotations_show_the_new_secret_once_and_the_old_one_stops(client, sessionmaker):
    token_ = await admin(client, sessionmaker)
    created = await create(client, token_)
    client_id, old_secret = shown(created, "client-id"), shown(created, "client-secret")
    old_webhook = shown(created, "webhook-secret")
    old_token = (await token(client, client_id, old_secret)).json()["access_token"]

    rotated = await client.post(
        f"/back-office/integrations/{client_id}/secret", data={"csrf": token_}
    )
    assert rotated.status_code == 200
    assert rotated.headers["cache-control"] == "no-store"
    assert "data-webhook-secret" not in rotated.text
    new_secret = shown(rotated.text, "client-secret")
    assert new_secret != old_secret
    assert (await token(client, client_id, old_secret)).status_code == 401
    assert (await token(client, client_id, new_secret)).status_code == 200
    listed = await client.get("/deals/v1/deals", headers={"Authorization": f"Bearer {old_token}"})
    assert listed.status_code == 401  # its tokens went with it

    # The CLI's overlap: the old webhook secret works beside the new one for the hours chosen.
    kept = await client.post(
        f"/back-office/integrations/{client_id}/webhook-secret",
        data={"csrf": token_, "overlap_hours": "24"},
    )
    assert kept.status_code == 200
    middle_webhook = shown(kept.text, "webhook-secret")
    assert "data-client-secret" not in kept.text
    assert await trigger(client, middle_webhook) == 200
    assert await trigger(client, old_webhook) == 200
    at_once = await client.post(
        f"/back-office/integrations/{client_id}/webhook-secret",
        data={"csrf": token_, "overlap_hours": "0"},
    )
    newest_webhook = shown(at_once.text, "webhook-secret")
    assert await trigger(client, newest_webhook) == 200
    assert await trigger(client, middle_webhook) == 401
    assert await trigger(client, old_webhook) == 401
    odd = await client.post(
        f"/back-office/integrations/{client_id}/webhook-secret",
        data={"csrf": token_, "overlap_hours": "5"},
    )
    assert odd.status_code == 400
    assert await trigger(client, newest_webhook) == 200  # nothing rotated

    actions = [(r.action, r.actor) for r in await records(sessionmaker)]
    ann = "operator:ann@example.com"
    assert actions == [
        ("integration.create", ann),
        ("integration.rotate_secret", ann),
        ("integration.rotate_webhook_secret", ann),
        ("integration.rotate_webhook_secret", ann),
    ]
    dumped = orjson.dumps([(r.before, r.after) for r in await records(sessionmaker)]).decode()
    for secret in (old_secret, new_secret, old_webhook, middle_webhook, newest_webhook):
        assert secret not in dumped


async def test_rotating_a_secret_wants_a_recent_login(client, sessionmaker):
    start = clock.now()
    now = [start]
    clock.set_clock(lambda: now[0])
    token_ = await admin(client, sessionmaker)
    created = await create(client, token_)
    client_id, secret = shown(created, "client-id"), shown(created, "client-secret")
    now[0] = start + timedelta(minutes=16)
    for path in ("secret", "webhook-secret"):
        stale = await client.post(
            f"/back-office/integrations/{client_id}/{path}",
            data={"csrf": token_, "overlap_hours": "0"},
        )
        assert stale.status_code == 303
        assert stale.headers["location"] == "/back-office/login?again=fresh"
    assert (await token(client, client_id, secret)).status_code == 200  # not rotated
    # Disabling does not: it gives nothing away.
    disabled = await client.post(
        f"/back-office/integrations/{client_id}/disabled", data={"csrf": token_, "disabled": "1"}
    )
    assert disabled.status_code == 303


async def test_a_disabled_integration_gets_no_token_until_enabled(client, sessionmaker):
    token_ = await admin(client, sessionmaker)
    created = await create(client, token_)
    client_id, secret = shown(created, "client-id"), shown(created, "client-secret")
    disabled = await client.post(
        f"/back-office/integrations/{client_id}/disabled", data={"csrf": token_, "disabled": "1"}
    )
    assert disabled.status_code == 303
    assert disabled.headers["location"] == "/back-office/integrations?done=integration-disabled"
    page = (await client.get(disabled.headers["location"])).text
    assert f'data-integration="{client_id}" data-active="false"' in page
    assert "The integration is disabled" in page
    assert (await token(client, client_id, secret)).status_code == 401
    enabled = await client.post(
        f"/back-office/integrations/{client_id}/disabled", data={"csrf": token_, "disabled": "0"}
    )
    assert enabled.headers["location"] == "/back-office/integrations?done=integration-enabled"
    assert (await token(client, client_id, secret)).status_code == 200
    changes = [r for r in await records(sessionmaker) if r.action != "integration.create"]
    assert [(r.action, r.before["active"], r.after["active"]) for r in changes] == [
        ("integration.disable", True, False),
        ("integration.enable", False, True),
    ]
    assert all(r.request_id for r in changes)


@pytest.fixture
async def limited(db_url, engine) -> AsyncIterator[FastAPI]:
    settings = make_settings(
        db_url,
        rate_limit_requests_per_minute=2,
        rate_limit_token_failures_per_minute=1,
        rate_limit_token_failures_per_client_per_minute=50,
    )
    app = create_app(settings, engine)
    async with app.router.lifespan_context(app):
        yield app


async def test_refusals_are_counted_per_integration_after_a_real_429(limited, sessionmaker):
    transport = httpx.ASGITransport(app=limited)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
        caller = await make_caller(client, sessionmaker)
        quiet = await make_caller(client, sessionmaker, "Quiet marketplace")
        statuses = [
            (await client.get("/deals/v1/deals", headers=caller.headers)).status_code
            for _ in range(4)
        ]
        assert statuses == [200, 200, 429, 429]
        guesses = [(await token(client, caller.client_id, "guess")).status_code for _ in range(3)]
        assert guesses == [401, 429, 429]
        # A made-up client id's refusals are counted nowhere.
        made_up = [(await token(client, "dbc_made_up", "guess")).status_code for _ in range(2)]
        assert made_up == [401, 429]
        await limited.state.refusals.flush(sessionmaker)
        async with sessionmaker() as session:
            rows = (await session.scalars(select(RateLimitRefusal))).all()
        assert {(r.integration_id, r.limit_name, r.count) for r in rows} == {
            (caller.integration_id, "api", 2),
            (caller.integration_id, "token_failures", 2),
        }
        # A second flush adds to the same hour's rows.
        await client.get("/deals/v1/deals", headers=caller.headers)
        await limited.state.refusals.flush(sessionmaker)

        await make_operator(sessionmaker, "ann@example.com", "admin")
        await log_in(client, sessionmaker, "ann@example.com")
        page = (await client.get("/back-office/integrations")).text
    mine = page.split(f'data-integration="{caller.client_id}"')[1].split("</section>")[0]
    assert 'data-refused-day="5"' in mine
    assert 'data-refused-week="5"' in mine
    theirs = page.split(f'data-integration="{quiet.client_id}"')[1].split("</section>")[0]
    assert 'data-refused-day="0"' in theirs


async def buyer_email(sessionmaker, deal_id: uuid.UUID) -> str:
    async with sessionmaker() as session:
        email = await session.scalar(
            select(User.email)
            .join(Offer, Offer.buyer_user_id == User.id)
            .where(Offer.deal_id == deal_id)
        )
    assert email
    return email


def found(page: str) -> list[str]:
    return re.findall(r'data-deal="([^"]+)"', page)


async def test_support_finds_deals_by_id_and_by_seller_or_buyer_email(client, sessionmaker):
    first = await new_deal(sessionmaker)  # sold by kari@example.com
    second = await new_deal(sessionmaker)  # the same seller, in another integration
    await second.approve(await second.offer())
    buyer = await buyer_email(sessionmaker, second.deal_id)
    await make_operator(sessionmaker, "sue@example.com", "support")
    await log_in(client, sessionmaker, "sue@example.com")

    empty = await client.get("/back-office/deals")
    assert empty.status_code == 200
    assert "data-results" not in empty.text
    assert 'href="/back-office/deals"' in empty.text  # the nav's link
    assert 'href="/back-office/integrations"' not in empty.text  # not an admin

    by_id = (await client.get(f"/back-office/deals?q={first.deal_id}")).text
    assert found(by_id) == [str(first.deal_id)]
    assert f'href="/back-office/deals/{first.deal_id}"' in by_id
    by_seller = (await client.get("/back-office/deals", params={"q": " KARI@example.com "})).text
    assert found(by_seller) == [str(second.deal_id), str(first.deal_id)]  # newest first
    by_buyer = (await client.get("/back-office/deals", params={"q": buyer.upper()})).text
    assert found(by_buyer) == [str(second.deal_id)]
    assert f'href="/back-office/deals/{second.deal_id}"' in by_buyer
    assert buyer in by_buyer

    # Nothing else matches: part of an address, a name, an id cut short, another's address.
    for q in ("kari", "ari@example.com", "Bike", str(first.deal_id)[:8], "nobody@example.com"):
        answer = await client.get("/back-office/deals", params={"q": q})
        assert answer.status_code == 200
        assert found(answer.text) == [], q
        assert 'data-results="0"' in answer.text
    too_long = await client.get("/back-office/deals", params={"q": "a" * 255})
    assert too_long.status_code == 400  # the form allows no more (maxlength)


async def test_the_search_by_email_reads_indexes(sessionmaker, db_url):
    """On each backend the search by e-mail goes through the indexes of migration 0022, never
    a scan of the deals (on PostgreSQL with sequential scans forbidden: the tables are nearly
    empty here, where a scan is cheapest)."""
    from sqlalchemy import text

    from dealbroker.deals import repository

    async with sessionmaker() as session, session.begin():
        dialect = session.get_bind().dialect.name
        statement = repository.search_query(dialect, email="kari@example.com", limit=50)
        compiled = statement.compile(session.get_bind(), compile_kwargs={"literal_binds": True})
        if dialect == "postgresql":
            await session.execute(text("SET LOCAL enable_seqscan = off"))
            rows = await session.execute(text(f"EXPLAIN {compiled}"))
            plan = "\n".join(r[0] for r in rows)
            assert "Seq Scan on deals" not in plan, plan
        else:
            rows = await session.execute(text(f"EXPLAIN QUERY PLAN {compiled}"))
            plan = "\n".join(r[-1] for r in rows)
            assert "SCAN deals" not in plan, plan
    for index in ("ix_deals_seller_email", "ix_users_email", "ix_deals_buyer_user_id"):
        assert index in plan, plan


@pytest.mark.parametrize("lang", ["nb", "sv"])
async def test_the_pages_read_in_norwegian_and_swedish(client, sessionmaker, lang):
    from tests.web.english import ENGLISH, WORD

    def english(html: str) -> set[str]:
        text = re.sub(r"<(code|style|script)[^>]*>.*?</\1>", " ", html, flags=re.S)
        text = re.sub(r"<[^>]+>", " ", text)
        return {w for w in WORD.findall(text) if w.lower() in ENGLISH}

    deal = await new_deal(sessionmaker)
    await make_operator(sessionmaker, "ann@example.com", "admin", "support")
    await log_in(client, sessionmaker, "ann@example.com")
    token_ = csrf((await client.get(f"/back-office/integrations?lang={lang}")).text)
    created = await create(client, token_, "Loppis")
    assert not english(created), created
    client_id = shown(created, "client-id")
    rotated = await client.post(
        f"/back-office/integrations/{client_id}/webhook-secret",
        data={"csrf": token_, "overlap_hours": "24"},
    )
    assert not english(rotated.text)
    refused = await client.post("/back-office/integrations", data={"csrf": token_, "name": "x"})
    assert not english(refused.text)
    for path in (
        "/back-office/",
        "/back-office/integrations",
        "/back-office/integrations?done=integration-disabled",
        "/back-office/deals",
        f"/back-office/deals?q={deal.deal_id}",
        "/back-office/deals?q=nobody@example.com",
    ):
        answer = await client.get(path)
        assert answer.status_code == 200
        assert not english(answer.text), path
