"""The Vipps MobilePay client and provider against the Vipps emulator (its own process), and the
webhook's HMAC check against the example in Vipps's own documentation."""

import asyncio
import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from dealbroker.core.settings import Settings
from dealbroker.payments import vipps
from dealbroker.payments.models import Payment
from dealbroker.payments.provider import ProviderError, SimulatedProvider
from dealbroker.payments.reconciliation import vipps_difference
from dealbroker.payments.vipps import VippsProvider, VippsUnavailable, reference
from dealbroker.payments.vipps_events import Forged, Malformed, parse, verify

# The example of https://developer.vippsmobilepay.com/docs/APIs/webhooks-api/request-authentication/
DOC_SECRET = (
    "A0+AeKBRG2KRGvnNwJpQlb6IJFk48CKXCIcrLoHncVJKDILsQSxS6NWCccwWm6r6FhGKhiHTBsG2wo/xU6FY/A=="
)
DOC_DATE = "Thu, 30 Mar 2023 08:38:32 GMT"
DOC_BODY = b'{"some-unique-content":"ee6e441b-cc4a-46f8-895d-a5af79bcc233/hello-world"}'
DOC_HASH = "lNlsp1XA03N34HrQsVzPgJKtC+r7l/RBF4V3JQUWMj4="
DOC_AUTH = (
    "HMAC-SHA256 SignedHeaders=x-ms-date;host;x-ms-content-sha256"
    "&Signature=agAiSyogQbDHpeucoNwYz+yAr5nJ+v+zasdkSbqzv+U="
)
DOC_PATH = "/e2cee29b-012e-4f1d-8ef4-e95fd74a7a63"
DOC_NOW = datetime(2023, 3, 30, 8, 39, tzinfo=UTC)


def test_the_documented_signature_verifies() -> None:
    verify(DOC_SECRET, DOC_PATH, "webhook.site", DOC_DATE, DOC_HASH, DOC_AUTH, DOC_BODY, DOC_NOW)


@pytest.mark.parametrize(
    ("change", "value"),
    [
        ("body", DOC_BODY.replace(b"hello", b"HELLO")),
        ("secret", "another-secret"),
        ("host", "evil.example"),
        ("path", "/another"),
        ("now", DOC_NOW + timedelta(minutes=10)),  # a replay
        ("auth", DOC_AUTH[:-3] + "AA="),
        ("hash", None),
    ],
)
def test_a_forged_or_stale_delivery_is_refused(change: str, value: Any) -> None:
    args: dict[str, Any] = {
        "secret": DOC_SECRET,
        "path": DOC_PATH,
        "host": "webhook.site",
        "hash": DOC_HASH,
        "auth": DOC_AUTH,
        "body": DOC_BODY,
        "now": DOC_NOW,
    }
    args[change] = value
    with pytest.raises(Forged):
        verify(
            args["secret"],
            args["path"],
            args["host"],
            DOC_DATE,
            args["hash"],
            args["auth"],
            args["body"],
            args["now"],
        )


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b"{",
        b'{"msn": "1", "reference": "r", "name": "AUTHORIZED", "amount": {"value": "1", '
        b'"currency": "NOK"}}',
        b'{"msn": "1", "reference": "r", "name": "PWNED", "amount": {"value": 1, '
        b'"currency": "NOK"}}',
        b" " * 20_000,
    ],
)
def test_a_verified_body_is_still_type_checked(body: bytes) -> None:
    with pytest.raises(Malformed):
        parse(body)


def _settings(emulator: Any) -> Settings:
    values = {k.removeprefix("DEALBROKER_").lower(): v for k, v in emulator.settings().items()}
    return Settings(database_url="sqlite://", environment="sandbox", **values)  # type: ignore[arg-type]


def _payment(amount: int = 120_000) -> Payment:
    return Payment(
        id=uuid.uuid4(),
        deal_id=uuid.uuid4(),
        amount_minor=amount,
        fee_minor=5_000,
        shipping_minor=0,
        refund_less_shipping=False,
        currency="NOK",
        status="Created",
        provider="vipps",
        refunded_minor=0,
        paid_out_minor=0,
    )


@pytest.fixture
def provider(vipps_emulator: Any) -> VippsProvider:
    vipps_emulator.reset()
    vipps.forget_tokens()
    return VippsProvider(_settings(vipps_emulator), SimulatedProvider())


def _aggregate(emulator: Any, payment: Payment) -> dict[str, int]:
    found = emulator.payment(reference(payment.id))["aggregate"]
    return {k.removesuffix("Amount"): v["value"] for k, v in found.items()}


def test_a_payment_created_twice_is_one_and_one_token_serves_both(
    provider: VippsProvider, vipps_emulator: Any
) -> None:
    payment = _payment()
    first = asyncio.run(provider.create(payment, "https://shop.example/back", "Bike"))
    again = asyncio.run(provider.create(payment, "https://shop.example/back", "Bike"))
    assert first == again
    assert first.startswith(vipps_emulator.base)
    assert list(vipps_emulator.payments()["payments"]) == [reference(payment.id)]
    assert vipps_emulator.payments()["tokens_issued"] == 1


def test_refund_before_capture_cancels_and_after_refunds(
    provider: VippsProvider, vipps_emulator: Any
) -> None:
    before, after = _payment(), _payment()
    for payment in (before, after):
        asyncio.run(provider.create(payment, "https://shop.example/back", "Bike"))
        vipps_emulator.decide(reference(payment.id), "approve")
    asyncio.run(provider.refund(before, idempotency_key=str(uuid.uuid4())))
    assert _aggregate(vipps_emulator, before) == {
        "authorized": 120_000,
        "cancelled": 120_000,
        "captured": 0,
        "refunded": 0,
    }
    key = str(uuid.uuid4())
    asyncio.run(provider.capture(after, idempotency_key=key))
    asyncio.run(provider.capture(after, idempotency_key=key))  # repeated after a crash
    assert _aggregate(vipps_emulator, after)["captured"] == 120_000
    asyncio.run(provider.refund(after, idempotency_key=str(uuid.uuid4())))
    assert _aggregate(vipps_emulator, after)["refunded"] == 120_000


def test_a_lapsed_reservation_refuses_its_capture(
    provider: VippsProvider, vipps_emulator: Any
) -> None:
    payment = _payment()
    asyncio.run(provider.create(payment, "https://shop.example/back", "Bike"))
    vipps_emulator.decide(reference(payment.id), "approve")
    vipps_emulator.decide(reference(payment.id), "lapse")
    with pytest.raises(ProviderError, match="could not be captured"):
        asyncio.run(provider.capture(payment, idempotency_key=str(uuid.uuid4())))
    assert _aggregate(vipps_emulator, payment)["captured"] == 0


def test_a_refund_less_shipping_before_the_capture_takes_the_shipping_and_releases_the_rest(
    provider: VippsProvider, vipps_emulator: Any
) -> None:
    """A parcel not collected while its capture still waits: the buyer gets back the amount
    less the shipping, so the shipping is captured and the rest cancelled (not all cancelled)."""
    payment = _payment()
    payment.shipping_minor, payment.refund_less_shipping = 10_000, True
    asyncio.run(provider.create(payment, "https://shop.example/back", "Bike"))
    vipps_emulator.decide(reference(payment.id), "approve")
    key = str(uuid.uuid4())
    asyncio.run(provider.refund(payment, idempotency_key=key))
    asyncio.run(provider.refund(payment, idempotency_key=key))  # made again after a crash
    assert payment.refund_minor == 110_000
    assert _aggregate(vipps_emulator, payment) == {
        "authorized": 120_000,
        "cancelled": 110_000,
        "captured": 10_000,
        "refunded": 0,
    }


def test_a_cancel_refused_because_a_capture_landed_refunds_what_was_captured(
    provider: VippsProvider, vipps_emulator: Any
) -> None:
    """The refund reads "nothing captured", a racing capture lands, Vipps refuses the cancel:
    the refund reads Vipps again and refunds what was captured instead of failing for good."""
    payment = _payment()
    ref = reference(payment.id)
    asyncio.run(provider.create(payment, "https://shop.example/back", "Bike"))
    vipps_emulator.decide(ref, "approve")
    vipps_emulator.fail("capture-first", path=f"/epayment/v1/payments/{ref}/cancel")
    asyncio.run(provider.refund(payment, idempotency_key=str(uuid.uuid4())))
    assert _aggregate(vipps_emulator, payment) == {
        "authorized": 120_000,
        "cancelled": 0,
        "captured": 120_000,
        "refunded": 120_000,
    }


@pytest.mark.parametrize(
    ("status", "path", "count"), [("401", "/accesstoken", 2), ("403", "/epayment", 1)]
)
def test_our_credentials_refused_are_retried_not_taken_for_a_lapse(
    provider: VippsProvider, vipps_emulator: Any, status: str, path: str, count: int
) -> None:
    payment = _payment()
    asyncio.run(provider.create(payment, "https://shop.example/back", "Bike"))
    vipps_emulator.decide(reference(payment.id), "approve")
    vipps.forget_tokens()
    vipps_emulator.fail(status, count, path=path)
    with pytest.raises(VippsUnavailable) as caught:
        asyncio.run(provider.capture(payment, idempotency_key=str(uuid.uuid4())))
    assert not isinstance(caught.value, ProviderError)  # the provider-call job retries it
    asyncio.run(provider.capture(payment, idempotency_key=str(uuid.uuid4())))  # fixed: it works
    assert _aggregate(vipps_emulator, payment)["captured"] == 120_000


def test_a_refused_capture_is_a_lapse_only_when_vipps_shows_the_reservation_gone(
    provider: VippsProvider, vipps_emulator: Any
) -> None:
    from dealbroker.payments.provider import ReservationLapsed

    payment = _payment()
    ref = reference(payment.id)
    asyncio.run(provider.create(payment, "https://shop.example/back", "Bike"))
    vipps_emulator.decide(ref, "approve")
    vipps_emulator.fail("400", path=f"/epayment/v1/payments/{ref}/capture")
    with pytest.raises(ProviderError) as caught:
        asyncio.run(provider.capture(payment, idempotency_key=str(uuid.uuid4())))
    assert not isinstance(caught.value, ReservationLapsed)  # still reserved: the operator's
    vipps_emulator.decide(ref, "lapse")
    with pytest.raises(ReservationLapsed):
        asyncio.run(provider.capture(payment, idempotency_key=str(uuid.uuid4())))


def test_a_cancel_of_an_approved_payment_says_the_money_came_in(
    provider: VippsProvider, vipps_emulator: Any
) -> None:
    abandoned, approved = _payment(), _payment()
    for payment in (abandoned, approved):
        asyncio.run(provider.create(payment, "https://shop.example/back", "Bike"))
    vipps_emulator.decide(reference(approved.id), "approve")
    assert asyncio.run(provider.cancel(abandoned, idempotency_key=str(uuid.uuid4()))) is False
    assert vipps_emulator.payment(reference(abandoned.id))["state"] == "TERMINATED"
    assert asyncio.run(provider.cancel(approved, idempotency_key=str(uuid.uuid4()))) is True
    never = _payment()  # the buyer never opened its checkout
    assert asyncio.run(provider.cancel(never, idempotency_key=str(uuid.uuid4()))) is False


@pytest.mark.parametrize(("mode", "retry_after"), [("429", 7.0), ("503", None), ("500", None)])
def test_passing_failures_are_retryable_not_refusals(
    provider: VippsProvider, vipps_emulator: Any, mode: str, retry_after: float | None
) -> None:
    payment = _payment()
    vipps_emulator.fail(mode, path="/epayment", retry_after=7)
    with pytest.raises(VippsUnavailable) as caught:
        asyncio.run(provider.create(payment, "https://shop.example/back", "Bike"))
    assert not isinstance(caught.value, ProviderError)  # the provider-call job retries it
    assert caught.value.retry_after == retry_after
    asyncio.run(provider.create(payment, "https://shop.example/back", "Bike"))  # then it works


def test_a_hang_is_cut_short(
    provider: VippsProvider, vipps_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vipps, "TIMEOUT", httpx.Timeout(1.0))
    vipps_emulator.fail("hang", path="/epayment", hang_seconds=3)
    with pytest.raises(VippsUnavailable):
        asyncio.run(provider.create(_payment(), "https://shop.example/back", "Bike"))


def test_reconciliation_sees_a_capture_we_do_not_know(
    provider: VippsProvider, vipps_emulator: Any
) -> None:
    payment = _payment()
    asyncio.run(provider.create(payment, "https://shop.example/back", "Bike"))
    vipps_emulator.decide(reference(payment.id), "approve")
    payment.status = "Paid"
    theirs = asyncio.run(provider.payment(payment))
    assert vipps_difference(payment, theirs) == []
    asyncio.run(provider.capture(payment, idempotency_key=str(uuid.uuid4())))
    theirs = asyncio.run(provider.payment(payment))
    [difference] = vipps_difference(payment, theirs)
    assert "captured no here" in difference.what
    payment.status = "Refunded"
    payment.refunded_minor = payment.amount_minor
    assert len(vipps_difference(payment, theirs)) == 2  # we say refunded, Vipps holds it


async def test_polling_settles_an_approval_whose_webhook_never_came(
    sessionmaker: Any, vipps_emulator: Any
) -> None:
    from sqlalchemy import update

    from dealbroker.deals import repository as deal_rows
    from dealbroker.payments import service as payments
    from dealbroker.payments.methods import Method
    from dealbroker.payments.vipps_events import POLL_AFTER, VippsPollJob
    from tests.lifecycle_helpers import new_deal

    vipps_emulator.reset()  # no webhook registered: only the polling can tell us
    vipps.forget_tokens()
    settings = _settings(vipps_emulator)
    d = await new_deal(sessionmaker)
    await d.to_signed("Pickup")
    async with sessionmaker() as session, session.begin():
        deal = await deal_rows.by_id_for_update(session, d.deal_id)
        payment, _ = await payments.start(session, deal, settings, Method.VIPPS)
    provider = VippsProvider(settings, SimulatedProvider())
    await provider.create(payment, "https://shop.example/back", "Bike")
    await asyncio.to_thread(vipps_emulator.decide, reference(payment.id), "approve")
    job = VippsPollJob(sessionmaker, settings)
    await job.run_once()  # too young: the webhook may still come
    assert await d.status() == "Signed"
    async with sessionmaker() as session, session.begin():
        await session.execute(
            update(Payment)
            .where(Payment.id == payment.id)
            .values(created_at=payment.created_at - POLL_AFTER - timedelta(seconds=1))
        )
    assert await job.run_once() >= 1
    assert await d.status() == "Pickup_Pending"
    async with sessionmaker() as session:
        paid = await session.get(Payment, payment.id)
        assert paid is not None
        assert paid.status == "Paid"
        assert paid.reserved_until is not None


def test_a_half_configured_vipps_is_refused_at_start() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="DEALBROKER_VIPPS_WEBHOOK_SECRET"):
        Settings(
            database_url="sqlite://",
            environment="sandbox",
            vipps_client_id="id",
            vipps_client_secret="secret",  # type: ignore[arg-type]
            vipps_subscription_key="key",  # type: ignore[arg-type]
            vipps_merchant_serial_number="123456",
        )
    with pytest.raises(ValidationError, match="MERCHANT_SERIAL_NUMBER"):
        Settings(
            database_url="sqlite://",
            environment="sandbox",
            vipps_client_id="id",
            vipps_client_secret="secret",  # type: ignore[arg-type]
            vipps_subscription_key="key",  # type: ignore[arg-type]
            vipps_webhook_secret="hook",  # type: ignore[arg-type]
        )


# --- with a database: the provider-call job, the events, reconciliation -------------------


async def _paid(sessionmaker: Any, settings: Settings, shipping: str = "Carrier") -> Any:
    """A deal paid by Vipps (reserved, not captured), as the webhook would settle it."""
    from dealbroker.deals import repository as deal_rows
    from dealbroker.payments import service as payments
    from dealbroker.payments import vipps_events
    from dealbroker.payments.methods import Method
    from tests.lifecycle_helpers import new_deal

    d = await new_deal(sessionmaker)
    await d.to_signed(shipping)
    async with sessionmaker() as session, session.begin():
        deal = await deal_rows.by_id_for_update(session, d.deal_id)
        payment, _ = await payments.start(session, deal, settings, Method.VIPPS)
    provider = VippsProvider(settings, SimulatedProvider())
    await provider.create(payment, "https://shop.example/back", "Bike")
    await asyncio.to_thread(vipps_emulator_decide, settings, reference(payment.id))
    found = await provider.payment(payment)
    async with sessionmaker() as session, session.begin():
        outcome = await vipps_events.apply(session, settings, payment.id, "AUTHORIZED", found)
    return d, payment, outcome


def vipps_emulator_decide(settings: Settings, ref: str) -> None:
    httpx.post(
        f"{settings.vipps_api_base}/_emulator/decide",
        json={"reference": ref, "action": "approve"},
        timeout=10,
    ).raise_for_status()


async def _locked(sessionmaker: Any, deal_id: uuid.UUID, action: Any) -> None:
    from dealbroker.deals import repository as deal_rows

    async with sessionmaker() as session, session.begin():
        await action(session, await deal_rows.by_id_for_update(session, deal_id))


async def _calls(sessionmaker: Any, payment_id: uuid.UUID) -> dict[str, Any]:
    from sqlalchemy import select

    from dealbroker.payments.models import ProviderCall

    async with sessionmaker() as session:
        calls = await session.scalars(
            select(ProviderCall).where(ProviderCall.payment_id == payment_id)
        )
        return {c.kind: c for c in calls}


async def _due_now(sessionmaker: Any, payment_id: uuid.UUID) -> None:
    from sqlalchemy import update

    from dealbroker.core import clock
    from dealbroker.payments.models import ProviderCall

    async with sessionmaker() as session, session.begin():
        await session.execute(
            update(ProviderCall)
            .where(ProviderCall.payment_id == payment_id, ProviderCall.status == "pending")
            .values(next_attempt_at=clock.now())
        )


async def _told(sessionmaker: Any, deal_id: uuid.UUID) -> list[str]:
    from sqlalchemy import select

    from dealbroker.notifications.models import OutboxMessage

    async with sessionmaker() as session:
        return list(
            await session.scalars(
                select(OutboxMessage.kind).where(OutboxMessage.deal_id == deal_id)
            )
        )


@pytest.fixture
def vipps_settings(vipps_emulator: Any) -> Settings:
    vipps_emulator.reset()
    vipps.forget_tokens()
    return _settings(vipps_emulator)


async def test_a_refund_waits_while_the_capture_of_its_payment_is_pending(
    sessionmaker: Any, vipps_emulator: Any, vipps_settings: Settings
) -> None:
    """The capture queued at the carrier's pick-up backs off (Vipps 503); the parcel comes back
    meanwhile. The refund is not made beside the capture: it waits, and then refunds what was
    captured (less any shipping), so Vipps holds for us exactly what we keep."""
    from dealbroker.deals import flows
    from dealbroker.deals.lifecycle import Actor, Trigger
    from dealbroker.payments.tasks import ProviderCallJob

    d, payment, _ = await _paid(sessionmaker, vipps_settings)
    ref = reference(payment.id)
    for trigger in (Trigger.CARRIER_PICKED_UP, Trigger.CARRIER_RETURNED):
        await _locked(
            sessionmaker,
            d.deal_id,
            lambda s, deal, t=trigger: flows.fire(s, deal, t, Actor.PROVIDER, vipps_settings),
        )
    await asyncio.to_thread(vipps_emulator.fail, "503", path=f"/epayment/v1/payments/{ref}/capture")
    job = ProviderCallJob(sessionmaker, vipps_settings)
    await job.run_once()
    calls = await _calls(sessionmaker, payment.id)
    assert (calls["capture"].status, calls["capture"].attempts) == ("pending", 1)
    assert calls["refund"].attempts == 0  # not made beside the capture
    assert _aggregate(vipps_emulator, payment)["cancelled"] == 0
    await _due_now(sessionmaker, payment.id)
    while await job.run_once():
        pass
    calls = await _calls(sessionmaker, payment.id)
    assert calls["capture"].status == calls["refund"].status == "succeeded"
    async with sessionmaker() as session:
        done = await session.get(Payment, payment.id)
    assert done is not None
    assert done.status == "Refunded"
    there = _aggregate(vipps_emulator, payment)
    assert there["cancelled"] == 0
    assert there["captured"] == done.amount_minor  # the capture went first, whole
    assert there["captured"] - there["refunded"] == done.amount_minor - done.refunded_minor


async def test_credentials_or_a_bare_400_are_never_told_to_the_parties_as_a_lapse(
    sessionmaker: Any, vipps_emulator: Any, vipps_settings: Settings
) -> None:
    from dealbroker.payments import service as payments
    from dealbroker.payments.tasks import ProviderCallJob

    d, payment, _ = await _paid(sessionmaker, vipps_settings, "Pickup")
    ref = reference(payment.id)
    await _locked(sessionmaker, d.deal_id, payments.capture)
    vipps.forget_tokens()
    await asyncio.to_thread(vipps_emulator.fail, "401", 10, path="/accesstoken")
    job = ProviderCallJob(sessionmaker, vipps_settings)
    await job.run_once()
    capture = (await _calls(sessionmaker, payment.id))["capture"]
    assert capture.status == "pending"  # tried again once the operator fixes the secret
    assert "401" in (capture.error or "")
    assert "reservation_lapsed" not in await _told(sessionmaker, d.deal_id)

    await asyncio.to_thread(vipps_emulator.reset_failures)
    await asyncio.to_thread(vipps_emulator.fail, "400", path=f"/epayment/v1/payments/{ref}/capture")
    await _due_now(sessionmaker, payment.id)
    await job.run_once()
    capture = (await _calls(sessionmaker, payment.id))["capture"]
    assert capture.status == "failed"  # the operator's, in the refused calls
    assert "still holds" in (capture.error or "")
    assert "reservation_lapsed" not in await _told(sessionmaker, d.deal_id)


async def test_an_authorization_partly_gone_does_not_make_the_payment_paid(
    sessionmaker: Any, vipps_emulator: Any, vipps_settings: Settings
) -> None:
    from dealbroker.deals import repository as deal_rows
    from dealbroker.payments import service as payments
    from dealbroker.payments import vipps_events
    from dealbroker.payments.methods import Method
    from tests.lifecycle_helpers import new_deal

    d = await new_deal(sessionmaker)
    await d.to_signed("Pickup")
    async with sessionmaker() as session, session.begin():
        deal = await deal_rows.by_id_for_update(session, d.deal_id)
        payment, _ = await payments.start(session, deal, vipps_settings, Method.VIPPS)
    provider = VippsProvider(vipps_settings, SimulatedProvider())
    await provider.create(payment, "https://shop.example/back", "Bike")
    await asyncio.to_thread(vipps_emulator.decide, reference(payment.id), "approve")
    await provider.client.modify(payment.id, "cancel", None, "NOK", str(uuid.uuid4()))
    found = await provider.payment(payment)
    assert found is not None
    assert found.state == "AUTHORIZED"
    assert found.reserved == 0
    async with sessionmaker() as session, session.begin():
        outcome = await vipps_events.apply(session, vipps_settings, payment.id, "AUTHORIZED", found)
    assert outcome is vipps_events.Outcome.UNMATCHED
    assert await d.status() == "Signed"
    async with sessionmaker() as session:
        kept = await session.get(Payment, payment.id)
        assert kept is not None
        assert kept.status != "Paid"


async def _reconcile(db_url: str, emulator: Any, since: datetime) -> Any:
    """``dealbroker payments reconcile`` from ``since`` to a little after now, run as the
    operator runs it (its own process, the settings in its environment)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("DEALBROKER_")}
    env.update({"DEALBROKER_DATABASE_URL": db_url, **emulator.settings()})
    until = datetime.now(UTC) + timedelta(seconds=5)
    args = ["payments", "reconcile", "--since", since.isoformat(), "--until", until.isoformat()]
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "dealbroker", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_reconcile_reports_a_provider_it_cannot_read_and_exits_non_zero(
    db_url: str, sessionmaker: Any, vipps_emulator: Any, vipps_settings: Settings
) -> None:
    """Vipps answers 503 to every read: ``payments reconcile`` says so in a line of its own and
    exits 1, with no traceback, rather than losing the other sources' lines."""
    since = datetime.now(UTC) - timedelta(seconds=5)
    await _paid(sessionmaker, vipps_settings, "Pickup")
    await asyncio.to_thread(vipps_emulator.fail, "503", 1000, path="/epayment")
    result = await _reconcile(db_url, vipps_emulator, since)
    await asyncio.to_thread(vipps_emulator.reset_failures)
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr, result.stderr
    assert "source vipps: could not be read: " in result.stdout, result
    assert "503" in result.stdout


async def test_the_back_office_compares_vipps_and_says_when_it_cannot(
    db_url: str, engine: Any, sessionmaker: Any, vipps_emulator: Any, vipps_settings: Settings
) -> None:
    """The back office's reconciliation page compares our Vipps payments with Vipps's record
    (not only Stripe's), and a Vipps that cannot be read is a line of its own, not a 500."""
    from dealbroker.app import create_app
    from tests.conftest import BASE_URL
    from tests.web.back_office import log_in, make_operator

    settings = vipps_settings.model_copy(
        update={"database_url": db_url, "embedded_worker": "off", "base_url": BASE_URL}
    )
    await _paid(sessionmaker, vipps_settings, "Pickup")
    app = create_app(settings, engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            await make_operator(sessionmaker, "fin@example.com", "finance")
            await log_in(client, sessionmaker, "fin@example.com")
            shown = await client.get("/back-office/reconcile?lang=en")
            assert shown.status_code == 200, shown.text
            assert "No differences." in shown.text
            assert 'data-difference="provider"' not in shown.text
            await asyncio.to_thread(vipps_emulator.fail, "503", 1000, path="/epayment")
            shown = await client.get("/back-office/reconcile?lang=en")
            assert shown.status_code == 200, shown.text
            assert 'data-difference="provider"' in shown.text
            assert "source vipps: could not be read" in shown.text


# --- the funds ledger (Report API): Vipps money our database does not know ---------------


def _today() -> str:
    """Today's ledger date (the emulator's days, and the settings' zone, are Europe/Oslo)."""
    return datetime.now(ZoneInfo("Europe/Oslo")).date().isoformat()


async def _moved_at_vipps_only(
    provider: VippsProvider, emulator: Any, refund: int | None = None
) -> Payment:
    """A payment created, approved, captured and (``refund``) refunded at Vipps with a reference
    of ours whose payment our database does not hold: what a restore to before it leaves."""
    payment = _payment()
    await provider.create(payment, "https://shop.example/back", "Bike")
    await asyncio.to_thread(emulator.decide, reference(payment.id), "approve")
    await provider.client.modify(
        payment.id, "capture", payment.amount_minor, "NOK", str(uuid.uuid4())
    )
    if refund is not None:
        await provider.client.modify(payment.id, "refund", refund, "NOK", str(uuid.uuid4()))
    return payment


@pytest.fixture
def ledger_provider(vipps_settings: Settings) -> VippsProvider:
    return VippsProvider(vipps_settings, SimulatedProvider())


@pytest.mark.parametrize(
    "change",
    [
        {"amount": "450"},
        {"amount": 1.5},
        {"time": "2026-12-07T10:21:54"},  # no offset
        {"time": "yesterday"},
        {"ledgerDate": "07.12.2026"},
        {"entryType": ""},
        {"reference": 42},
        {"balanceAfter": None},
        {"currency": "NOKK"},
    ],
)
def test_a_malformed_ledger_entry_is_an_error_not_skipped(change: dict[str, Any]) -> None:
    entry: dict[str, Any] = {
        "pspReference": "psp-1",
        "time": "2026-12-07T10:21:54.141089+0100",
        "ledgerDate": "2026-12-07",
        "entryType": "refund",
        "reference": "dealbroker-" + "0" * 32,
        "currency": "NOK",
        "amount": -45_000,
        "balanceBefore": 100_000,
        "balanceAfter": 55_000,
        "recipientHandle": "api:123456",
    }
    parsed = vipps.parse_entry(entry)
    assert (parsed.amount, parsed.time.utcoffset()) == (-45_000, timedelta(hours=1))
    with pytest.raises(ProviderError):
        vipps.parse_entry({**entry, **change})


def test_ledger_dates_are_the_merchants_days_and_at_most_31() -> None:
    oslo = ZoneInfo("Europe/Oslo")
    now = datetime(2026, 12, 20, 12, tzinfo=UTC)
    # 23:30 UTC on 30 November is 00:30 on 1 December in Oslo.
    since = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)
    dates = vipps.ledger_dates(since, datetime(2027, 1, 1, tzinfo=UTC), oslo, now)
    assert (dates[0].isoformat(), dates[-1].isoformat(), len(dates)) == (
        "2026-12-01",
        "2026-12-20",  # no report after now
        20,
    )
    month = vipps.ledger_dates(since, datetime(2026, 12, 31, 23, tzinfo=UTC), oslo, now + YEAR)
    assert len(month) == 31
    with pytest.raises(vipps.LedgerPeriodTooLong, match="32 ledger dates"):
        vipps.ledger_dates(since, datetime(2027, 1, 1, tzinfo=UTC), oslo, now + YEAR)


YEAR = timedelta(days=365)


async def test_the_funds_report_follows_its_cursor_and_says_which_dates_are_open(
    ledger_provider: VippsProvider, vipps_emulator: Any
) -> None:
    """Three captures and a refund, four entries on today's date: two pages of the emulator's
    two entries, all read, typed and signed; today is open until Vipps closes it."""
    payments = [await _moved_at_vipps_only(ledger_provider, vipps_emulator) for _ in range(2)]
    payments.append(await _moved_at_vipps_only(ledger_provider, vipps_emulator, refund=30_000))
    today = date.fromisoformat(_today())
    pages = (await asyncio.to_thread(vipps_emulator.ledger))["report_pages"]
    report = await ledger_provider.client.funds([today])
    assert (await asyncio.to_thread(vipps_emulator.ledger))["report_pages"] == pages + 2
    assert [(e.entry_type, e.reference, e.amount) for e in report.entries] == [
        ("capture", reference(payments[0].id), 120_000),
        ("capture", reference(payments[1].id), 120_000),
        ("capture", reference(payments[2].id), 120_000),
        ("refund", reference(payments[2].id), -30_000),
    ]
    assert [e.balance_after for e in report.entries] == [120_000, 240_000, 360_000, 330_000]
    assert report.open_dates == (today,)
    assert report.missing_dates == ()
    await asyncio.to_thread(vipps_emulator.close_date, today.isoformat())
    assert (await ledger_provider.client.funds([today])).open_dates == ()
    with pytest.raises(vipps.LedgerPeriodTooLong):
        await ledger_provider.client.funds([today] * 32)


async def test_reconcile_names_vipps_money_of_a_payment_our_database_does_not_know(
    db_url: str, ledger_provider: VippsProvider, vipps_emulator: Any
) -> None:
    """A restore to before a payment was made: Vipps captured and refunded it, our database has
    no row of it. ``payments reconcile`` names both, with their amounts; another sale on the
    same sales unit (not our reference) is not ours to name."""
    since = datetime.now(UTC) - timedelta(seconds=5)
    forgotten = await _moved_at_vipps_only(ledger_provider, vipps_emulator, refund=120_000)
    client = ledger_provider.client
    other = "shop-order-000123"
    money_ = {"currency": "NOK", "value": 50_000}
    await client.call(
        "POST",
        "/epayment/v1/payments",
        {
            "amount": money_,
            "paymentMethod": {"type": "WALLET"},
            "reference": other,
            "returnUrl": "https://shop.example/back",
            "userFlow": "WEB_REDIRECT",
        },
        idempotency_key=str(uuid.uuid4()),
    )
    await asyncio.to_thread(vipps_emulator.decide, other, "approve")
    await client.call(
        "POST",
        f"/epayment/v1/payments/{other}/capture",
        {"modificationAmount": money_},
        idempotency_key=str(uuid.uuid4()),
    )
    result = await _reconcile(db_url, vipps_emulator, since)
    assert result.returncode == 1, result
    ref = reference(forgotten.id)
    lines = result.stdout.splitlines()
    assert len(lines) == 2, result.stdout
    assert lines[0].startswith(f"payment {ref}: captured NOK 1200.00 at Vipps on "), lines
    assert lines[0].endswith(", no payment here"), lines
    assert lines[1].startswith(f"refund {ref}: refunded NOK 1200.00 at Vipps on "), lines
    assert other not in result.stdout


async def test_reconcile_names_a_refund_at_vipps_that_our_older_payment_does_not_show(
    db_url: str, sessionmaker: Any, vipps_emulator: Any, vipps_settings: Settings
) -> None:
    """A payment created and captured before the period (so ``VippsPayIns`` does not look it
    up) is refunded at Vipps after the moment the database was restored to: named by the
    ledger, our row refunding nothing. Its capture, before the period, is not. A payment of the
    period captured at Vipps alone is named once, by ``VippsPayIns``, not again by the ledger."""
    from dealbroker.payments import service as payments
    from dealbroker.payments.tasks import ProviderCallJob

    d, payment, _ = await _paid(sessionmaker, vipps_settings, "Pickup")
    await _locked(sessionmaker, d.deal_id, payments.capture)
    await ProviderCallJob(sessionmaker, vipps_settings).run_once()
    assert (await _calls(sessionmaker, payment.id))["capture"].status == "succeeded"
    since = datetime.now(UTC)
    provider = VippsProvider(vipps_settings, SimulatedProvider())
    await provider.client.modify(payment.id, "refund", 20_000, "NOK", str(uuid.uuid4()))
    _, fresh, _ = await _paid(sessionmaker, vipps_settings, "Pickup")
    await provider.client.modify(fresh.id, "capture", fresh.amount_minor, "NOK", "k-fresh")
    result = await _reconcile(db_url, vipps_emulator, since)
    assert result.returncode == 1, result
    [theirs, line] = result.stdout.splitlines()
    assert theirs.startswith(f"payment {reference(fresh.id)}: captured no here, "), theirs
    assert line.startswith(f"refund {reference(payment.id)}: refunded NOK 200.00 at Vipps on ")
    assert line.endswith("NOK 0.00 refunded here in the period (Paid)"), line


async def test_the_ledger_of_payments_we_hold_agrees(
    db_url: str, sessionmaker: Any, vipps_emulator: Any, vipps_settings: Settings
) -> None:
    """Captured and refunded by our own calls, one payment made before the period and one in
    it: the ledger's entries agree with our rows, and ``reconcile`` stays clean (exit 0)."""
    from dealbroker.deals import flows
    from dealbroker.deals.lifecycle import Actor, Trigger
    from dealbroker.payments import reconciliation
    from dealbroker.payments.tasks import ProviderCallJob

    assert "vipps ledger" in [s.name for s in reconciliation.sources(vipps_settings)]
    older, _, _ = await _paid(sessionmaker, vipps_settings)
    since = datetime.now(UTC)
    newer, _, _ = await _paid(sessionmaker, vipps_settings)
    for deal in (older, newer):
        for trigger in (Trigger.CARRIER_PICKED_UP, Trigger.CARRIER_RETURNED):
            await _locked(
                sessionmaker,
                deal.deal_id,
                lambda s, dl, t=trigger: flows.fire(s, dl, t, Actor.PROVIDER, vipps_settings),
            )
    job = ProviderCallJob(sessionmaker, vipps_settings)
    while await job.run_once():
        pass
    entries = (await asyncio.to_thread(vipps_emulator.ledger))["entries"]
    assert sorted(e["entryType"] for e in entries) == ["capture", "capture", "refund", "refund"]
    result = await _reconcile(db_url, vipps_emulator, since)
    assert result.returncode == 0, result
    assert result.stdout.startswith("no differences from "), result.stdout


async def test_a_ledger_vipps_cannot_give_is_a_line_of_its_own(
    sessionmaker: Any, vipps_emulator: Any, vipps_settings: Settings
) -> None:
    """The report answers 503, or 404 for a date (no report yet): a ``source vipps ledger``
    line each, not a crash, and the other sources compared as ever."""
    from dealbroker.payments.reconciliation import reconcile

    since = datetime.now(UTC) - timedelta(seconds=5)
    until = datetime.now(UTC) + timedelta(seconds=5)
    await asyncio.to_thread(vipps_emulator.fail, "503", 1000, path="/report/")
    try:
        lines = [d.line() for d in await reconcile(sessionmaker, vipps_settings, since, until)]
    finally:
        await asyncio.to_thread(vipps_emulator.reset_failures)
    [line] = lines
    assert line.startswith("source vipps ledger: could not be read: Vipps answered 503"), line
    await asyncio.to_thread(vipps_emulator.fail, "404", 1, path="/report/")
    lines = [d.line() for d in await reconcile(sessionmaker, vipps_settings, since, until)]
    assert lines == [
        f"source vipps ledger: no report of {_today()} at Vipps yet: its entries were not "
        "compared; reconcile again later"
    ]


async def test_a_period_over_31_ledger_dates_is_refused_not_read_in_part(
    sessionmaker: Any, vipps_emulator: Any, vipps_settings: Settings
) -> None:
    from dealbroker.payments.reconciliation import reconcile

    pages = (await asyncio.to_thread(vipps_emulator.ledger))["report_pages"]
    now = datetime.now(UTC)
    found = await reconcile(sessionmaker, vipps_settings, now - timedelta(days=40), now)
    [difference] = found
    assert (difference.kind, difference.ref) == ("source", "vipps ledger")
    assert "not read: the period covers 41 ledger dates" in difference.what
    assert "at most 31" in difference.what
    assert (await asyncio.to_thread(vipps_emulator.ledger))["report_pages"] == pages


def test_a_second_refund_of_a_payment_refunded_before_the_period_is_named() -> None:
    """The period's refund entries are compared with what our refund made in the period: a
    payment we refunded before it (shipping kept), refunded again at Vipps in it, is named; the
    same entry is ours when our refund call finished in the period."""
    from dealbroker.payments.reconciliation import _ledger_difference
    from dealbroker.payments.vipps import LedgerEntry

    payment = _payment(120_000)
    payment.status, payment.refunded_minor = "Refunded", 110_000
    at = datetime(2026, 12, 7, 13, 40, tzinfo=UTC)
    entry = LedgerEntry(
        psp_reference="3343121302",
        time=at,
        ledger_date=date(2026, 12, 7),
        entry_type="refund",
        reference=reference(payment.id),
        currency="NOK",
        amount=-110_000,
        balance_before=500_000,
        balance_after=390_000,
        recipient_handle="api:123456",
    )
    assert _ledger_difference(payment.id, payment, [entry], refunded_in_period=True) == []
    [line] = _ledger_difference(payment.id, payment, [entry], refunded_in_period=False)
    assert line.line() == (
        f"refund {reference(payment.id)}: refunded NOK 1100.00 at Vipps on "
        "2026-12-07T13:40:00+00:00, NOK 0.00 refunded here in the period (Refunded)"
    )
