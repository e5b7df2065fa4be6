"""The back office's webhooks pages over HTTP: every integration's endpoints with their failure
rate and backlog (failing first, in a fixed number of statements), one endpoint's attempts
(answers escaped) and waiting deliveries, and the actions (disable, enable, recover, resend),
each in the audit trail with the operator, the request id, before and after."""

import asyncio
import re
import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import event, select

from dealbroker.audit.models import AuditRecord
from dealbroker.events.models import Delivery, Event, WebhookEndpoint
from tests.conftest import create_deal
from tests.events.delivery import drain, register
from tests.receiver import Receiver, start_receiver
from tests.web.back_office import csrf, log_in, make_operator

ADMIN = "ann@example.com"


@pytest.fixture
def receivers() -> AsyncIterator[tuple[Receiver, Receiver]]:
    """A receiver that fails (500, with an answer that is markup) and one that works."""
    failing, working = start_receiver(), start_receiver()
    failing.answer(500, body=b"<script>alert('x')</script> down", times=1000)
    yield failing, working
    failing.close()
    working.close()


@pytest.fixture
async def endpoints(
    client,
    caller,
    other,
    receivers,
    worker,
    loopback_is_public,
) -> tuple[dict, dict]:
    """``caller``'s endpoint fails, ``other``'s works; one deal each, sent once."""
    failing, working = receivers
    bad = await register(client, caller, failing.url, description="shop")
    good = await register(client, other, working.url)
    await create_deal(client, caller)
    await create_deal(client, other)
    assert await drain(worker) == 2
    return bad, good


async def admin(client, sessionmaker) -> None:
    await make_operator(sessionmaker, ADMIN, "admin")
    await log_in(client, sessionmaker, ADMIN)


async def test_the_list_puts_failing_endpoints_first_with_rate_and_backlog(
    client, sessionmaker, engine, endpoints, caller, other
):
    bad, good = endpoints
    await admin(client, sessionmaker)
    listed = await client.get("/back-office/webhooks")
    assert listed.status_code == 200
    assert listed.headers["content-security-policy"].startswith("default-src 'none'")
    order = re.findall(r'data-endpoint="([^"]+)" data-failing="(\w+)"', listed.text)
    assert order == [(bad["id"], "true"), (good["id"], "false")]
    sections = listed.text.split('<section class="endpoint"')[1:]
    assert 'data-failure-rate="100"' in sections[0]
    assert 'data-backlog="1"' in sections[0]  # waiting for its retry
    assert caller.client_id in sections[0]
    assert 'data-failure-rate="0"' in sections[1]
    assert 'data-backlog="0"' in sections[1]
    assert other.client_id in sections[1]

    # The list costs the same statements whatever the number of endpoints. Only the request's
    # own are counted: the app's background flushes share the engine.
    async def statements() -> int:
        seen: list[str] = []
        request = asyncio.current_task()

        def count(*args: object) -> None:
            if asyncio.current_task() is request:
                seen.append(str(args[2]))

        event.listen(engine.sync_engine, "before_cursor_execute", count)
        try:
            assert (await client.get("/back-office/webhooks")).status_code == 200
        finally:
            event.remove(engine.sync_engine, "before_cursor_execute", count)
        return len(seen)

    two = await statements()
    assert two > 0
    for n in range(3):
        await register(client, caller, f"https://hooks{n}.example.com/in")
    assert await statements() == two


async def test_the_endpoint_page_shows_attempts_escaped_and_what_waits(
    client, sessionmaker, endpoints
):
    bad, _good = endpoints
    await admin(client, sessionmaker)
    shown = await client.get(f"/back-office/webhooks/{bad['id']}")
    assert shown.status_code == 200
    assert re.findall(r'data-success="(\w+)" data-status-code="(\d*)"', shown.text) == [
        ("false", "500")
    ]
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; down" in shown.text
    assert "<script>" not in shown.text
    assert len(re.findall(r"<li data-delivery=", shown.text)) == 1
    assert "deal.status" in shown.text
    unknown = await client.get(f"/back-office/webhooks/{uuid.uuid4()}")
    assert unknown.status_code == 404


async def test_disable_enable_recover_and_resend_are_in_the_audit_trail(
    client, sessionmaker, endpoints, receivers, worker, other
):
    bad, good = endpoints
    failing, _working = receivers
    await admin(client, sessionmaker)
    path = f"/back-office/webhooks/{bad['id']}"
    token = csrf((await client.get(path)).text)

    disabled = await client.post(f"{path}/disable", data={"csrf": token})
    assert disabled.status_code == 303
    assert disabled.headers["location"] == f"{path}?done=webhook-disabled"
    page = await client.get(disabled.headers["location"])
    assert 'data-state="disabled"' in page.text
    assert "disabled by an operator" in page.text
    enabled = await client.post(f"{path}/enable", data={"csrf": token})
    assert enabled.headers["location"] == f"{path}?done=webhook-enabled"

    # The receiver works again: recover retries now what waits for its next attempt.
    failing.script.clear()
    recovered = await client.post(
        f"{path}/recover", data={"csrf": token, "since": "3", "waiting": "1"}
    )
    assert recovered.headers["location"] == f"{path}?done=webhook-recovered&queued=1"
    due = (await client.get(recovered.headers["location"])).text
    assert "1 delivery is queued" in due
    assert "data-due-since" in due  # due now: waiting for the worker
    assert await drain(worker) == 1
    emptied = await client.get(path)
    assert 'data-backlog="0"' in emptied.text
    assert "data-waiting-none" in emptied.text

    async with sessionmaker() as session:
        event_id = str(
            await session.scalar(
                select(Event.id)
                .join(Delivery, Delivery.event_seq == Event.seq)
                .where(Delivery.endpoint_id == uuid.UUID(bad["id"]))
            )
        )
    assert event_id in emptied.text
    resent = await client.post(f"{path}/resend", data={"csrf": token, "event": event_id})
    assert resent.headers["location"] == f"{path}?done=webhook-resent"
    async with sessionmaker() as session:
        queued = (
            await session.scalars(
                select(Delivery).where(Delivery.endpoint_id == uuid.UUID(bad["id"]))
            )
        ).all()
    assert sorted(d.status for d in queued) == ["pending", "succeeded"]

    # Another integration's event, or no event id: refused, nothing queued nor recorded.
    async with sessionmaker() as session:
        foreign = await session.scalar(
            select(Event.id)
            .join(Delivery, Delivery.event_seq == Event.seq)
            .where(Delivery.endpoint_id == uuid.UUID(good["id"]))
        )
    for wrong in ("not-an-id", str(foreign), str(uuid.uuid4())):
        refused = await client.post(f"{path}/resend", data={"csrf": token, "event": wrong})
        assert refused.status_code == 400
        assert 'role="alert"' in refused.text
    forged = await client.post(f"{path}/disable", data={"csrf": "forged"})
    assert forged.status_code == 403

    async with sessionmaker() as session:
        records = (
            await session.scalars(
                select(AuditRecord)
                .where(
                    AuditRecord.action.like("webhook.%") | (AuditRecord.action == "event.resend")
                )
                .order_by(AuditRecord.id)
            )
        ).all()
        endpoint = await session.get(WebhookEndpoint, uuid.UUID(bad["id"]))
    assert endpoint.enabled is True
    assert [r.action for r in records] == [
        "webhook.disable",
        "webhook.enable",
        "webhook.recover",
        "event.resend",
    ]
    assert {r.actor for r in records} == {f"operator:{ADMIN}"}
    assert all(r.request_id for r in records)
    disable, enable, recover, resend = records
    assert (disable.before["enabled"], disable.after["enabled"]) == (True, False)
    assert disable.after["disabledReason"] == "disabled by dealbroker's operators"
    assert (enable.before["enabled"], enable.after["enabled"]) == (False, True)
    assert disable.target_id == bad["id"]
    assert recover.after["queued"] == 1
    assert recover.after["waiting"] is True
    assert resend.target_type == "event"
    assert resend.target_id == event_id
    assert resend.after["endpointId"] == bad["id"]


async def test_the_list_pages(client, sessionmaker, caller, other):
    for n in range(26):  # at most 20 endpoints an integration
        await register(client, (caller, other)[n % 2], f"https://hooks{n}.example.com/in")
    await admin(client, sessionmaker)
    first = await client.get("/back-office/webhooks")
    assert len(re.findall(r'<section class="endpoint"', first.text)) == 25
    assert 'rel="next"' in first.text
    second = await client.get("/back-office/webhooks?page=2")
    assert len(re.findall(r'<section class="endpoint"', second.text)) == 1
    assert (await client.get("/back-office/webhooks?page=0")).status_code in (400, 422)


@pytest.mark.parametrize("lang", ["nb", "sv"])
async def test_the_webhooks_pages_read_in_norwegian_and_swedish(
    client, sessionmaker, endpoints, lang
):
    from tests.web.english import ENGLISH, WORD

    def english(html: str) -> set[str]:
        # Code, and the receiver's own answer, are not ours to translate.
        text = re.sub(r"<(code|pre|style|script)[^>]*>.*?</\1>", " ", html, flags=re.S)
        text = re.sub(r"<[^>]+>", " ", text)
        return {w for w in WORD.findall(text) if w.lower() in ENGLISH}

    bad, _good = endpoints
    await admin(client, sessionmaker)
    path = f"/back-office/webhooks/{bad['id']}"
    token = csrf((await client.get(f"{path}?lang={lang}")).text)
    await client.post(f"{path}/disable", data={"csrf": token})
    for shown in ("/back-office/", "/back-office/webhooks", f"{path}?done=webhook-disabled"):
        answer = await client.get(shown)
        assert answer.status_code == 200
        assert not english(answer.text), shown
    recovered = await client.post(f"{path}/recover", data={"csrf": token, "waiting": "1"})
    assert not english((await client.get(recovered.headers["location"])).text)
