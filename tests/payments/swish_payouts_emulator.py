"""An emulator of Swish's Payouts API for the tests: ``python -m tests.payments.swish_payouts_emulator
API_PORT CONTROL_PORT CERT_DIR`` serves, on 127.0.0.1 only, the payout requests and answers of
Swish's published documentation that ``dealbroker.payments.swish_payouts`` uses. It is a test
part: nothing in production ever answers with it (``DEALBROKER_SWISH_API_BASE`` points at it
only in tests).

It follows these pages, as seen on 2026-12-06:

- Payouts API v1: ``POST /swish-cpcapi/api/v1/payouts`` (``payload`` with
  ``payoutInstructionUUID``, ``payerPaymentReference``, ``payerAlias``, ``payeeAlias``,
  ``payeeSSN``, ``amount``, ``currency``, ``payoutType``, ``message``, ``instructionDate``,
  ``signingCertificateSerialNumber``; ``callbackUrl``; ``signature``) answering 201 with
  ``Location``, or 4xx with ``[{"errorCode", "errorMessage", "additionalInformation"}]``;
  ``GET /swish-cpcapi/api/v1/payouts/{payoutInstructionUUID}`` (the payout object, its
  ``status`` CREATED, DEBITED, PAID or ERROR, ``errorCode``/``errorMessage``); the callback to
  ``callbackUrl`` with the same object once it is PAID or ERROR:
  https://developer.swish.nu/api/payouts/v1
- The signature (SHA-512 hash of the payload's JSON, signed RSA PKCS #1 v1.5 SHA-512, base64)
  and the error codes: https://developer.swish.nu/documentation/guides/create-a-payout and
  "User Guide Merchant Swish Simulator" v1.6 (2019-12-09), chapters 9-10.
- Mutual TLS: the API takes only a client certificate issued by Swish's CA (here, the test's
  CA): https://developer.swish.nu/documentation/certificates

Codes it answers with: ``PA02`` (amount not valid), ``AM03`` (currency not SEK), ``BE18`` (payee
alias not a Swedish mobile number), ``RP01`` (payer alias not the merchant's), ``RP09``
(a payoutInstructionUUID used already; HTTP 409), ``ACMT07`` (payee not enrolled in Swish;
by callback, ERROR), ``VR02`` (the payee's SSN is not the number owner's; by callback, ERROR).
Where the pages are silent it chooses, plainly: a payload whose signature does not verify, or
is missing, is refused with 422 and ``PA01`` ("Signature is not valid"); the payer alias must
be ``MERCHANT`` (or the merchant number the payment requests' emulator serves it beside, see
``tests.payments.swish_emulator``); enrolled payees are the ones the test registers; a payout is PAID (or ERROR)
``callback_delay`` seconds after it is created, and its callback sent then.

Control endpoints (JSON, plain HTTP on CONTROL_PORT, for the tests only), under ``/_emulator/``:

- ``POST /_emulator/payees`` ``{"alias": "467...", "ssn": "YYYYMMDDNNNN"}``: enrol a payee.
- ``POST /_emulator/fail`` ``{"mode": "429"|"500"|"503"|"401"|"403"|"422"|"hang", "count": N,
  "path": "/swish-cpcapi/api/v1/payouts", "hang_seconds": s, "method": "POST", "made": bool,
  "code": "..."}``: the next ``count`` API requests whose path starts with ``path`` (and of
  ``method``, if given) fail so; ``hang`` makes the payout and answers only after
  ``hang_seconds``; ``made`` makes the request all the same and answers with the failure (an
  answer lost or garbled on its way); a 4xx with ``code`` carries Swish's error list.
- ``POST /_emulator/callbacks`` ``{"send": true|false, "delay": s}``: whether (and how soon)
  callbacks are sent; a payout is settled all the same (``GET`` shows it).
- ``GET /_emulator/payouts``: every payout made (as ``GET`` shows it), with ``requests``, the
  number of create requests per instruction id, and ``callbacks``, our server's answers.
- ``POST /_emulator/reset``: forget payouts, payees, failures; callbacks on, delay 0.2 s.
"""

import asyncio
import base64
import hashlib
import json
import ssl
import sys
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, web
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

MERCHANT = "1234679304"  # the payer alias (the operator's Swish number for payouts)
BASE = "/swish-cpcapi/api/v1/payouts"
FIELDS = (
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
    "signingCertificateSerialNumber",
)


def _error(status: int, code: str, message: str) -> web.Response:
    body = [{"errorCode": code, "errorMessage": message, "additionalInformation": None}]
    return web.json_response(body, status=status)


class Emulator:
    def __init__(self, cert_dir: Path, merchant: str = MERCHANT) -> None:
        signing = x509.load_pem_x509_certificate((cert_dir / "signing.pem").read_bytes())
        self.signing_key = signing.public_key()
        self.signing_serial = f"{signing.serial_number:X}"
        self.merchant = merchant
        self.reset()

    def reset(self) -> None:
        self.payouts: dict[str, dict[str, Any]] = {}
        self.requests: dict[str, int] = {}
        self.callbacks: list[dict[str, Any]] = []
        self.payees: dict[str, str] = {}
        self.failures: list[dict[str, Any]] = []
        self.send_callbacks = True
        self.callback_delay = 0.2

    # --- the API ---------------------------------------------------------------------------

    def _failure(self, request: web.Request) -> dict[str, Any] | None:
        for failure in self.failures:
            if (
                request.path.startswith(failure["path"])
                and failure.get("method", request.method) == request.method
            ):
                failure["count"] -= 1
                if failure["count"] <= 0:
                    self.failures.remove(failure)
                return failure
        return None

    @web.middleware
    async def failing(self, request: web.Request, handler: Any) -> web.StreamResponse:
        failure = self._failure(request) if request.path.startswith("/swish-cpcapi") else None
        if failure is None:
            return await handler(request)
        mode = failure["mode"]
        if failure.get("made"):  # the request is made all the same; only its answer fails
            await handler(request)
        if mode == "hang":
            answer = await handler(request)  # made all the same
            await asyncio.sleep(failure.get("hang_seconds", 5))
            return answer
        if mode == "429":
            return web.Response(status=429, headers={"Retry-After": "1"})
        if 400 <= int(mode) < 500 and failure.get("code"):
            return _error(int(mode), failure["code"], "emulated refusal")
        return web.Response(status=int(mode), text="emulated failure")

    def _verify(self, payload: dict[str, Any], signature: Any) -> bool:
        if not isinstance(signature, str):
            return False
        data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        try:
            self.signing_key.verify(  # type: ignore[union-attr,call-arg]
                base64.b64decode(signature, validate=True),
                hashlib.sha512(data).digest(),
                padding.PKCS1v15(),  # type: ignore[arg-type]
                hashes.SHA512(),  # type: ignore[arg-type]
            )
        except (InvalidSignature, ValueError):
            return False
        return True

    async def create(self, request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.read())
        except ValueError:
            return _error(400, "PA01", "Body is not JSON")
        payload = body.get("payload") if isinstance(body, dict) else None
        if not isinstance(payload, dict) or any(
            not isinstance(payload.get(f), str) for f in FIELDS
        ):
            return _error(422, "PA01", "Parameter is not correct")
        if payload["signingCertificateSerialNumber"].upper() != self.signing_serial or not (
            self._verify(payload, body.get("signature"))
        ):
            return _error(422, "PA01", "Signature is not valid")
        instruction = payload["payoutInstructionUUID"]
        self.requests[instruction] = self.requests.get(instruction, 0) + 1
        if len(instruction) != 32 or instruction != instruction.upper():
            return _error(422, "PA01", "payoutInstructionUUID is not 32 upper-case hex digits")
        if instruction in self.payouts:
            return _error(409, "RP09", "The given payoutInstructionUUID is not available")
        if payload["payerAlias"] != self.merchant:
            return _error(422, "RP01", "Missing Merchant Swish Number")
        alias = payload["payeeAlias"]
        if not (alias.isdigit() and alias.startswith("467") and len(alias) == 11):
            return _error(422, "BE18", "Payee alias is invalid")
        if payload["currency"] != "SEK":
            return _error(422, "AM03", "Invalid or missing Currency")
        try:
            amount = Decimal(payload["amount"])
        except InvalidOperation:
            return _error(422, "PA02", "Amount value is missing or not a valid number")
        if amount < Decimal("1") or amount.as_tuple().exponent != -2:  # type: ignore[operator]
            return _error(422, "PA02", "Amount value is missing or not a valid number")
        now = datetime.now(UTC).isoformat()
        record = {
            "paymentReference": None,
            "payoutInstructionUUID": instruction,
            "payerPaymentReference": payload["payerPaymentReference"],
            "callbackUrl": body.get("callbackUrl"),
            "payerAlias": payload["payerAlias"],
            "payeeAlias": alias,
            "payeeSSN": payload["payeeSSN"],
            "amount": payload["amount"],
            "currency": "SEK",
            "message": payload["message"],
            "payoutType": payload["payoutType"],
            "status": "CREATED",
            "dateCreated": now,
            "datePaid": None,
            "errorMessage": None,
            "additionalInformation": None,
            "errorCode": None,
        }
        self.payouts[instruction] = record
        asyncio.get_running_loop().create_task(self._settle(instruction))
        location = f"https://{request.host}{BASE}/{instruction}"
        return web.Response(status=201, headers={"Location": location})

    async def _settle(self, instruction: str) -> None:
        await asyncio.sleep(self.callback_delay)
        record = self.payouts.get(instruction)
        if record is None:
            return
        enrolled = self.payees.get(record["payeeAlias"])
        if enrolled is None:
            record.update(status="ERROR", errorCode="ACMT07", errorMessage="Payee not Enrolled")
        elif enrolled != record["payeeSSN"]:
            record.update(
                status="ERROR",
                errorCode="VR02",
                errorMessage="The payee alias is not registered to the given SSN",
            )
        else:
            record.update(
                status="PAID",
                datePaid=datetime.now(UTC).isoformat(),
                paymentReference=instruction[:16] + "PAID",
            )
        if self.send_callbacks and record["callbackUrl"]:
            await self._callback(record)

    async def _callback(self, record: dict[str, Any]) -> None:
        try:
            async with ClientSession(timeout=ClientTimeout(total=30)) as session:
                async with session.post(record["callbackUrl"], json=record) as answer:
                    self.callbacks.append(
                        {"id": record["payoutInstructionUUID"], "status": answer.status}
                    )
        except (ClientError, TimeoutError) as exc:
            self.callbacks.append({"id": record["payoutInstructionUUID"], "error": repr(exc)})

    async def get(self, request: web.Request) -> web.Response:
        record = self.payouts.get(request.match_info["instruction"])
        if record is None:
            return web.Response(status=404)
        return web.json_response(record)

    def api(self) -> web.Application:
        app = web.Application()
        self.serve_on(app)
        return app

    def serve_on(self, app: web.Application) -> None:
        """The payouts API on ``app`` (its own, or the payment requests' emulator's, as Swish
        serves both under one Commerce API address)."""
        app.middlewares.append(self.failing)
        app.router.add_post(BASE, self.create)
        app.router.add_get(BASE + "/{instruction}", self.get)

    # --- the controls ------------------------------------------------------------------------

    async def control(self, request: web.Request) -> web.Response:
        what = request.match_info["what"]
        if request.method == "GET" and what == "payouts":
            return web.json_response(
                {
                    "payouts": list(self.payouts.values()),
                    "requests": self.requests,
                    "callbacks": self.callbacks,
                }
            )
        body = await request.json()
        if what == "payees":
            self.payees[body["alias"]] = body["ssn"]
        elif what == "fail":
            self.failures.append(
                {"path": BASE, "count": 1, **{k: v for k, v in body.items() if v is not None}}
            )
        elif what == "callbacks":
            self.send_callbacks = bool(body.get("send", True))
            self.callback_delay = float(body.get("delay", self.callback_delay))
        elif what == "reset":
            self.reset()
        else:
            return web.Response(status=404)
        return web.json_response({"ok": True})

    def controls(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/_emulator/{what}", self.control)
        return app


async def serve(api_port: int, control_port: int, cert_dir: Path) -> None:
    emulator = Emulator(cert_dir)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(cert_dir / "ca.pem"))
    tls.verify_mode = ssl.CERT_REQUIRED  # mutual TLS: no client certificate, no answer
    tls.load_cert_chain(cert_dir / "server.pem", cert_dir / "server-key.pem")
    api = web.AppRunner(emulator.api())
    controls = web.AppRunner(emulator.controls())
    await api.setup()
    await controls.setup()
    await web.TCPSite(api, "127.0.0.1", api_port, ssl_context=tls).start()
    await web.TCPSite(controls, "127.0.0.1", control_port).start()
    await asyncio.Event().wait()


def main() -> None:
    api_port, control_port, cert_dir = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    asyncio.run(serve(api_port, control_port, cert_dir))


if __name__ == "__main__":
    main()
