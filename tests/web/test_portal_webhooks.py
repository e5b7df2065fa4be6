"""The developer portal's webhook and sandbox pages over HTTP: what each role may see and do,
one integration's members never reaching another's endpoints, deliveries or deals, CSRF on
every form, the API's URL validation, and every action in the audit trail with the member as
its actor."""

import html
import re
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy import select

from dealbroker.app import create_app
from dealbroker.audit.models import AuditRecord
from dealbroker.events.models import Delivery, DeliveryAttempt, WebhookEndpoint
from dealbroker.integrations.models import Integration
from tests.conftest import BASE_URL, SELLER, make_settings, row_counts
from tests.web.portal_helpers import (
    csrf,
    make_integration,
    other_client,
    portal_member,
)

P = "/portal"


def text(response: httpx.Response) -> str:
    return html.unescape(response.text)


async def post(client: httpx.AsyncClient, path: str, page: str, **data: object) -> httpx.Response:
    """Post a portal form with the CSRF token of the page it is on."""
    form: dict[str, object] = {"csrf": csrf(page), **data}
    return await client.post(path, data=form)


async def register(client, url, **fields) -> uuid.UUID:
    page = (await client.get(f"{P}/webhooks")).text
    answer = await post(client, f"{P}/webhooks", page, url=url, **fields)
    assert answer.status_code == 303, text(answer)
    found = re.search(r"/portal/webhooks/([0-9a-f-]{36})\?done=created", answer.headers["location"])
    assert found
    return uuid.UUID(found.group(1))


async def audit_actions(sessionmaker, integration_id=None) -> list[tuple[str, str]]:
    """The audit trail's actor and action of each record but the portal's own (logins), each
    naming ``integration_id`` if given."""
    async with sessionmaker() as session:
        rows = (await session.scalars(select(AuditRecord).order_by(AuditRecord.at))).all()
    found = [r for r in rows if not r.action.startswith("portal.")]
    if integration_id is not None:
        assert {r.integration_id for r in found} == {integration_id}
    return [(r.actor, r.action) for r in found]


async def test_a_developer_registers_tests_edits_disables_enables_and_recovers(
    client, sessionmaker, receiver, worker
):
    me = await portal_member(client, sessionmaker, "developer")
    listed = await client.get(f"{P}/webhooks")
    assert listed.status_code == 200
    assert "data-no-endpoints" in listed.text
    endpoint_id = await register(
        client, receiver.url, description="Main receiver", events=["deal.status", "deal.offer"]
    )
    page = await client.get(f"{P}/webhooks/{endpoint_id}?done=created")
    assert "The endpoint is registered" in text(page)
    assert receiver.url in page.text
    assert "<code>deal.offer</code>" in page.text

    tested = await post(client, f"{P}/webhooks/{endpoint_id}/test", page.text)
    assert tested.status_code == 303
    assert await worker.run_once() == 1
    shown = await client.get(f"{P}/webhooks/{endpoint_id}")
    assert "webhook.test" in shown.text
    assert 'data-status="succeeded"' in shown.text

    edited = await post(
        client,
        f"{P}/webhooks/{endpoint_id}/edit",
        shown.text,
        url=receiver.url + "/v2",
        description="",
    )
    assert edited.status_code == 303
    async with sessionmaker() as session:
        endpoint = await session.get(WebhookEndpoint, endpoint_id)
        assert endpoint is not None
        assert endpoint.url == receiver.url + "/v2"
        assert endpoint.event_kinds is None  # none ticked: every kind

    disabled = await post(client, f"{P}/webhooks/{endpoint_id}/disable", shown.text)
    assert disabled.status_code == 303
    page = await client.get(disabled.headers["location"])
    assert 'data-state="disabled"' in page.text
    assert "disabled by the integration" in page.text
    refused = await post(client, f"{P}/webhooks/{endpoint_id}/test", page.text)
    assert refused.status_code == 400
    assert "enable it before sending a test event" in text(refused)
    enabled = await post(client, f"{P}/webhooks/{endpoint_id}/enable", page.text)
    assert enabled.status_code == 303
    recovered = await post(
        client, f"{P}/webhooks/{endpoint_id}/recover", page.text, since="7", waiting="1"
    )
    assert recovered.status_code == 303
    assert "queued=0" in recovered.headers["location"]

    actor = f"member:{me.email}"
    # The refused test event left no record.
    assert await audit_actions(sessionmaker, me.integration_id) == [
        (actor, "webhook.create"),
        (actor, "webhook.test"),
        (actor, "webhook.update"),
        (actor, "webhook.disable"),
        (actor, "webhook.enable"),
        (actor, "webhook.recover"),
    ]


async def test_a_delivery_page_shows_every_attempt_as_sent_and_resends(
    client, sessionmaker, receiver, worker
):
    me = await portal_member(client, sessionmaker, "developer")
    endpoint_id = await register(client, receiver.url)
    page = await client.get(f"{P}/webhooks/{endpoint_id}")
    receiver.answer(500, body=b"<script>alert(1)</script> down")
    await post(client, f"{P}/webhooks/{endpoint_id}/test", page.text)
    await worker.run_once()
    async with sessionmaker() as session:
        delivery = await session.scalar(select(Delivery).where(Delivery.endpoint_id == endpoint_id))
        assert delivery is not None
    failed = await client.get(f"{P}/webhooks/{endpoint_id}?status=pending")
    assert f'data-delivery="{delivery.id}"' in failed.text
    assert (
        "data-no-deliveries"
        in (await client.get(f"{P}/webhooks/{endpoint_id}?status=delivered")).text
    )
    path = f"{P}/webhooks/{endpoint_id}/deliveries/{delivery.id}"
    shown = await client.get(path)
    assert shown.status_code == 200
    sent = receiver.requests[0]
    body = text(shown)
    assert sent.body.decode() in body
    for name in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        assert f"{name}: {sent.headers[name]}" in body
    async with sessionmaker() as session:
        secret = await session.scalar(
            select(Integration.webhook_secret).where(Integration.id == me.integration_id)
        )
    assert secret not in body
    assert 'data-status-code="500"' in shown.text
    assert "<script>alert(1)</script>" not in shown.text  # escaped (and from loopback: not kept)

    resent = await post(client, f"{path}/resend", shown.text)
    assert resent.status_code == 303
    assert resent.headers["location"].endswith("?done=resent")
    await worker.run_once()
    async with sessionmaker() as session:
        attempts = (await session.scalars(select(DeliveryAttempt))).all()
    assert len(attempts) == 2
    assert (f"member:{me.email}", "event.resend") in await audit_actions(sessionmaker)


async def test_an_owner_reads_the_webhook_actions_in_the_portals_audit_trail(
    client, sessionmaker, receiver
):
    me = await portal_member(client, sessionmaker, "owner")
    endpoint_id = await register(client, receiver.url)
    trail = await client.get(f"{P}/audit")
    assert trail.status_code == 200
    assert "webhook.create" in trail.text
    assert str(endpoint_id) in trail.text
    assert f"member:{me.email}" in trail.text


@pytest.mark.usefixtures("loopback_is_public")
async def test_an_answers_excerpt_is_shown_escaped(client, sessionmaker, receiver, worker):
    await portal_member(client, sessionmaker, "developer")
    endpoint_id = await register(client, receiver.url)
    page = await client.get(f"{P}/webhooks/{endpoint_id}")
    receiver.answer(502, body=b"<script>alert(1)</script> upstream down")
    await post(client, f"{P}/webhooks/{endpoint_id}/test", page.text)
    await worker.run_once()
    async with sessionmaker() as session:
        delivery_id = await session.scalar(select(Delivery.id))
    shown = await client.get(f"{P}/webhooks/{endpoint_id}/deliveries/{delivery_id}")
    assert "&lt;script&gt;alert(1)&lt;/script&gt; upstream down" in shown.text
    assert "<script>" not in shown.text


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.com/hook", "Enter the endpoint's full address"),
        ("not a url", "Enter the endpoint's full address"),
        ("", "Enter the endpoint's full address"),
        ("http://user:secret@example.com/hook", "Enter the endpoint's full address"),
    ],
)
async def test_registering_validates_the_url_as_the_api_does(client, sessionmaker, url, message):
    await portal_member(client, sessionmaker, "developer")
    page = (await client.get(f"{P}/webhooks")).text
    before = await row_counts(sessionmaker)
    refused = await post(client, f"{P}/webhooks", page, url=url)
    assert refused.status_code == 400
    assert message in text(refused)
    assert (await row_counts(sessionmaker))["webhook_endpoints"] == before["webhook_endpoints"]


@pytest.fixture
async def hosted_client(db_url, engine) -> AsyncIterator[httpx.AsyncClient]:
    """A hosted sandbox's app: webhooks only to public addresses."""
    settings = make_settings(db_url, sandbox_private_webhooks=False)
    application = create_app(settings, engine)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as c:
            yield c


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/hook", "http://169.254.169.254/latest"])
async def test_registering_applies_the_egress_rules(hosted_client, sessionmaker, url):
    await portal_member(hosted_client, sessionmaker, "developer")
    page = (await hosted_client.get(f"{P}/webhooks")).text
    refused = await post(hosted_client, f"{P}/webhooks", page, url=url)
    assert refused.status_code == 400
    assert "This address is refused" in text(refused)
    assert url in refused.text  # the form keeps what was typed
    async with sessionmaker() as session:
        assert await session.scalar(select(WebhookEndpoint.id)) is None


async def test_a_read_only_member_sees_but_every_action_is_403(
    client, sessionmaker, receiver, worker
):
    created = await make_integration(sessionmaker)
    await portal_member(client, sessionmaker, "developer", integration=created)
    endpoint_id = await register(client, receiver.url)
    page = await client.get(f"{P}/webhooks/{endpoint_id}")
    await post(client, f"{P}/webhooks/{endpoint_id}/test", page.text)
    await worker.run_once()
    async with sessionmaker() as session:
        delivery_id = await session.scalar(select(Delivery.id))
    async with other_client(client) as reader:
        await portal_member(reader, sessionmaker, "read-only", integration=created)
        listed = await reader.get(f"{P}/webhooks")
        assert listed.status_code == 200
        assert "data-register" not in listed.text
        shown = await reader.get(f"{P}/webhooks/{endpoint_id}")
        assert shown.status_code == 200
        assert "/disable" not in shown.text
        assert (
            await reader.get(f"{P}/webhooks/{endpoint_id}/deliveries/{delivery_id}")
        ).status_code == 200
        assert (await reader.get(f"{P}/sandbox")).status_code == 200
        token = csrf(listed.text)
        before = await row_counts(sessionmaker)
        for path in ACTIONS:
            path = path.format(endpoint=endpoint_id, delivery=delivery_id, deal=uuid.uuid4())
            answer = await reader.post(
                path,
                data={
                    "csrf": token,
                    "url": receiver.url,
                    "amount": "1",
                    "unit": "days",
                    "scenario": "pickup-completed",
                },
            )
            assert answer.status_code == 403, path
            assert "data-forbidden" in answer.text
        assert await row_counts(sessionmaker) == before


ACTIONS = (
    P + "/webhooks",
    P + "/webhooks/{endpoint}/edit",
    P + "/webhooks/{endpoint}/test",
    P + "/webhooks/{endpoint}/disable",
    P + "/webhooks/{endpoint}/enable",
    P + "/webhooks/{endpoint}/recover",
    P + "/webhooks/{endpoint}/deliveries/{delivery}/resend",
    P + "/sandbox/clock",
    P + "/sandbox/deals/{deal}/clock",
    P + "/sandbox/scenarios",
)


async def test_forms_without_the_sessions_csrf_token_are_refused(client, sessionmaker, receiver):
    await portal_member(client, sessionmaker, "owner")
    endpoint_id = await register(client, receiver.url)
    before = await row_counts(sessionmaker)
    for path in ACTIONS:
        path = path.format(endpoint=endpoint_id, delivery=uuid.uuid4(), deal=uuid.uuid4())
        for token in (None, "forged"):
            data = {"url": receiver.url, "amount": "1", "unit": "days"}
            if token:
                data["csrf"] = token
            answer = await client.post(path, data=data)
            assert answer.status_code == 403, path
    assert await row_counts(sessionmaker) == before


async def test_a_member_of_one_integration_never_reaches_anothers(
    client, sessionmaker, receiver, worker
):
    # B's endpoint, with a delivery, and a deal.
    await portal_member(client, sessionmaker, "owner")
    theirs = await register(client, receiver.url)
    page = await client.get(f"{P}/webhooks/{theirs}")
    await post(client, f"{P}/webhooks/{theirs}/test", page.text)
    await worker.run_once()
    ran = await post(client, f"{P}/sandbox/scenarios", page.text, scenario="pickup-completed")
    assert ran.status_code == 200
    deal_id = re.search(r'data-deal="([0-9a-f-]{36})"', ran.text).group(1)
    async with sessionmaker() as session:
        delivery_id = await session.scalar(select(Delivery.id))
    async with other_client(client) as intruder:
        await portal_member(intruder, sessionmaker, "owner")
        own = await register(intruder, receiver.url)
        listed = await intruder.get(f"{P}/webhooks")
        assert str(theirs) not in listed.text
        for path in (
            f"{P}/webhooks/{theirs}",
            f"{P}/webhooks/{theirs}/deliveries/{delivery_id}",
            f"{P}/webhooks/{own}/deliveries/{delivery_id}",  # their delivery under my endpoint
            f"{P}/sandbox/deals/{deal_id}",
        ):
            assert (await intruder.get(path)).status_code == 404, path
        token = csrf(listed.text)
        before = await row_counts(sessionmaker)
        for path in ACTIONS[1:7] + ACTIONS[8:9]:
            for endpoint in (theirs, own):
                target = path.format(endpoint=endpoint, delivery=delivery_id, deal=deal_id)
                if endpoint == own and "{delivery}" not in path and "{deal}" not in path:
                    continue
                answer = await intruder.post(
                    target, data={"csrf": token, "url": receiver.url, "amount": "1", "unit": "days"}
                )
                assert answer.status_code == 404, target
        refused = await intruder.post(
            f"{P}/sandbox/scenarios",
            data={"csrf": token, "scenario": "pickup-completed", "deal": deal_id},
        )
        assert refused.status_code == 400
        assert "no deal with that id" in text(refused)
        assert await row_counts(sessionmaker) == before


async def test_the_sandbox_clock_a_deals_clock_and_a_scenario(client, sessionmaker):
    me = await portal_member(client, sessionmaker, "developer")
    page = await client.get(f"{P}/sandbox")
    assert page.status_code == 200
    assert 'data-offset="0"' in page.text
    assert "pickup-expired-refunded" in page.text
    ran = await post(client, f"{P}/sandbox/scenarios", page.text, scenario="pickup-completed")
    assert ran.status_code == 200
    assert "data-status>Completed" in ran.text
    assert 'data-kind="deal.status"' in ran.text
    deal_id = re.search(r'data-deal="([0-9a-f-]{36})"', ran.text).group(1)

    moved = await post(client, f"{P}/sandbox/clock", page.text, amount="2", unit="hours")
    assert moved.status_code == 303
    page = await client.get(moved.headers["location"])
    assert 'data-offset="7200"' in page.text
    assert "data-moved" in page.text
    for amount, unit in (("0", "days"), ("367", "days"), ("x", "days"), ("1", "weeks")):
        refused = await post(client, f"{P}/sandbox/clock", page.text, amount=amount, unit=unit)
        assert refused.status_code == 400
        assert "at most 366 days" in text(refused)

    # A new deal waiting for its pickup: its own clock brings the 7 days closer.
    ran = await post(
        client, f"{P}/sandbox/scenarios", page.text, scenario="payment-failed-then-paid"
    )
    deal_id = re.search(r'data-deal="([0-9a-f-]{36})"', ran.text).group(1)
    shown = await client.get(f"{P}/sandbox/deals/{deal_id}")
    assert shown.status_code == 200
    assert 'data-deal-offset="0"' in shown.text
    advanced = await post(
        client, f"{P}/sandbox/deals/{deal_id}/clock", shown.text, amount="1", unit="days"
    )
    assert advanced.status_code == 303
    shown = await client.get(advanced.headers["location"])
    assert 'data-deal-offset="86400"' in shown.text
    assert 'data-integration-offset="7200"' in shown.text
    on_deal = await post(
        client,
        f"{P}/sandbox/scenarios",
        shown.text,
        scenario="cancelled-with-pending-offer",
        deal=deal_id,
    )
    assert on_deal.status_code == 409
    assert "Nothing was changed" in text(on_deal)

    actor = f"member:{me.email}"
    actions = [a for who, a in await audit_actions(sessionmaker, me.integration_id) if who == actor]
    assert actions == [
        "sandbox.scenario.run",
        "sandbox.clock.advance",
        "sandbox.scenario.run",
        "sandbox.deal_clock.advance",
    ]


async def test_production_has_no_sandbox_pages(production_client, sessionmaker):
    await portal_member(production_client, sessionmaker, "owner")
    home = await production_client.get(f"{P}/")
    assert home.status_code == 200
    assert f'href="{P}/sandbox"' not in home.text
    assert f'href="{P}/webhooks"' in home.text
    token = csrf(home.text)
    assert (await production_client.get(f"{P}/sandbox")).status_code == 404
    assert (await production_client.get(f"{P}/sandbox/deals/{uuid.uuid4()}")).status_code == 404
    for path in (
        f"{P}/sandbox/clock",
        f"{P}/sandbox/scenarios",
        f"{P}/sandbox/deals/{uuid.uuid4()}/clock",
    ):
        answer = await production_client.post(
            path,
            data={"csrf": token, "amount": "1", "unit": "days", "scenario": "pickup-completed"},
        )
        assert answer.status_code == 404, path


async def test_pages_ask_for_a_login(client):
    for path in (f"{P}/webhooks", f"{P}/sandbox", f"{P}/webhooks/{uuid.uuid4()}"):
        answer = await client.get(path)
        assert answer.status_code == 303
        assert answer.headers["location"] == f"{P}/login"


@pytest.mark.parametrize(
    ("language", "placeholder"), [("en", "(no name)"), ("nb", "(uten navn)"), ("sv", "(utan namn)")]
)
async def test_a_deal_without_a_name_is_named_by_a_placeholder(
    client, sessionmaker, language, placeholder
):
    """A deal the API created without a name reads as a placeholder and the start of its id on
    the sandbox's pages, never ``None``."""
    me = await portal_member(client, sessionmaker, "developer")
    token = await client.post(
        "/oauth2/token",
        data={"grant_type": "client_credentials"},
        auth=(me.client_id, me.client_secret),
    )
    created = await client.post(
        "/deals/v1/deals",
        json={"price": 100, "seller": SELLER},
        headers={"Authorization": f"Bearer {token.json()['access_token']}"},
    )
    assert created.status_code == 201, created.text
    deal_id = created.json()["id"]
    assert created.json().get("name") is None
    language_header = {"Accept-Language": language}
    page = await client.get(f"{P}/sandbox", headers=language_header)
    row = re.search(rf'<li data-deal="{deal_id}">.*?</li>', page.text).group(0)
    assert f"{placeholder} {deal_id[:8]}</a>" in html.unescape(row)
    assert "None" not in row
    shown = await client.get(f"{P}/sandbox/deals/{deal_id}", headers=language_header)
    assert f"<dd>{placeholder} · <code>{deal_id}</code>" in html.unescape(shown.text)
    assert ">None" not in shown.text
    ran = await client.post(
        f"{P}/sandbox/scenarios",
        data={"csrf": csrf(page.text), "scenario": "pickup-completed", "deal": deal_id},
        headers=language_header,
    )
    assert ran.status_code == 200, ran.text
    assert f"{placeholder} {deal_id[:8]}</a>" in html.unescape(ran.text)


async def test_a_developer_opts_in_to_the_message_event(client, sessionmaker, receiver):
    """The form lists the opt-in ``deal.message`` (and says that none ticked leaves it out)."""
    await portal_member(client, sessionmaker, "developer")
    listed = await client.get(f"{P}/webhooks")
    assert 'value="deal.message"' in listed.text
    assert "every kind but <code>deal.message</code>, sent only when ticked" in text(listed)
    endpoint_id = await register(client, receiver.url, events=["deal.message"])
    async with sessionmaker() as session:
        endpoint = await session.get(WebhookEndpoint, endpoint_id)
        assert endpoint is not None
        assert endpoint.event_kinds == ["deal.message"]
