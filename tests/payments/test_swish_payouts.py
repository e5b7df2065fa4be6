"""The Swish payouts rail against the emulator (its own process, behind mutual TLS, verifying
each payload's signature with the signing certificate it was given): a payout is signed,
submitted once and settled by Swish's answer; a payload signed with another key is refused; a
payout whose answer timed out is tried again with the same instruction id and paid once."""

import base64
import json
import ssl
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from dealbroker.core.errors import BadRequest, FieldError
from dealbroker.core.settings import Settings
from dealbroker.payments import provider, swish_payouts, swish_tls
from dealbroker.payments.models import PayoutAccount
from dealbroker.payments.provider import RailByAccount, provider_for, startup_problem
from dealbroker.payments.swish_payouts import SwishPayoutPollJob
from dealbroker.payments.tasks import make_pending_calls
from tests.payments.swish_deals import (
    PAYEE_ALIAS,
    PAYEE_SSN,
    due_now,
    payment_of,
    payout_calls,
    swish_deal,
)


@pytest.fixture
def swish(swish_payouts_emulator: Any, db_url: str) -> tuple[Any, Settings]:
    swish_payouts_emulator.reset()
    swish_payouts_emulator.enrol(PAYEE_ALIAS, PAYEE_SSN)
    settings = Settings(
        database_url=db_url,
        environment="sandbox",
        secret_key="swish-payout-tests-" + "k" * 32,
        **swish_payouts_emulator.values(),  # type: ignore[arg-type]
    )
    return swish_payouts_emulator, settings


# --- the seller's input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "typed",
    [
        "070-123 45 67",
        "0701234567",
        "+46 70 123 45 67",
        "0046701234567",
        "46701234567",
        "+46 (0)70-123 45 67",
    ],
)
def test_a_swedish_mobile_number_becomes_the_payee_alias(typed: str) -> None:
    assert swish_payouts.normalise_number(typed) == "46701234567"


@pytest.mark.parametrize(
    "typed",
    [
        "08-123 456 78",
        "0711234567",
        "070123456",
        "07012345678",
        "+4790012345",
        "1231181189",
        "",
        "07O1234567",
    ],
)
def test_anything_else_is_refused_on_the_swish_field(typed: str) -> None:
    with pytest.raises(FieldError) as refused:
        swish_payouts.normalise_number(typed)
    assert refused.value.field == "swish"


def test_the_personal_identity_number_is_checked_and_written_in_twelve_digits() -> None:
    assert swish_payouts.normalise_ssn("19811218-9876") == "198112189876"
    assert swish_payouts.normalise_ssn("811218-9876") == "198112189876"
    for wrong in ("19811218-9875", "19811318-9876", "abc", ""):
        with pytest.raises(FieldError) as refused:
            swish_payouts.normalise_ssn(wrong)
        assert refused.value.field == "ssn"
        assert "9876" not in str(refused.value.detail)
        assert "9875" not in str(refused.value)


def test_the_ssn_is_sealed_and_shown_by_its_last_digits(swish: tuple[Any, Settings]) -> None:
    _, settings = swish
    sealed = swish_payouts.seal(settings, PAYEE_SSN)
    assert PAYEE_SSN not in sealed
    assert PAYEE_SSN not in base64.b64decode(sealed).decode("latin1")
    assert swish_payouts.unseal(settings, sealed) == PAYEE_SSN
    assert swish_payouts.ssn_ending(settings, sealed) == "9876"
    other = settings.model_copy(update={"secret_key": "another-" + "s" * 32})
    assert swish_payouts.ssn_ending(other, sealed) is None


async def test_swish_is_refused_where_swish_does_not_pay(sessionmaker, swish) -> None:
    _, settings = swish
    off = settings.model_copy(update={"swish_payouts": False})
    with pytest.raises(BadRequest):
        await swish_deal(sessionmaker, off)


# --- start-up -------------------------------------------------------------------------------


def test_the_settings_are_checked_at_start(swish: tuple[Any, Settings], tmp_path) -> None:
    emulator, settings = swish
    assert startup_problem(settings) is None
    chosen = provider_for(settings)
    assert isinstance(chosen, provider.WithPayoutRail)  # the sandbox's pay-in, Swish payouts
    assert isinstance(chosen.rail, RailByAccount)
    missing = settings.model_copy(update={"swish_payout_signing_key_file": str(tmp_path / "no")})
    assert "DEALBROKER_SWISH_PAYOUT_SIGNING_KEY_FILE" in (startup_problem(missing) or "")
    assert "cannot be read" in (startup_problem(missing) or "")
    wrong_serial = settings.model_copy(update={"swish_payout_signing_serial": "ABCDEF"})
    assert "SERIAL" in (startup_problem(wrong_serial) or "")
    nok = settings.model_copy(update={"currency": "NOK", "payment_methods": "card"})
    assert "SEK only" in (startup_problem(nok) or "")
    # Production: a key others may read is refused, in one line.
    loose = tmp_path / "loose-key.pem"
    loose.write_bytes((emulator.certs / "client-key.pem").read_bytes())
    loose.chmod(0o644)
    production = settings.model_copy(
        update={
            "environment": "production",
            "base_url": "https://deals.example",
            "swish_key_file": str(loose),
        }
    )
    problem = swish_payouts.startup_problem(production) or ""
    assert "group or others" in problem
    assert "\n" not in problem


# --- the rail against the emulator ----------------------------------------------------------


async def test_a_payout_is_signed_submitted_and_settled_by_swish(sessionmaker, swish) -> None:
    emulator, settings = swish
    emulator.callbacks(send=False)  # nobody listens: the worker's poll asks Swish
    d = await swish_deal(sessionmaker, settings)
    await make_pending_calls(sessionmaker, settings)
    [call] = await payout_calls(sessionmaker, d.deal_id)
    assert (call.status, call.rail) == ("submitted", "swish")
    payment = await payment_of(sessionmaker, d.deal_id)
    assert payment.status == "PendingPayOut"
    [made] = emulator.state()["payouts"]
    # The emulator took it: its signature verified with the signing certificate.
    assert made["payoutInstructionUUID"] == call.id.hex.upper()
    assert made["payeeAlias"] == PAYEE_ALIAS
    assert made["payeeSSN"] == PAYEE_SSN
    assert made["amount"] == f"{payment.payout_minor / 100:.2f}"
    assert made["payerAlias"] == settings.swish_merchant_number
    # Not a bank file's: the export never takes it.
    from dealbroker.payments import repository

    async with sessionmaker() as session, session.begin():
        assert call.id not in [c.id for c in await repository.calls_to_export(session, 100)]
    # The poll waits a few minutes for the callback; brought forward, it settles the payout.
    assert await SwishPayoutPollJob(sessionmaker, settings).run_once() == 0
    emulator.wait_settled()
    await due_now(sessionmaker, d.deal_id)
    assert await SwishPayoutPollJob(sessionmaker, settings).run_once() == 1
    payment = await payment_of(sessionmaker, d.deal_id)
    assert payment.status == "PaidOut"
    assert payment.paid_out_minor == payment.amount_minor - payment.fee_minor


async def test_a_payee_whose_ssn_is_not_the_numbers_owners_fails_with_swishs_reason(
    sessionmaker, swish
) -> None:
    emulator, settings = swish
    emulator.callbacks(send=False)
    d = await swish_deal(sessionmaker, settings, ssn="19900101-0017")
    await make_pending_calls(sessionmaker, settings)
    emulator.wait_settled()
    await due_now(sessionmaker, d.deal_id)
    await SwishPayoutPollJob(sessionmaker, settings).run_once()
    payment = await payment_of(sessionmaker, d.deal_id)
    assert payment.status == "PayoutFailed"
    [call] = await payout_calls(sessionmaker, d.deal_id)
    assert call.status == "failed"
    assert "VR02" in (call.error or "")
    assert "personal identity number" in (swish_payouts.seller_reason(call.error) or "")


async def test_a_payload_signed_with_another_key_is_refused(sessionmaker, swish, tmp_path) -> None:
    emulator, settings = swish
    d = await swish_deal(sessionmaker, settings)
    forged_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    from datetime import timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    from dealbroker.core import clock

    key_file = tmp_path / "forged-key.pem"
    key_file.write_bytes(
        forged_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_file.chmod(0o600)
    # A certificate of the forged key with the real one's serial: our start-up checks pass,
    # Swish (which knows the real certificate) refuses the signature.
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "forged")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(forged_key.public_key())
        .serial_number(int(emulator.signing_serial, 16))
        .not_valid_before(clock.now() - timedelta(days=1))
        .not_valid_after(clock.now() + timedelta(days=30))
        .sign(forged_key, hashes.SHA256())
    )
    cert_file = tmp_path / "forged.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    forged = settings.model_copy(
        update={
            "swish_payout_signing_key_file": str(key_file),
            "swish_payout_signing_cert_file": str(cert_file),
        }
    )
    await make_pending_calls(sessionmaker, forged)
    [call] = await payout_calls(sessionmaker, d.deal_id)
    assert call.status == "failed"
    assert "PA01" in (call.error or "")
    assert (await payment_of(sessionmaker, d.deal_id)).status == "PayoutFailed"
    assert emulator.state()["payouts"] == []


async def test_an_unsigned_payload_and_a_client_without_a_certificate_are_refused(swish) -> None:
    emulator, settings = swish
    client = swish_payouts.SwishPayoutsClient(settings)
    payload = {
        f: "x"
        for f in (
            "payoutInstructionUUID",
            "payerPaymentReference",
            "payerAlias",
            "payeeAlias",
            "payeeSSN",
            "amount",
            "currency",
            "payoutType",
            "message",
            "instructionDate",
        )
    }
    payload["signingCertificateSerialNumber"] = emulator.signing_serial
    answer = await client._send(
        "POST",
        swish_payouts.PAYOUTS_PATH,
        "a test",
        content=json.dumps({"payload": payload, "signature": "bm90IGEgc2lnbmF0dXJl"}),
    )
    assert answer.status_code == 422
    assert json.loads(answer.content)[0]["errorCode"] == "PA01"
    trusting = ssl.create_default_context(cafile=str(emulator.certs / "ca.pem"))
    async with httpx.AsyncClient(verify=trusting) as plain:
        with pytest.raises(httpx.HTTPError):  # no client certificate: the handshake fails
            await plain.get(settings.swish_api_base + swish_payouts.PAYOUTS_PATH + "/" + "0" * 32)


async def test_a_payout_timed_out_is_made_again_with_the_same_id_and_paid_once(
    sessionmaker, swish, monkeypatch
) -> None:
    emulator, settings = swish
    emulator.callbacks(send=False)
    monkeypatch.setattr(swish_tls, "TIMEOUT", httpx.Timeout(1.0))
    emulator.fail("hang", hang_seconds=3)
    d = await swish_deal(sessionmaker, settings)
    await make_pending_calls(sessionmaker, settings)
    [call] = await payout_calls(sessionmaker, d.deal_id)
    assert call.status == "pending"
    assert "Timeout" in (call.error or "")
    await due_now(sessionmaker, d.deal_id)
    await make_pending_calls(sessionmaker, settings)
    [call] = await payout_calls(sessionmaker, d.deal_id)
    assert call.status == "submitted"
    state = emulator.state()
    assert state["requests"] == {call.id.hex.upper(): 1}  # found by the retry, not made again
    assert len(state["payouts"]) == 1  # paid once
    emulator.wait_settled()
    await due_now(sessionmaker, d.deal_id)
    await SwishPayoutPollJob(sessionmaker, settings).run_once()
    payment = await payment_of(sessionmaker, d.deal_id)
    assert payment.status == "PaidOut"
    assert payment.paid_out_minor == payment.payout_minor


async def test_429_and_5xx_are_tried_again(sessionmaker, swish) -> None:
    emulator, settings = swish
    emulator.callbacks(send=False)
    emulator.fail("429")
    d = await swish_deal(sessionmaker, settings)
    await make_pending_calls(sessionmaker, settings)
    [call] = await payout_calls(sessionmaker, d.deal_id)
    assert call.status == "pending"
    assert "429" in (call.error or "")
    emulator.fail("503")
    await due_now(sessionmaker, d.deal_id)
    await make_pending_calls(sessionmaker, settings)
    [call] = await payout_calls(sessionmaker, d.deal_id)
    assert call.status == "pending"
    assert "503" in (call.error or "")
    await due_now(sessionmaker, d.deal_id)
    await make_pending_calls(sessionmaker, settings)
    [call] = await payout_calls(sessionmaker, d.deal_id)
    assert call.status == "submitted"
    assert len(emulator.state()["payouts"]) == 1


async def test_a_bank_account_still_goes_by_the_bank_rail(sessionmaker, swish) -> None:
    _, settings = swish
    rail = RailByAccount(provider.SimulatedProvider(), swish_payouts.SwishPayouts(settings))
    account = PayoutAccount(kind="iban", number="NO9386011117947", holder="K")
    payment = await payment_of(sessionmaker, (await swish_deal(sessionmaker, settings)).deal_id)
    outcome = await rail.pay_out(payment, account, idempotency_key=str(payment.id))
    assert outcome is provider.PayoutOutcome.PAID  # the sandbox's bank rail, not Swish


async def test_reconcile_compares_each_swish_payout_with_swishs_record(sessionmaker, swish) -> None:
    from datetime import timedelta

    from sqlalchemy import update

    from dealbroker.core import clock
    from dealbroker.payments import reconciliation
    from dealbroker.payments.models import ProviderCall

    emulator, settings = swish
    emulator.callbacks(send=False)
    since = clock.now() - timedelta(seconds=1)
    d = await swish_deal(sessionmaker, settings)
    await make_pending_calls(sessionmaker, settings)
    emulator.wait_settled()
    await due_now(sessionmaker, d.deal_id)
    await SwishPayoutPollJob(sessionmaker, settings).run_once()
    until = clock.now() + timedelta(seconds=1)
    assert await reconciliation.reconcile(sessionmaker, settings, since, until) == []
    [call] = await payout_calls(sessionmaker, d.deal_id)
    async with sessionmaker() as session, session.begin():  # as if we had recorded a refusal
        await session.execute(
            update(ProviderCall).where(ProviderCall.id == call.id).values(status="failed")
        )
    [difference] = await reconciliation.reconcile(sessionmaker, settings, since, until)
    assert difference.line() == f"payout {call.id.hex.upper()}: failed here, PAID at Swish"


async def test_a_payout_made_after_the_moment_restored_to_is_named_and_never_made_twice(
    sessionmaker, swish
) -> None:
    """The database is restored to a moment before the buyer approved: Swish paid the seller
    after it, and our rows no longer say so. Reconcile names the payout Swish made (its id is
    the payment's first payout's, known before it is made), and the payout decided again has
    that same id: Swish's instruction is found and followed, and the seller is paid once."""
    from datetime import timedelta

    from sqlalchemy import delete, update

    from dealbroker.core import clock
    from dealbroker.deals.models import Deal
    from dealbroker.payments import reconciliation
    from dealbroker.payments import service as payments
    from dealbroker.payments.models import Payment, ProviderCall
    from tests.payments.swish_deals import SSN, SWISH_NUMBER, approved, in_deal, paid_sek_deal

    emulator, settings = swish
    emulator.callbacks(send=False)
    since = clock.now() - timedelta(seconds=1)
    d = await paid_sek_deal(sessionmaker)
    payee = payments.SwishPayee(SSN, settings)
    await in_deal(
        sessionmaker,
        d.deal_id,
        lambda s, deal: payments.register_payout_account(
            s, deal, SWISH_NUMBER, "Karin Svensson", payee
        ),
    )
    at_t = await d.status()
    await approved(sessionmaker, d.deal_id, settings)
    await make_pending_calls(sessionmaker, settings)
    emulator.wait_settled()
    await due_now(sessionmaker, d.deal_id)
    await SwishPayoutPollJob(sessionmaker, settings).run_once()
    [made] = await payout_calls(sessionmaker, d.deal_id)
    assert (await payment_of(sessionmaker, d.deal_id)).status == "PaidOut"

    # The rows as the restore to T leaves them: approved, paid out and the call undone.
    async with sessionmaker() as session, session.begin():
        await session.execute(delete(ProviderCall).where(ProviderCall.deal_id == d.deal_id))
        await session.execute(
            update(Payment)
            .where(Payment.deal_id == d.deal_id)
            .values(status="Paid", paid_out_minor=0)
        )
        await session.execute(
            update(Deal).where(Deal.id == d.deal_id).values(status=at_t, payment_status="Paid")
        )
    until = clock.now() + timedelta(seconds=1)
    payment = await payment_of(sessionmaker, d.deal_id)
    [named] = await reconciliation.reconcile(sessionmaker, settings, since, until)
    assert named.line() == (
        f"payout {made.id.hex.upper()}: PAID at Swish (SEK {payment.payout_minor / 100:.2f} to "
        f"{PAYEE_ALIAS}), missing here (our payment {payment.id}, Paid here)"
    )

    # The buyer approves again (or the deadline passes again): the same payout, found at Swish.
    await approved(sessionmaker, d.deal_id, settings)
    await make_pending_calls(sessionmaker, settings)
    [again] = await payout_calls(sessionmaker, d.deal_id)
    assert (again.id, again.status) == (made.id, "submitted")
    await due_now(sessionmaker, d.deal_id)
    assert await SwishPayoutPollJob(sessionmaker, settings).run_once() == 1
    paid = await payment_of(sessionmaker, d.deal_id)
    assert paid.status == "PaidOut"
    assert len(emulator.state()["payouts"]) == 1  # the seller was paid once
    assert await reconciliation.reconcile(sessionmaker, settings, since, until) == []


async def test_a_payout_swish_paid_after_we_recorded_it_refused_is_recorded_as_its_own(
    sessionmaker, swish
) -> None:
    """Swish paid an instruction whose call we hold refused: ``payments record-made`` takes
    that call's own instruction only, checks it at Swish (paid, to the seller's number, of the
    payout due) and records it; reconcile is clean after."""
    import uuid
    from datetime import timedelta

    from sqlalchemy import update

    from dealbroker.core import clock
    from dealbroker.core.errors import Conflict
    from dealbroker.payments import reconciliation
    from dealbroker.payments.models import Payment, ProviderCall
    from dealbroker.payments.service import CallKind

    emulator, settings = swish
    emulator.callbacks(send=False)
    since = clock.now() - timedelta(seconds=1)
    d = await swish_deal(sessionmaker, settings)
    await make_pending_calls(sessionmaker, settings)
    emulator.wait_settled()
    [call] = await payout_calls(sessionmaker, d.deal_id)
    async with sessionmaker() as session, session.begin():  # as if its answer had been a refusal
        await session.execute(
            update(ProviderCall).where(ProviderCall.id == call.id).values(status="failed")
        )
        await session.execute(
            update(Payment).where(Payment.deal_id == d.deal_id).values(status="PayoutFailed")
        )
    own = call.id.hex.upper()

    with pytest.raises(Conflict, match=f"Swish knows this payout as {own}"):
        await reconciliation.record_made(
            sessionmaker, settings, d.deal_id, CallKind.PAYOUT, uuid.uuid4().hex
        )
    done = await reconciliation.record_made(
        sessionmaker, settings, d.deal_id, CallKind.PAYOUT, str(call.id)
    )

    payment = await payment_of(sessionmaker, d.deal_id)
    assert payment.status == "PaidOut"
    assert done.checked == f"Swish payout {own}: PAID, SEK {payment.payout_minor / 100:.2f}"
    [recorded] = await payout_calls(sessionmaker, d.deal_id)
    assert (recorded.status, recorded.provider_ref) == ("succeeded", own)
    until = clock.now() + timedelta(seconds=1)
    assert await reconciliation.reconcile(sessionmaker, settings, since, until) == []
    assert len(emulator.state()["payouts"]) == 1


# --- review fixes: paid once, refusals, start-up ----------------------------------------------


async def test_a_retry_finds_the_payout_whose_answer_was_lost_whatever_the_create_says(
    sessionmaker, swish, monkeypatch
) -> None:
    """The first create is made but its answer is lost; the retry's create would be refused
    with a code that is not Swish's duplicate one: the retry asks Swish first and finds it."""
    emulator, settings = swish
    emulator.callbacks(send=False)
    monkeypatch.setattr(swish_tls, "TIMEOUT", httpx.Timeout(1.0))
    emulator.fail("hang", hang_seconds=3)
    d = await swish_deal(sessionmaker, settings)
    await make_pending_calls(sessionmaker, settings)
    [call] = await payout_calls(sessionmaker, d.deal_id)
    assert call.status == "pending"
    emulator.fail("422", code="RP08")  # what a second create would be answered
    await due_now(sessionmaker, d.deal_id)
    await make_pending_calls(sessionmaker, settings)
    [call] = await payout_calls(sessionmaker, d.deal_id)
    assert call.status == "submitted"
    assert (await payment_of(sessionmaker, d.deal_id)).status == "PendingPayOut"
    assert len(emulator.state()["payouts"]) == 1


async def test_any_4xx_to_the_create_asks_swish_before_refusing(sessionmaker, swish) -> None:
    emulator, settings = swish
    emulator.callbacks(send=False)
    emulator.fail("422", made=True, code="PA99")  # taken by Swish, the answer garbled
    d = await swish_deal(sessionmaker, settings)
    await make_pending_calls(sessionmaker, settings)
    [call] = await payout_calls(sessionmaker, d.deal_id)
    assert call.status == "submitted"
    emulator.wait_settled()
    await due_now(sessionmaker, d.deal_id)
    await SwishPayoutPollJob(sessionmaker, settings).run_once()
    assert (await payment_of(sessionmaker, d.deal_id)).status == "PaidOut"
    assert len(emulator.state()["payouts"]) == 1


async def test_a_certificate_swish_refuses_leaves_the_payout_waiting_and_pays_it_once(
    sessionmaker, swish, monkeypatch
) -> None:
    """Swish took the first create (its answer lost), then refuses our certificate (403) when
    asked whether it has it: no answer is no refusal, since a refused payout can be made again
    under a new id while Swish holds the first. The call waits, and once Swish answers again
    the first instruction is found, submitted and settled: the seller is paid once."""
    from dealbroker.core import clock

    emulator, settings = swish
    emulator.callbacks(send=False)
    monkeypatch.setattr(swish_tls, "TIMEOUT", httpx.Timeout(1.0))
    emulator.fail("hang", hang_seconds=3)
    d = await swish_deal(sessionmaker, settings)
    await make_pending_calls(sessionmaker, settings)
    emulator.fail("403", method=None)
    await due_now(sessionmaker, d.deal_id)
    await make_pending_calls(sessionmaker, settings)
    [call] = await payout_calls(sessionmaker, d.deal_id)
    assert call.status == "pending"
    assert "will not say" in (call.error or "")
    assert call.next_attempt_at > clock.now()
    assert (await payment_of(sessionmaker, d.deal_id)).status == "PendingPayOut"
    emulator.wait_settled()
    await due_now(sessionmaker, d.deal_id)
    await make_pending_calls(sessionmaker, settings)
    [call] = await payout_calls(sessionmaker, d.deal_id)
    assert call.status == "submitted"
    [made] = emulator.state()["payouts"]
    assert made["status"] == "PAID"
    assert made["payoutInstructionUUID"] == call.id.hex.upper()


async def test_an_identity_number_that_cannot_be_read_asks_the_seller_again(
    sessionmaker, swish
) -> None:
    emulator, settings = swish
    d = await swish_deal(sessionmaker, settings)
    rotated = settings.model_copy(update={"secret_key": "rotated-" + "r" * 40})
    await make_pending_calls(sessionmaker, rotated)
    [call] = await payout_calls(sessionmaker, d.deal_id)
    assert call.status == "failed"
    assert PAYEE_SSN not in (call.error or "")
    assert (await payment_of(sessionmaker, d.deal_id)).status == "PayoutFailed"
    reason = swish_payouts.seller_reason(call.error) or ""
    assert "personal identity number again" in reason
    assert emulator.state()["payouts"] == []


async def test_reconciliation_locks_no_payment(sessionmaker, swish, db_url) -> None:
    """The provider-call job locks a deal, then its payment; reconciliation only reads, so it
    goes on while a payment is locked (were it to lock, on PostgreSQL it would wait here)."""
    import asyncio
    from datetime import timedelta

    from dealbroker.core import clock
    from dealbroker.deals import repository as deal_rows
    from dealbroker.payments import reconciliation, repository

    emulator, settings = swish
    emulator.callbacks(send=False, delay=600)  # Swish's CREATED, as ours
    since = clock.now() - timedelta(seconds=1)
    d = await swish_deal(sessionmaker, settings)
    await make_pending_calls(sessionmaker, settings)
    until = clock.now() + timedelta(seconds=1)
    payment = await payment_of(sessionmaker, d.deal_id)
    if db_url.startswith("sqlite"):
        return  # SQLite has no row locks to wait on
    async with sessionmaker() as holder, holder.begin():
        await deal_rows.by_id_for_update(holder, d.deal_id)
        await repository.payment(holder, payment.id)
        found = await asyncio.wait_for(
            reconciliation.reconcile(sessionmaker, settings, since, until), timeout=10
        )
    assert found == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"environment": "production", "base_url": "http://deals.example"}, "HTTPS only"),
        ({"swish_merchant_number": "46701234567"}, "123 followed by 7 digits"),
    ],
)
def test_start_refuses_what_the_pay_in_refuses(
    swish: tuple[Any, Settings], change: dict[str, str], expected: str
) -> None:
    _, settings = swish
    problem = swish_payouts.startup_problem(settings.model_copy(update=change)) or ""
    assert expected in problem
    assert "\n" not in problem


def test_the_signing_key_is_checked_in_the_sandbox_too(swish, tmp_path) -> None:
    emulator, settings = swish
    loose = tmp_path / "loose-signing-key.pem"
    loose.write_bytes((emulator.certs / "signing-key.pem").read_bytes())
    loose.chmod(0o644)
    problem = swish_payouts.startup_problem(
        settings.model_copy(update={"swish_payout_signing_key_file": str(loose)})
    )
    assert "DEALBROKER_SWISH_PAYOUT_SIGNING_KEY_FILE" in (problem or "")
    assert "group or others" in (problem or "")
    other = settings.model_copy(
        update={"swish_payout_signing_key_file": str(emulator.certs / "client-key.pem")}
    )
    assert "is not the key of" in (swish_payouts.startup_problem(other) or "")


def test_the_certificates_dates_are_the_apps_clock(swish, tmp_path) -> None:
    """A signing certificate valid from next week is refused today and taken once the app's
    clock (the sandbox's, a test's) says it is next week."""
    from datetime import timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    from dealbroker.core import clock

    emulator, settings = swish
    key = serialization.load_pem_private_key(
        (emulator.certs / "signing-key.pem").read_bytes(), password=None
    )
    assert isinstance(key, rsa.RSAPrivateKey)
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "next week")])
    today = clock.now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(today + timedelta(days=7))
        .not_valid_after(today + timedelta(days=100))
        .sign(key, hashes.SHA256())
    )
    cert_file = tmp_path / "next-week.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    next_week = settings.model_copy(
        update={
            "swish_payout_signing_cert_file": str(cert_file),
            "swish_payout_signing_serial": f"{cert.serial_number:X}",
        }
    )
    assert "not valid before" in (swish_payouts.startup_problem(next_week) or "")
    clock.set_clock(lambda: today + timedelta(days=8))  # the transport certificate lasts 30
    try:
        assert swish_payouts.startup_problem(next_week) is None
    finally:
        clock.reset_clock()


async def test_the_callback_address_is_the_pay_ins(sessionmaker, swish) -> None:
    emulator, settings = swish
    emulator.callbacks(send=False)
    own = settings.model_copy(update={"swish_callback_base_url": "https://callbacks.example/"})
    await swish_deal(sessionmaker, own)
    await make_pending_calls(sessionmaker, own)
    [made] = emulator.state()["payouts"]
    assert made["callbackUrl"] == "https://callbacks.example/payments/v1/swish/payout-callback"


@pytest.mark.parametrize("typed", ["070-123 45 67", "+46 70 123 45 67", "0711234567", "12345"])
def test_the_payer_and_the_payee_number_follow_one_rule(typed: str) -> None:
    from dealbroker.payments.swish import payer_alias

    try:
        payee = swish_payouts.normalise_number(typed)
    except FieldError:
        payee = None
    assert payer_alias(typed) == payee
