"""An emulator of Swish's Commerce API (payment requests and refunds) for the tests:
``python -m tests.payments.swish_emulator API_PORT CONTROL_PORT CERT_DIR`` serves the API over
HTTPS on 127.0.0.1, requiring a client certificate issued by the test CA (as Swish requires the
merchant's), and its control endpoints over plain HTTP on another loopback port. A test part:
nothing in production answers with it (``DEALBROKER_SWISH_API_BASE`` points at it in tests only).

It follows Swish's developer documentation, as read on 2026-12-06:

- Payment request v2: ``PUT /swish-cpcapi/api/v2/paymentrequests/{instructionUUID}`` (32
  upper-case hex; body ``payeePaymentReference``, ``callbackUrl``, ``payerAlias`` (optional:
  without it an M-commerce request, answered with a ``PaymentRequestToken`` header),
  ``payeeAlias``, ``amount``, ``currency``, ``message``, ``callbackIdentifier``); 201 with
  ``Location``; ``GET`` and ``PATCH`` (cancel, ``application/json-patch+json``) under
  ``/api/v1/paymentrequests/{id}``: https://developer.swish.nu/api/payment-request/v2
- Refunds v2: ``PUT /swish-cpcapi/api/v2/refunds/{instructionUUID}`` (``originalPaymentReference``,
  ``callbackUrl``, ``payerAlias``, ``amount``, ``currency``), ``GET /api/v1/refunds/{id}``:
  https://developer.swish.nu/api/refunds/v2
- Callbacks: the object POSTed to ``callbackUrl`` with our ``callbackIdentifier`` as a header.
- Errors: 422 with ``[{"errorCode", "errorMessage", "additionalInformation"}]``: ``RP01``
  (payee alias missing), ``RP03`` (callback URL missing or not HTTPS), ``AM02`` (amount too
  large), ``AM03`` (currency), ``AM06`` (amount too small), ``BE18`` (payer alias invalid),
  ``ACMT03`` (payer not enrolled), ``RP09`` (instruction UUID taken), ``RF02`` (original
  payment not found), ``RF06`` (refunding more than paid); ``ERROR`` statuses ``TM01`` (not
  answered within 3 minutes), ``RF07`` (declined), ``BANKIDCL`` (the payer cancelled BankID):
  https://developer.swish.nu/documentation/error-codes

Where the pages are silent it chooses, plainly: a loopback ``http://`` callback URL is
accepted (the tests' server speaks plain HTTP); a payee alias other than the client
certificate's common name is answered 403; cancelling a request that is not ``CREATED`` is
answered 422 ``RP07``; a refund is ``VALIDATED`` when made and ``PAID`` (with its callback)
half a second later, unless the control says otherwise; the payer numbers ending ``0000`` are
not enrolled.

Control endpoints (JSON), tests only, on the control port under ``/_emulator/``:
``pay``/``decline``/``error``/``expire`` ``{"id", "code"?}`` settle a request and send its
callback (``pay`` with ``"callback": false``: a callback lost on the way); ``callback`` ``{"id",
"identifier"?, "status"?}`` sends a (duplicate or forged) callback again; ``fail`` ``{"mode":
"429"|"500"|"503"|"hang"|"lost"|"huge", "count", "path", "method"?}`` makes the next API
requests fail (``lost``: the request is done, then answered 504, as when its answer is lost on
the way; ``huge``: an endless-looking answer); ``refunds`` ``{"mode": "pay"|"error"|"hold"}``
decides how refunds end; ``GET requests``, ``GET refunds``, ``GET identifiers`` (the
``callbackIdentifier`` of each request), ``GET log``; ``reset``.

With a fourth argument, ``PAYOUTS_CONTROL_PORT``, it serves Swish's Payouts API too, under the
same address (``tests.payments.swish_payouts_emulator``, its payer alias this merchant's number,
its signing certificate ``CERT_DIR/signing.pem``), with that emulator's controls on that port.
"""

import asyncio
import json
import re
import secrets
import ssl
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from tests.payments import swish_payouts_emulator

API = "/swish-cpcapi/api"
EXPIRES_SECONDS = 180
_ID = re.compile(r"^[0-9A-F]{32}$")


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def errors(status: int, *codes: tuple[str, str]) -> web.Response:
    body = [{"errorCode": c, "errorMessage": m, "additionalInformation": None} for c, m in codes]
    return web.json_response(body, status=status)


@dataclass
class Failure:
    mode: str
    count: int
    path: str
    method: str | None = None


@dataclass
class State:
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    identifiers: dict[str, str] = field(default_factory=dict)
    created_at: dict[str, float] = field(default_factory=dict)
    refunds: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    refund_mode: str = "pay"
    log: list[dict[str, Any]] = field(default_factory=list)


def _amount(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return None
    return amount if amount == amount.quantize(Decimal("0.01")) else None


class Emulator:
    def __init__(self, merchant: str) -> None:
        self.state = State()
        self.merchant = merchant
        self.tasks: set[asyncio.Task[None]] = set()

    # --- the API ---------------------------------------------------------------------------

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.state.log.append({"method": request.method, "path": request.path})
        for failure in self.state.failures:
            if (
                failure.count > 0
                and request.path.startswith(failure.path)
                and failure.method in (None, request.method)
            ):
                failure.count -= 1
                if failure.mode == "lost":  # done, but its answer never reaches the caller
                    await handler(request)
                    return web.Response(status=504)
                if failure.mode == "huge":  # an answer far longer than any of Swish's
                    return await self._huge(request)
                if failure.mode == "hang":
                    await asyncio.sleep(30)
                if failure.mode == "429":
                    return web.Response(status=429, headers={"Retry-After": "1"})
                return web.Response(status=int(failure.mode) if failure.mode != "hang" else 504)
        self._expire()
        return await handler(request)

    async def _huge(self, request: web.Request) -> web.StreamResponse:
        """A body of 8 MB, sent in chunks without a length, as a broken proxy might."""
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            for _ in range(128):
                await asyncio.sleep(0.01)  # the reader's closing has time to arrive
                if request.transport is None or request.transport.is_closing():
                    raise ConnectionResetError
                await response.write(b" " * 65536)
        except (ConnectionError, RuntimeError):
            self.state.log.append({"huge": request.path, "cut": True})
            return response
        self.state.log.append({"huge": request.path, "cut": False})
        await response.write_eof()
        return response

    def _cert_name(self, request: web.Request) -> str | None:
        cert = request.transport.get_extra_info("peercert") if request.transport else None
        for rdn in (cert or {}).get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    return str(value)
        return None

    def _expire(self) -> None:
        loop = asyncio.get_running_loop()
        for ident, made in list(self.state.created_at.items()):
            obj = self.state.requests[ident]
            if obj["status"] == "CREATED" and loop.time() - made > EXPIRES_SECONDS:
                self._settle(
                    ident, "ERROR", "TM01", "Swish timed out before the payment was started"
                )

    async def create(self, request: web.Request) -> web.Response:
        ident = request.match_info["id"]
        if not _ID.match(ident):
            return errors(422, ("RP02", "Wrong formatted message: instructionUUID"))
        try:
            body = await request.json()
        except ValueError:
            return web.Response(status=400)
        if not isinstance(body, dict):
            return web.Response(status=400)
        payee = body.get("payeeAlias")
        if not payee:
            return errors(422, ("RP01", "Missing Merchant Swish Number"))
        if payee != self._cert_name(request):
            return web.Response(status=403, text="payeeAlias does not match the certificate")
        found = self._common(body)
        if found is not None:
            return found
        payer = body.get("payerAlias")
        if payer is not None and (not isinstance(payer, str) or not re.match(r"^\d{8,15}$", payer)):
            return errors(422, ("BE18", "Payer alias is invalid"))
        if isinstance(payer, str) and payer.endswith("0000"):
            return errors(422, ("ACMT03", "Payer not Enrolled"))
        if ident in self.state.requests:
            return errors(422, ("RP09", "The given instructionUUID is not available"))
        self.state.requests[ident] = {
            "id": ident,
            "payeePaymentReference": body.get("payeePaymentReference"),
            "paymentReference": None,
            "callbackUrl": body["callbackUrl"],
            "payerAlias": payer,
            "payeeAlias": payee,
            "amount": float(Decimal(str(body["amount"]))),
            "currency": "SEK",
            "message": body.get("message"),
            "status": "CREATED",
            "dateCreated": now_iso(),
            "datePaid": None,
            "errorCode": None,
            "errorMessage": None,
        }
        self.state.identifiers[ident] = str(body.get("callbackIdentifier") or "")
        self.state.created_at[ident] = asyncio.get_running_loop().time()
        base = f"https://{request.host}{API}"
        headers = {"Location": f"{base}/v1/paymentrequests/{ident}"}
        if payer is None:
            headers["PaymentRequestToken"] = secrets.token_urlsafe(24)
        return web.Response(status=201, headers=headers)

    def _common(self, body: dict[str, Any]) -> web.Response | None:
        callback = body.get("callbackUrl")
        if not isinstance(callback, str) or not (
            callback.startswith("https://") or callback.startswith("http://127.0.0.1:")
        ):
            return errors(422, ("RP03", "Callback URL is missing or does not use HTTPS"))
        if body.get("currency") != "SEK":
            return errors(422, ("AM03", "Invalid or missing Currency"))
        amount = _amount(body.get("amount"))
        if amount is None or amount < Decimal("1.00"):
            return errors(422, ("AM06", "Specified transaction amount is less than agreed minimum"))
        if amount > Decimal("999999999999.99"):
            return errors(422, ("AM02", "Amount value is too large"))
        return None

    async def retrieve(self, request: web.Request) -> web.Response:
        found = self.state.requests.get(request.match_info["id"])
        return web.Response(status=404) if found is None else web.json_response(found)

    async def cancel(self, request: web.Request) -> web.Response:
        found = self.state.requests.get(request.match_info["id"])
        if found is None:
            return web.Response(status=404)
        if request.content_type != "application/json-patch+json":
            return web.Response(status=415)
        patch = await request.json()
        if patch != [{"op": "replace", "path": "/status", "value": "cancelled"}]:
            return web.Response(status=400)
        if found["status"] != "CREATED":
            return errors(422, ("RP07", "Transaction declined: the request cannot be cancelled"))
        found["status"] = "CANCELLED"
        return web.json_response(found)

    async def refund(self, request: web.Request) -> web.Response:
        ident = request.match_info["id"]
        if not _ID.match(ident):
            return errors(422, ("RP02", "Wrong formatted message: instructionUUID"))
        body = await request.json()
        if not isinstance(body, dict):
            return web.Response(status=400)
        if body.get("payerAlias") != self._cert_name(request):
            return web.Response(status=403, text="payerAlias does not match the certificate")
        found = self._common(body)
        if found is not None:
            return found
        if ident in self.state.refunds:
            return errors(422, ("RP09", "The given instructionUUID is not available"))
        original = next(
            (
                r
                for r in self.state.requests.values()
                if r["status"] == "PAID"
                and r["paymentReference"] == body.get("originalPaymentReference")
            ),
            None,
        )
        if original is None:
            return errors(422, ("RF02", "Original Payment not found"))
        refunded = sum(
            Decimal(str(r["amount"]))
            for r in self.state.refunds.values()
            if r["originalPaymentReference"] == original["paymentReference"]
            and r["status"] != "ERROR"
        )
        amount = Decimal(str(body["amount"]))
        if refunded + amount > Decimal(str(original["amount"])):
            return errors(422, ("RF06", "The refund is larger than what is left of the payment"))
        self.state.refunds[ident] = {
            "id": ident,
            "paymentReference": None,
            "payerPaymentReference": body.get("payerPaymentReference"),
            "originalPaymentReference": original["paymentReference"],
            "callbackUrl": body["callbackUrl"],
            "payerAlias": body["payerAlias"],
            "payeeAlias": original["payerAlias"],
            "amount": float(amount),
            "currency": "SEK",
            "message": body.get("message"),
            "status": "VALIDATED",
            "dateCreated": now_iso(),
            "datePaid": None,
            "errorCode": None,
            "errorMessage": None,
        }
        if self.state.refund_mode != "hold":
            self._spawn(self._finish_refund(ident, self.state.refund_mode))
        base = f"https://{request.host}{API}"
        return web.Response(status=201, headers={"Location": f"{base}/v1/refunds/{ident}"})

    async def _finish_refund(self, ident: str, mode: str) -> None:
        await asyncio.sleep(0.5)
        refund = self.state.refunds[ident]
        if mode == "error":
            refund.update(status="ERROR", errorCode="RF07", errorMessage="Transaction declined")
        else:
            refund.update(
                status="PAID", paymentReference=secrets.token_hex(16).upper(), datePaid=now_iso()
            )
        await self._post(refund, None)

    async def retrieve_refund(self, request: web.Request) -> web.Response:
        found = self.state.refunds.get(request.match_info["id"])
        return web.Response(status=404) if found is None else web.json_response(found)

    # --- settling and callbacks ------------------------------------------------------------

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _settle(
        self,
        ident: str,
        status: str,
        code: str | None = None,
        message: str | None = None,
        *,
        callback: bool = True,
    ) -> dict[str, Any]:
        obj = self.state.requests[ident]
        obj["status"] = status
        if status == "PAID":
            obj["paymentReference"] = secrets.token_hex(16).upper()
            obj["datePaid"] = now_iso()
            obj["payerAlias"] = obj["payerAlias"] or "46701234567"
        obj["errorCode"], obj["errorMessage"] = code, message
        if callback:
            self._spawn(self._post(obj, self.state.identifiers.get(ident)))
        return obj

    async def _post(
        self, obj: dict[str, Any], identifier: str | None, status: str | None = None
    ) -> None:
        body = dict(obj, status=status or obj["status"])
        headers = {"callbackIdentifier": identifier} if identifier else {}
        try:
            async with httpx.AsyncClient(timeout=10) as client:
                answer = await client.post(obj["callbackUrl"], json=body, headers=headers)
            self.state.log.append({"callback": obj["id"], "status": answer.status_code})
        except httpx.HTTPError as exc:
            self.state.log.append({"callback": obj["id"], "error": repr(exc)})

    # --- control ---------------------------------------------------------------------------

    async def control_settle(self, request: web.Request) -> web.Response:
        body = await request.json()
        ident = body["id"]
        if ident not in self.state.requests:
            return web.json_response({"error": "no such request"}, status=404)
        action = request.match_info["action"]
        if action == "pay":
            obj = self._settle(ident, "PAID", callback=body.get("callback", True))
        elif action == "decline":
            obj = self._settle(ident, "DECLINED")
        elif action == "expire":
            obj = self._settle(
                ident, "ERROR", "TM01", "Swish timed out before the payment was started"
            )
        else:
            code = body.get("code", "RF07")
            obj = self._settle(ident, "ERROR", code, body.get("message", "Transaction declined"))
        return web.json_response(obj)

    async def control_callback(self, request: web.Request) -> web.Response:
        body = await request.json()
        obj = self.state.requests.get(body["id"]) or self.state.refunds.get(body["id"])
        if obj is None:
            obj = {
                "id": body["id"],
                "callbackUrl": body["url"],
                "status": body.get("status", "PAID"),
                "amount": body.get("amount", 1.0),
                "currency": "SEK",
            }
        identifier = body.get("identifier", self.state.identifiers.get(body["id"]))
        await self._post(obj, identifier, body.get("status"))
        return web.json_response(self.state.log[-1])

    async def control_fail(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.state.failures.append(
            Failure(
                str(body["mode"]),
                int(body.get("count", 1)),
                body.get("path", API),
                body.get("method"),
            )
        )
        return web.json_response({"ok": True})

    async def control_refunds(self, request: web.Request) -> web.Response:
        self.state.refund_mode = (await request.json())["mode"]
        return web.json_response({"ok": True})

    async def listing(self, request: web.Request) -> web.Response:
        what = request.match_info["what"]
        if what == "requests":
            return web.json_response(list(self.state.requests.values()))
        if what == "refunds":
            return web.json_response(list(self.state.refunds.values()))
        if what == "identifiers":
            return web.json_response(self.state.identifiers)
        return web.json_response(self.state.log)

    async def reset(self, request: web.Request) -> web.Response:
        self.state = State()
        return web.json_response({"ok": True})

    def api(self) -> web.Application:
        app = web.Application(middlewares=[self.middleware], client_max_size=64 * 1024)
        app.add_routes(
            [
                web.put(f"{API}/v2/paymentrequests/{{id}}", self.create),
                web.get(f"{API}/v1/paymentrequests/{{id}}", self.retrieve),
                web.patch(f"{API}/v1/paymentrequests/{{id}}", self.cancel),
                web.put(f"{API}/v2/refunds/{{id}}", self.refund),
                web.get(f"{API}/v1/refunds/{{id}}", self.retrieve_refund),
            ]
        )
        return app

    def control(self) -> web.Application:
        app = web.Application()
        app.add_routes(
            [
                web.post("/_emulator/{action:pay|decline|error|expire}", self.control_settle),
                web.post("/_emulator/callback", self.control_callback),
                web.post("/_emulator/fail", self.control_fail),
                web.post("/_emulator/refunds", self.control_refunds),
                web.get("/_emulator/{what:requests|refunds|identifiers|log}", self.listing),
                web.post("/_emulator/reset", self.reset),
            ]
        )
        return app


async def serve(
    api_port: int, control_port: int, certs: Path, payouts_control_port: int | None = None
) -> None:
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(certs / "server.pem", certs / "server.key")
    tls.load_verify_locations(certs / "ca.pem")
    tls.verify_mode = ssl.CERT_REQUIRED  # no merchant certificate, no answer
    emulator = Emulator(json.loads((certs / "merchant.json").read_text())["merchant"])
    api = emulator.api()
    apps = [(api, api_port, tls), (emulator.control(), control_port, None)]
    if payouts_control_port is not None:
        # Swish's Payouts API beside the payment requests, under the same address and merchant
        # certificate, as Swish serves them: one deployment both takes and pays out by Swish.
        payouts = swish_payouts_emulator.Emulator(certs, merchant=emulator.merchant)
        payouts.serve_on(api)
        apps.append((payouts.controls(), payouts_control_port, None))
    runners = []
    for app, port, context in apps:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()
        runners.append(runner)
    await asyncio.Event().wait()


def main() -> None:
    payouts = int(sys.argv[4]) if len(sys.argv) > 4 else None
    asyncio.run(serve(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), payouts))


if __name__ == "__main__":
    main()
