"""Sellers paid to a Swish number, with real processes: ``dealbroker serve`` on SQLite (its
embedded worker) and ``serve`` beside ``dealbroker worker`` on PostgreSQL, against the Swish
payouts emulator (its own process on loopback, behind mutual TLS). The seller gives the Swish
number on their page (served by the server); the buyer's approval completes the deal; the
worker makes the signed payout; Swish's callback, confirmed by the server's ``GET``, settles it:

- one seller's number and personal identity number match: ``PaidOut``, amount less fee;
- one seller's personal identity number is not the number owner's: ``PayoutFailed``, and the
  seller's page says why;
- a forged callback (``PAID`` for a payout Swish has not paid) is refused and changes nothing;
  a callback for an unknown instruction is refused; Swish's callback sent again is
  acknowledged and not applied twice.

The pay-in is the sandbox's simulated provider: this is about the payout.
"""

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from dealbroker.core.settings import Settings
from dealbroker.payments.models import Payment
from tests.payments.swish_deals import (
    PAYEE_ALIAS,
    PAYEE_SSN,
    SellerPage,
    approved,
    paid_sek_deal,
    payment_of,
    payout_calls,
)
from tests.processes import FIRE_TIMEOUT, Server, Worker, free_port, run_on, wait_until

pytestmark = pytest.mark.server

SECRET_KEY = "swish-payouts-processes-" + "k" * 32
CALLBACK = "/payments/v1/swish/payout-callback"


def _settings(db_url: str, emulator: Any, base: str) -> Settings:
    return Settings(
        database_url=db_url,
        environment="sandbox",
        **emulator.values(DEALBROKER_BASE_URL=base, DEALBROKER_SECRET_KEY=SECRET_KEY),  # type: ignore[arg-type]
    )


def _payment(db_url: str, deal_id: uuid.UUID) -> Payment:
    return run_on(db_url, lambda sm: payment_of(sm, deal_id))  # type: ignore[no-any-return]


def _paid_deal(db_url: str) -> uuid.UUID:
    return run_on(db_url, lambda sm: paid_sek_deal(sm)).deal_id  # type: ignore[no-any-return]


def _settled(db_url: str, deal_id: uuid.UUID, status: str) -> Payment:
    wait_until(
        lambda: _payment(db_url, deal_id).status == status,
        FIRE_TIMEOUT,
        f"the payout to be {status}",
        interval=0.2,
    )
    return _payment(db_url, deal_id)


def _prove(db_url: str, emulator: Any, base: str) -> None:
    settings = _settings(db_url, emulator, base)
    emulator.reset()
    emulator.enrol(PAYEE_ALIAS, PAYEE_SSN)

    # --- the seller gives a Swish number on their page; the deal completes; Swish pays ---
    deal_id = _paid_deal(db_url)
    page = SellerPage(db_url, settings, deal_id)
    html = page.get()
    assert 'data-payout-form="swish"' in html
    assert 'data-payout-form="bank"' in html
    refused = page.give_swish("08-123 456 78", "19811218-9876")
    assert refused.status_code == 400
    assert 'data-field-error="swish"' in refused.text
    assert "9876" not in refused.text  # the personal identity number is never written back
    refused = page.give_swish("070-123 45 67", "19811218-9875")
    assert 'data-field-error="ssn"' in refused.text
    saved = page.give_swish("070-123 45 67", "19811218-9876")
    assert saved.status_code in (200, 303), saved.text
    html = page.get()
    assert 'data-payout-account="swish"' in html
    assert "ending 4567" in html
    assert "ending 9876" in html
    assert "198112189876" not in html
    run_on(db_url, lambda sm: approved(sm, deal_id, settings))
    paid = _settled(db_url, deal_id, "PaidOut")
    assert paid.paid_out_minor == paid.amount_minor - paid.fee_minor  # no shipping: pickup
    [call] = run_on(db_url, lambda sm: payout_calls(sm, deal_id))
    [made] = emulator.state()["payouts"]
    assert made["payoutInstructionUUID"] == call.id.hex.upper()
    assert (made["payeeAlias"], made["status"]) == (PAYEE_ALIAS, "PAID")
    assert made["amount"] == f"{paid.paid_out_minor / 100:.2f}"
    assert call.status == "succeeded"
    assert call.rail == "swish"
    assert "paid out</strong> to your Swish number" in page.get()
    # Swish's callback sent again: acknowledged, applied once.
    again = httpx.post(f"{base}{CALLBACK}", json=made, timeout=15)
    assert again.status_code == 200
    assert again.json()["outcome"] == "duplicate"
    assert _payment(db_url, deal_id).paid_out_minor == paid.paid_out_minor

    # --- a personal identity number that is not the owner's: PayoutFailed, the seller told ---
    failing = _paid_deal(db_url)
    page = SellerPage(db_url, settings, failing)
    assert page.give_swish("+46 70 123 45 67", "19900101-0017").status_code in (200, 303)
    run_on(db_url, lambda sm: approved(sm, failing, settings))
    failed = _settled(db_url, failing, "PayoutFailed")
    assert failed.paid_out_minor == 0
    [call] = run_on(db_url, lambda sm: payout_calls(sm, failing))
    assert call.status == "failed"
    assert "VR02" in (call.error or "")
    html = page.get()
    assert "data-payout-failure" in html
    assert "the Swish number&#39;s owner" in html or "the Swish number's owner" in html

    # --- a forged callback: PAID for a payout Swish has not paid ---
    emulator.callbacks(send=False, delay=600)
    held = _paid_deal(db_url)
    page = SellerPage(db_url, settings, held)
    assert page.give_swish("0701234567", "19811218-9876").status_code in (200, 303)
    run_on(db_url, lambda sm: approved(sm, held, settings))
    wait_until(
        lambda: (
            [c.status for c in run_on(db_url, lambda sm: payout_calls(sm, held))] == ["submitted"]
        ),
        FIRE_TIMEOUT,
        "the worker to submit the payout",
        interval=0.2,
    )
    [call] = run_on(db_url, lambda sm: payout_calls(sm, held))
    forged = {
        "payoutInstructionUUID": call.id.hex.upper(),
        "status": "PAID",
        "amount": f"{_payment(db_url, held).payout_minor / 100:.2f}",
        "currency": "SEK",
        "payeeAlias": PAYEE_ALIAS,
    }
    answer = httpx.post(f"{base}{CALLBACK}", json=forged, timeout=15)
    assert answer.status_code == 400
    assert _payment(db_url, held).status == "PendingPayOut"
    unknown = {**forged, "payoutInstructionUUID": uuid.uuid4().hex.upper()}
    assert httpx.post(f"{base}{CALLBACK}", json=unknown, timeout=15).status_code == 400
    assert httpx.post(f"{base}{CALLBACK}", content=b"{" * 20, timeout=15).status_code == 400
    assert _payment(db_url, held).status == "PendingPayOut"
    assert len(emulator.state()["payouts"]) == 3  # one instruction per payout, never two


def _env(emulator: Any, port: int) -> dict[str, str]:
    return emulator.settings(  # type: ignore[no-any-return]
        DEALBROKER_BASE_URL=f"http://127.0.0.1:{port}", DEALBROKER_SECRET_KEY=SECRET_KEY
    )


def test_serve_on_sqlite_pays_sellers_by_swish(tmp_path: Path, swish_payouts_emulator: Any) -> None:
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'swish.db'}"
    port = free_port()
    server = Server(db_url, tmp_path, port=port, **_env(swish_payouts_emulator, port))
    try:
        _prove(db_url, swish_payouts_emulator, server.base)
    finally:
        server.stop()
        (tmp_path / "serve.log").write_text(server.output())


def test_serve_and_worker_on_postgresql_pay_sellers_by_swish(
    pg_url: str, tmp_path: Path, swish_payouts_emulator: Any
) -> None:
    port = free_port()
    settings = _env(swish_payouts_emulator, port)
    server = Server(pg_url, tmp_path, port=port, DEALBROKER_EMBEDDED_WORKER="off", **settings)
    worker = Worker(pg_url, tmp_path, **settings)
    try:
        worker.wait_ready()
        _prove(pg_url, swish_payouts_emulator, server.base)
    finally:
        worker.close()
        server.stop()
        (tmp_path / "serve.log").write_text(server.output())
        (tmp_path / "worker.log").write_text(worker.output())
