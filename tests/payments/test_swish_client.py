"""The Swish provider against the Swish emulator, over mutual TLS: payment requests, their
retrieval and cancel, refunds made once, Swish's refusals and its passing failures; and a
connection without the merchant's certificate refused."""

import asyncio
import re
import ssl
import uuid
from datetime import UTC, datetime

import httpx
import pytest

from dealbroker.core.settings import Settings
from dealbroker.payments.models import Payment
from dealbroker.payments.provider import ProviderError, SimulatedProvider
from dealbroker.payments.swish import (
    RefundUnderWay,
    SwishProvider,
    SwishRefused,
    SwishUnavailable,
    callback_identifier,
    instruction,
    payer_alias,
)
from tests.payments.swish_fixture import SwishEmulator


def _settings(emulator: SwishEmulator, **extra: str) -> Settings:
    values = {k.removeprefix("DEALBROKER_").lower(): v for k, v in emulator.settings().items()}
    return Settings(**{**values, "base_url": "http://127.0.0.1:9", **extra})  # type: ignore[arg-type]


def _payment(amount_minor: int = 12_345) -> Payment:
    now = datetime.now(UTC)
    return Payment(
        id=uuid.uuid4(),
        deal_id=uuid.uuid4(),
        integration_id=uuid.uuid4(),
        amount_minor=amount_minor,
        fee_minor=500,
        shipping_minor=0,
        refund_less_shipping=False,
        currency="SEK",
        status="Processing",
        provider="swish",
        method="swish",
        provider_ref=uuid.uuid4().hex,
        refunded_minor=0,
        paid_out_minor=0,
        swish_callback_hash="x" * 64,
        created_at=now,
        updated_at=now,
    )


def swish_emulator_settings(emulator: SwishEmulator) -> Settings:
    return _settings(emulator, secret_key="k" * 40)


@pytest.fixture
def swish(swish_emulator: SwishEmulator) -> SwishProvider:
    swish_emulator.reset()
    return SwishProvider(swish_emulator_settings(swish_emulator), SimulatedProvider())


async def test_an_m_commerce_request_is_made_read_and_paid(swish, swish_emulator):
    payment = _payment()
    token = await swish.create_request(payment)
    assert token
    made = await swish.payment_request(payment)
    assert made is not None
    assert (made.id, made.status, made.amount_minor, made.currency) == (
        instruction(payment.id),
        "CREATED",
        12_345,
        "SEK",
    )
    [sent] = swish_emulator.get("requests")
    assert sent["amount"] == 123.45
    assert sent["payeeAlias"] == "1231181189"
    assert sent["payerAlias"] is None
    swish_emulator.post("pay", {"id": made.id})
    paid = await swish.payment_request(payment)
    assert paid is not None
    assert paid.status == "PAID"
    assert paid.payment_reference


async def test_an_e_commerce_request_goes_to_the_typed_number(swish, swish_emulator):
    payment = _payment()
    number = payer_alias("070-123 45 67")
    assert number == "46701234567"
    assert await swish.create_request(payment, payer=number) is None
    assert swish_emulator.get("requests")[0]["payerAlias"] == "46701234567"
    with pytest.raises(SwishRefused) as refused:
        await swish.create_request(_payment(), payer="46700000000")
    assert refused.value.codes == ("ACMT03",)


async def test_a_second_request_for_one_payment_is_refused_not_made(swish, swish_emulator):
    payment = _payment()
    await swish.create_request(payment)
    with pytest.raises(SwishRefused) as refused:
        await swish.create_request(payment)
    assert refused.value.codes == ("RP09",)
    assert len(swish_emulator.get("requests")) == 1


async def test_every_attempt_at_a_payment_s_request_carries_one_callback_identifier(
    swish, swish_emulator
):
    """A first attempt whose answer is lost and a second one present the same identifier, so
    the callbacks of the request Swish made are recognised whichever attempt made it."""
    payment = _payment()
    swish_emulator.post("fail", {"mode": "lost", "count": 1, "method": "PUT"})
    with pytest.raises(SwishUnavailable):
        await swish.create_request(payment)
    ident = instruction(payment.id)
    first = swish_emulator.get("identifiers")[ident]
    with pytest.raises(SwishRefused) as refused:
        await swish.create_request(payment)
    assert refused.value.codes == ("RP09",)
    again = SwishProvider(swish_emulator_settings(swish_emulator), SimulatedProvider())
    assert first == again.callback_identifier(payment) == swish.callback_identifier(payment)
    assert re.fullmatch(r"[0-9A-F]{32}", first)  # Swish takes 32 to 36 letters and digits
    other = _payment()
    assert swish.callback_identifier(other) != first
    assert callback_identifier("another secret key", payment.id) != first


def test_phone_numbers_as_typed():
    assert payer_alias("+46 70 123 45 67") == "46701234567"
    assert payer_alias("0046701234567") == "46701234567"
    assert payer_alias("12345") is None
    assert payer_alias("+47 912 34 567") is None  # Swish's payers are Swedish


async def test_passing_failures_are_not_refusals(swish, swish_emulator):
    payment = _payment()
    for mode in ("429", "500", "503"):
        swish_emulator.post("fail", {"mode": mode, "count": 1})
        with pytest.raises(SwishUnavailable):
            await swish.create_request(payment)
    assert swish_emulator.get("requests") == []
    await swish.create_request(payment)  # then it goes through


async def test_cancel_a_waiting_request_and_find_a_paid_one(swish, swish_emulator):
    waiting, paid = _payment(), _payment()
    await swish.create_request(waiting)
    await swish.create_request(paid)
    swish_emulator.post("pay", {"id": instruction(paid.id)})
    assert await swish.cancel(waiting, idempotency_key=str(uuid.uuid4())) is False
    state = await swish.payment_request(waiting)
    assert state is not None
    assert state.status == "CANCELLED"
    assert await swish.cancel(paid, idempotency_key=str(uuid.uuid4())) is True
    never_asked = _payment()
    never_asked.swish_callback_hash = None
    assert await swish.cancel(never_asked, idempotency_key=str(uuid.uuid4())) is False


async def _paid(swish: SwishProvider, emulator: SwishEmulator) -> Payment:
    payment = _payment()
    await swish.create_request(payment)
    emulator.post("pay", {"id": instruction(payment.id)})
    state = await swish.payment_request(payment)
    assert state is not None
    payment.swish_payment_reference = state.payment_reference
    return payment


async def test_a_refund_is_made_once_whatever_the_repeats(swish, swish_emulator):
    payment = await _paid(swish, swish_emulator)
    key = str(uuid.uuid4())
    made = await swish.refund(payment, idempotency_key=key)
    assert made == uuid.UUID(key).hex.upper()
    assert await swish.refund(payment, idempotency_key=key) == made  # after a crash: found
    [refund] = swish_emulator.get("refunds")
    assert (refund["status"], refund["amount"]) == ("PAID", 123.45)
    with pytest.raises(ProviderError):  # a second refund of the whole amount: RF06
        await swish.refund(payment, idempotency_key=str(uuid.uuid4()))
    assert len(swish_emulator.get("refunds")) == 1


async def test_a_refund_reads_the_payment_reference_it_was_not_told(swish, swish_emulator):
    """Money that came with no callback applied (lost, refused, not come yet): the refund reads
    Swish's paymentReference from the paid request; asked again (the operator's retry after
    Swish was down), the same."""
    payment = await _paid(swish, swish_emulator)
    reference, payment.swish_payment_reference = payment.swish_payment_reference, None
    swish_emulator.post("fail", {"mode": "503", "count": 1, "method": "GET"})
    key = str(uuid.uuid4())
    with pytest.raises(SwishUnavailable):
        await swish.refund(payment, idempotency_key=key)
    assert await swish.refund(payment, idempotency_key=key) == uuid.UUID(key).hex.upper()
    [refund] = swish_emulator.get("refunds")
    assert (refund["status"], refund["originalPaymentReference"]) == ("PAID", reference)
    unpaid = _payment()
    await swish.create_request(unpaid)
    with pytest.raises(ProviderError, match="CREATED"):
        await swish.refund(unpaid, idempotency_key=str(uuid.uuid4()))
    with pytest.raises(ProviderError, match="no payment request"):
        await swish.refund(_payment(), idempotency_key=str(uuid.uuid4()))
    assert len(swish_emulator.get("refunds")) == 1


async def test_an_answer_longer_than_swish_s_is_not_read_to_its_end(swish, swish_emulator):
    swish_emulator.post("fail", {"mode": "huge", "count": 1, "method": "GET"})
    with pytest.raises(SwishUnavailable, match="over"):
        await swish.payment_request(_payment())
    for _ in range(100):
        told = [e for e in swish_emulator.get("log") if "huge" in e]
        if told:
            break
        await asyncio.sleep(0.1)
    assert told == [{"huge": told[0]["huge"], "cut": True}]  # we stopped reading it


async def test_a_refund_swish_refuses_or_has_not_finished(swish, swish_emulator, monkeypatch):
    monkeypatch.setattr("dealbroker.payments.swish.REFUND_POLL", (0.3, 0.5, 0.5))
    payment = await _paid(swish, swish_emulator)
    swish_emulator.post("refunds", {"mode": "hold"})
    key = str(uuid.uuid4())
    with pytest.raises(RefundUnderWay):
        await swish.refund(payment, idempotency_key=key)
    swish_emulator.post("refunds", {"mode": "pay"})
    assert len(swish_emulator.get("refunds")) == 1  # asked again later: the same refund
    other = await _paid(swish, swish_emulator)
    swish_emulator.post("refunds", {"mode": "error"})
    with pytest.raises(ProviderError, match="RF07"):
        await swish.refund(other, idempotency_key=str(uuid.uuid4()))


async def test_swish_answers_nobody_without_the_merchant_certificate(swish_emulator):
    url = f"{swish_emulator.base}/api/v1/paymentrequests/{uuid.uuid4().hex.upper()}"
    verify = ssl.create_default_context(cafile=str(swish_emulator.certs / "ca.pem"))
    async with httpx.AsyncClient(verify=verify) as anonymous:
        with pytest.raises(httpx.TransportError):
            await anonymous.get(url)
    rogue = _settings(swish_emulator, swish_cert_file=str(swish_emulator.certs / "rogue.pem"))
    with pytest.raises(SwishUnavailable):
        await SwishProvider(rogue, SimulatedProvider()).payment_request(_payment())
    # And ours is answered (a 404: no such request).
    good = SwishProvider(_settings(swish_emulator), SimulatedProvider())
    assert await good.payment_request(_payment()) is None


async def test_we_answer_nobody_but_swish_s_server(swish_emulator, tmp_path):
    # Another CA's server certificate is refused on our side too.
    other = tmp_path / "other-ca.pem"
    other.write_bytes((swish_emulator.certs / "rogue.pem").read_bytes())
    settings = _settings(swish_emulator, swish_ca_file=str(other))
    with pytest.raises(SwishUnavailable):
        await SwishProvider(settings, SimulatedProvider()).payment_request(_payment())


async def test_a_swish_that_hangs_is_given_up_on_not_waited_for(swish, swish_emulator, monkeypatch):
    monkeypatch.setattr("dealbroker.payments.swish_tls.TIMEOUT", httpx.Timeout(1.0))
    swish_emulator.post("fail", {"mode": "hang", "count": 1})
    with pytest.raises(SwishUnavailable):
        await swish.payment_request(_payment())
