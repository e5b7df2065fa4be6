"""An emulator of Vipps MobilePay for the tests: ``python -m tests.payments.vipps_emulator PORT``
serves, on 127.0.0.1 only, the requests and answers of Vipps MobilePay's published documentation
that ``dealbroker.payments.vipps`` uses. A test part: nothing in production answers with it.

It follows these pages, as read on 2026-12-06:

- Access token API, ``POST /accesstoken/get`` (headers ``client_id``, ``client_secret``,
  ``Ocp-Apim-Subscription-Key``, ``Merchant-Serial-Number``; answers ``token_type``,
  ``expires_in`` as a string, ``access_token``):
  https://developer.vippsmobilepay.com/docs/APIs/access-token-api/
- ePayment API v1: create (``Idempotency-Key`` required; answers ``redirectUrl`` and
  ``reference``), get (``state``, ``amount``, ``aggregate``, ``paymentMethod.type``), capture,
  cancel, refund (``modificationAmount``), errors as problem JSON (``type``, ``title``,
  ``status``, ``detail``):
  https://developer.vippsmobilepay.com/docs/APIs/epayment-api/api-guide/operations/create
  and the checklist's list of states and events
  https://developer.vippsmobilepay.com/downloads/epayment-api/epayment-checklist.pdf
- Webhooks API request authentication (HMAC-SHA256 over method, path and query, x-ms-date, host
  and the body's SHA-256): https://developer.vippsmobilepay.com/docs/APIs/webhooks-api/request-authentication/
- Reservations, capture after the reservation lapsed refused with 400:
  https://developer.vippsmobilepay.com/docs/knowledge-base/reserve-and-capture/

and the Report API 2.0, as seen on 2026-12-07 (https://developer.vippsmobilepay.com/api/report):

- ``GET /settlement/v1/ledgers?settlesForRecipientHandles=api:{MSN}``: the ledger that settles
  the sales unit (``ledgerId``, ``currency``, ``payoutBankAccount``, ``owner``,
  ``settlesForRecipientHandles``; ``cursor``), and ``GET /report/v2/ledgers/{ledgerId}/funds/
  dates/{ledgerDate}``: the date's funds entries (``items``; ``cursor`` to the next page, empty
  on the last; ``tryLater`` while the date is not closed; 404 while there is no report), same
  token and headers as the ePayment API:
  https://developer.vippsmobilepay.com/docs/APIs/report-api/api-guide/fetching-report-data/
- Each capture and refund is an entry (``pspReference``, ``time`` with its offset,
  ``ledgerDate``, ``entryType``, ``reference``, ``currency``, ``amount`` signed as it moves the
  balance, ``balanceBefore``, ``balanceAfter``, ``recipientHandle`` ``api:<MSN>``):
  https://developer.vippsmobilepay.com/docs/APIs/report-api/api-guide/entry-types/

Where the pages are silent it chooses, plainly: the landing page is a form with "approve",
"reject" buttons (a buyer who never presses either abandons it); cancelling a ``CREATED`` payment
makes it ``TERMINATED``; cancelling an ``AUTHORIZED`` one releases what is not captured (the state
stays ``AUTHORIZED``, a ``CANCELLED`` event is sent), also after a partial capture, as the cancel
page says ("You can cancel at any time while there are remaining authorized funds":
https://developer.vippsmobilepay.com/docs/APIs/epayment-api/api-guide/operations/cancel/), and is
refused (400) when nothing remains reserved; a repeated modification with the same idempotency key
answers as the first did. A lapsed reservation is one Vipps cancelled: its ``GET`` shows what was
not captured as cancelled. The funds ledger starts empty at a balance of 0 (reset with the
payments) and books entries at once (Vipps's trail a second or so); its ledger dates are days in
Europe/Oslo. A report page holds ``PAGE_SIZE`` entries, so a cursor is followed with few. A date
after today has no report (404); today's answers ``tryLater`` with the entries so far until a
test closes it; an earlier date is closed.

Control endpoints (JSON), for the tests only, under ``/_emulator/``:

- ``POST /_emulator/webhook`` ``{"url", "secret"}``: where events go, signed with ``secret``.
- ``POST /_emulator/decide`` ``{"reference", "action": "approve"|"reject"|"expire"|"lapse",
  "method": "WALLET"|"CARD"}``: what a buyer (or time) does without a browser. ``lapse``: the
  reservation is gone (a capture is refused with 400, the ``GET`` shows it cancelled).
- ``POST /_emulator/send`` ``{"reference", "name", "signature": "good"|"bad"|"stale"}``: send
  an event for a payment (again: a duplicate); answers the receiver's status.
- ``POST /_emulator/fail`` ``{"mode": "429"|"500"|"503"|"hang"|"401"|"403"|"400"|
  "capture-first", "count", "path", "retry_after", "hang_seconds"}``: the next ``count`` API
  requests under ``path`` fail so (any status as a problem answer); ``capture-first``: before
  the request is answered, what the payment has reserved is captured, as a capture racing it;
  ``{"clear": true}`` forgets the failures not yet used.
- ``POST /_emulator/close`` ``{"date": "yyyy-mm-dd"}``: the ledger date is closed (no
  ``tryLater``).
- ``GET /_emulator/ledger``: the funds entries, and how many report pages were served.
- ``GET /_emulator/payments``: every payment with its modifications; ``POST /_emulator/reset``.
"""

import asyncio
import base64
import hashlib
import hmac
import json
import sys
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from email.utils import format_datetime
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

from aiohttp import ClientError, ClientSession, ClientTimeout, web

CLIENT_ID = "emulator-client-id"
CLIENT_SECRET = "emulator-client-secret-0123456789"
SUBSCRIPTION_KEY = "emulator-subscription-key-0123456789"
MSN = "123456"
WEBHOOK_SECRET = "emulator-webhook-secret-0123456789abcdef"
LEDGER_ID = "302321"
LEDGER_ZONE = ZoneInfo("Europe/Oslo")
PAGE_SIZE = 2


@dataclass
class Pay:
    reference: str
    amount: int
    currency: str
    return_url: str
    state: str = "CREATED"
    method: str | None = None
    authorized: int = 0
    cancelled: int = 0
    captured: int = 0
    refunded: int = 0
    lapsed: bool = False
    log: list[str] = field(default_factory=list)

    def body(self) -> dict[str, Any]:
        money = lambda v: {"currency": self.currency, "value": v}  # noqa: E731
        return {
            "reference": self.reference,
            "state": self.state,
            "amount": money(self.amount),
            "aggregate": {
                "authorizedAmount": money(self.authorized),
                "cancelledAmount": money(self.cancelled),
                "capturedAmount": money(self.captured),
                "refundedAmount": money(self.refunded),
            },
            "paymentMethod": {"type": self.method or "WALLET"},
            "pspReference": f"psp-{self.reference}",
        }


class State:
    def __init__(self, base: str) -> None:
        self.base = base
        self.reset()

    def reset(self) -> None:
        self.payments: dict[str, Pay] = {}
        self.creates: dict[str, dict[str, Any]] = {}  # idempotency key -> answer
        self.modifications: dict[str, tuple[int, dict[str, Any]]] = {}
        self.tokens: set[str] = set()
        self.tokens_issued = 0
        self.failures: list[dict[str, Any]] = []
        self.hook: tuple[str, str] | None = None
        self.ledger: list[dict[str, Any]] = []
        self.balance = 0
        self.closed: set[str] = set()
        self.report_pages = 0

    def book(self, pay: Pay, entry_type: str, amount: int) -> None:
        """A funds entry for money ``pay`` moved: ``amount`` signed as it moves the balance."""
        now = datetime.now(LEDGER_ZONE)
        before, self.balance = self.balance, self.balance + amount
        self.ledger.append(
            {
                "pspReference": f"psp-{uuid.uuid4().hex[:16]}",
                "time": now.strftime("%Y-%m-%dT%H:%M:%S.%f%z"),
                "ledgerDate": now.date().isoformat(),
                "entryType": entry_type,
                "reference": pay.reference,
                "currency": pay.currency,
                "amount": amount,
                "balanceBefore": before,
                "balanceAfter": self.balance,
                "recipientHandle": f"api:{MSN}",
            }
        )


def problem(status: int, detail: str) -> web.Response:
    return web.json_response(
        {"type": "about:blank", "title": detail, "status": status, "detail": detail},
        status=status,
        content_type="application/problem+json",
    )


def signed_headers(url: str, body: bytes, secret: str, when: datetime) -> dict[str, str]:
    parts = urlsplit(url)
    date = format_datetime(when, usegmt=True)
    content = base64.b64encode(hashlib.sha256(body).digest()).decode()
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    signed = f"POST\n{path}\n{date};{parts.netloc};{content}"
    mac = base64.b64encode(hmac.new(secret.encode(), signed.encode(), hashlib.sha256).digest())
    return {
        "x-ms-date": date,
        "x-ms-content-sha256": content,
        "Authorization": "HMAC-SHA256 SignedHeaders=x-ms-date;host;x-ms-content-sha256"
        f"&Signature={mac.decode()}",
        "Content-Type": "application/json",
    }


async def send_event(state: State, pay: Pay, name: str, signature: str = "good") -> int | None:
    if state.hook is None:
        return None
    url, secret = state.hook
    body = json.dumps(
        {
            "msn": MSN,
            "reference": pay.reference,
            "pspReference": f"psp-{uuid.uuid4().hex[:12]}",
            "name": name,
            "amount": {"currency": pay.currency, "value": pay.amount},
            "timestamp": datetime.now(UTC).isoformat(),
            "success": True,
        }
    ).encode()
    when = datetime.now(UTC)
    if signature == "stale":
        when = when.replace(year=when.year - 1)
    headers = signed_headers(url, body, secret if signature != "bad" else "not-the-secret", when)
    try:
        async with ClientSession(timeout=ClientTimeout(total=10)) as http:
            async with http.post(url, data=body, headers=headers) as answer:
                return answer.status
    except (ClientError, TimeoutError):
        return None


def app(state: State) -> web.Application:
    routes = web.RouteTableDef()

    @web.middleware
    async def failures(request: web.Request, handler: Any) -> web.StreamResponse:
        if not request.path.startswith(("/_emulator", "/landing")):
            for failure in state.failures:
                if failure["count"] > 0 and request.path.startswith(failure["path"]):
                    failure["count"] -= 1
                    mode = failure["mode"]
                    if mode == "capture-first":
                        racing = state.payments.get(request.match_info.get("ref", ""))
                        if racing is not None and racing.state == "AUTHORIZED":
                            reserved = racing.authorized - racing.cancelled - racing.captured
                            racing.captured += reserved
                            racing.log.append(f"capture:{reserved}:racing")
                            state.book(racing, "capture", reserved)
                        return await handler(request)
                    if mode == "hang":
                        answer = await handler(request)  # done, answered late
                        await asyncio.sleep(failure["hang_seconds"])
                        return answer
                    headers = {"Retry-After": str(failure["retry_after"])} if mode == "429" else {}
                    return web.json_response(
                        {"title": "emulated failure"}, status=int(mode), headers=headers
                    )
        return await handler(request)

    def authorized(request: web.Request) -> bool:
        bearer = request.headers.get("Authorization", "").removeprefix("Bearer ")
        return (
            bearer in state.tokens
            and request.headers.get("Ocp-Apim-Subscription-Key") == SUBSCRIPTION_KEY
            and request.headers.get("Merchant-Serial-Number") == MSN
            and bool(request.headers.get("Vipps-System-Name"))
        )

    @routes.post("/accesstoken/get")
    async def token(request: web.Request) -> web.Response:
        h = request.headers
        if (h.get("client_id"), h.get("client_secret"), h.get("Ocp-Apim-Subscription-Key")) != (
            CLIENT_ID,
            CLIENT_SECRET,
            SUBSCRIPTION_KEY,
        ):
            return problem(401, "invalid client")
        value = uuid.uuid4().hex
        state.tokens.add(value)
        state.tokens_issued += 1
        return web.json_response(
            {"token_type": "Bearer", "expires_in": "3600", "access_token": value}
        )

    @routes.post("/epayment/v1/payments")
    async def create(request: web.Request) -> web.Response:
        if not authorized(request):
            return problem(401, "unauthorized")
        key = request.headers.get("Idempotency-Key")
        if not key:
            return problem(400, "Idempotency-Key is required")
        if key in state.creates:
            return web.json_response(state.creates[key], status=201)
        body = await request.json()
        ref = body.get("reference")
        amount = body.get("amount") or {}
        if (
            not isinstance(ref, str)
            or not 8 <= len(ref) <= 64
            or body.get("userFlow") not in ("WEB_REDIRECT", "NATIVE_REDIRECT")
            or not str(body.get("returnUrl", "")).startswith("http")
            or not isinstance(amount.get("value"), int)
            or amount["value"] <= 0
        ):
            return problem(400, "invalid payment request")
        if ref in state.payments:
            return problem(409, "reference already used")
        state.payments[ref] = Pay(ref, amount["value"], amount["currency"], body["returnUrl"])
        answer = {"redirectUrl": f"{state.base}/landing/{ref}", "reference": ref}
        state.creates[key] = answer
        return web.json_response(answer, status=201)

    @routes.get("/epayment/v1/payments/{ref}")
    async def get(request: web.Request) -> web.Response:
        if not authorized(request):
            return problem(401, "unauthorized")
        pay = state.payments.get(request.match_info["ref"])
        if pay is None:
            return problem(404, "payment not found")
        return web.json_response(pay.body())

    @routes.post("/epayment/v1/payments/{ref}/{action}")
    async def modify(request: web.Request) -> web.Response:
        if not authorized(request):
            return problem(401, "unauthorized")
        key = request.headers.get("Idempotency-Key")
        if not key:
            return problem(400, "Idempotency-Key is required")
        if key in state.modifications:
            status, body = state.modifications[key]
            return web.json_response(body, status=status)
        pay = state.payments.get(request.match_info["ref"])
        if pay is None:
            return problem(404, "payment not found")
        action = request.match_info["action"]
        sent = await request.json() if request.can_read_body else {}
        value = (sent.get("modificationAmount") or {}).get("value") if sent else None
        refusal = None
        event = None
        if action == "capture":
            if pay.state != "AUTHORIZED" or pay.lapsed:
                refusal = "the payment cannot be captured (reservation expired or not authorized)"
            elif (
                not isinstance(value, int) or value > pay.authorized - pay.cancelled - pay.captured
            ):
                refusal = "capture amount exceeds the reserved amount"
            else:
                pay.captured += value
                state.book(pay, "capture", value)
                event = "CAPTURED"
        elif action == "refund":
            if not isinstance(value, int) or value > pay.captured - pay.refunded:
                refusal = "refund amount exceeds the captured amount"
            else:
                pay.refunded += value
                state.book(pay, "refund", -value)
                event = "REFUNDED"
        elif action == "cancel":
            if pay.state == "CREATED":
                pay.state = "TERMINATED"
                event = "TERMINATED"
            elif pay.state == "AUTHORIZED" and pay.authorized - pay.cancelled - pay.captured > 0:
                pay.cancelled = pay.authorized - pay.captured
                event = "CANCELLED"
            else:
                refusal = f"a payment in state {pay.state} cannot be cancelled"
        else:
            return problem(404, "no such operation")
        if refusal is not None:
            return problem(400, refusal)
        pay.log.append(f"{action}:{value}:{key}")
        body = pay.body()
        state.modifications[key] = (200, body)
        if event is not None:
            asyncio.create_task(send_event(state, pay, event))
        return web.json_response(body)

    @routes.get("/settlement/v1/ledgers")
    async def ledgers(request: web.Request) -> web.Response:
        if not authorized(request):
            return problem(401, "unauthorized")
        handle = f"api:{MSN}"
        wanted = request.query.getall("settlesForRecipientHandles", [])
        item = {
            "ledgerId": LEDGER_ID,
            "currency": "NOK",
            "payoutBankAccount": {"scheme": "BBAN:NO", "id": "86011117947"},
            "owner": {"scheme": "business:NO:ORG", "id": "987654321"},
            "settlesForRecipientHandles": [handle],
        }
        return web.json_response(
            {"cursor": "", "items": [item] if not wanted or handle in wanted else []}
        )

    @routes.get("/report/v2/ledgers/{ledger}/funds/dates/{day}")
    async def funds(request: web.Request) -> web.Response:
        if not authorized(request):
            return problem(401, "unauthorized")
        if request.match_info["ledger"] != LEDGER_ID:
            return problem(404, "ledger not found")
        try:
            day = date.fromisoformat(request.match_info["day"])
        except ValueError:
            return problem(400, "ledgerDate must be yyyy-MM-dd")
        today = datetime.now(LEDGER_ZONE).date()
        if day > today:
            return problem(404, "no report for this date yet")
        cursor = request.query.get("cursor", "o0")
        if not cursor.startswith("o") or not cursor[1:].isdigit():
            return problem(400, "invalid cursor")
        offset = int(cursor[1:])
        items = [e for e in state.ledger if e["ledgerDate"] == day.isoformat()]
        following = offset + PAGE_SIZE
        state.report_pages += 1
        return web.json_response(
            {
                "cursor": f"o{following}" if following < len(items) else "",
                "items": items[offset:following],
                "tryLater": day == today and day.isoformat() not in state.closed,
            }
        )

    async def decide(pay: Pay, action: str, method: str = "WALLET") -> None:
        if action == "lapse":  # Vipps cancelled the reservation (or the bank released it)
            pay.lapsed = True
            pay.cancelled = pay.authorized - pay.captured
            return
        if pay.state != "CREATED":
            return
        if action == "approve":
            pay.state, pay.method, pay.authorized = "AUTHORIZED", method, pay.amount
        elif action == "reject":
            pay.state = "ABORTED"
        elif action == "expire":
            pay.state = "EXPIRED"
        await send_event(state, pay, pay.state)

    @routes.get("/landing/{ref}")
    async def landing(request: web.Request) -> web.Response:
        pay = state.payments.get(request.match_info["ref"])
        if pay is None:
            return web.Response(status=404, text="unknown payment")
        html = (
            f"<form method='post'><p>{pay.amount} {pay.currency}</p>"
            "<button name='action' value='approve'>Approve</button>"
            "<button name='action' value='reject'>Reject</button></form>"
        )
        return web.Response(text=html, content_type="text/html")

    @routes.post("/landing/{ref}")
    async def landing_post(request: web.Request) -> web.Response:
        pay = state.payments.get(request.match_info["ref"])
        if pay is None:
            return web.Response(status=404, text="unknown payment")
        form = await request.post()
        await decide(pay, str(form.get("action")), str(form.get("method") or "WALLET"))
        raise web.HTTPSeeOther(pay.return_url)

    @routes.post("/_emulator/webhook")
    async def hook(request: web.Request) -> web.Response:
        body = await request.json()
        state.hook = (body["url"], body.get("secret", WEBHOOK_SECRET))
        return web.json_response({})

    @routes.post("/_emulator/decide")
    async def decide_route(request: web.Request) -> web.Response:
        body = await request.json()
        pay = state.payments[body["reference"]]
        await decide(pay, body["action"], body.get("method", "WALLET"))
        return web.json_response(pay.body())

    @routes.post("/_emulator/send")
    async def send(request: web.Request) -> web.Response:
        body = await request.json()
        pay = state.payments[body["reference"]]
        status = await send_event(state, pay, body["name"], body.get("signature", "good"))
        return web.json_response({"status": status})

    @routes.post("/_emulator/fail")
    async def fail(request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("clear"):
            state.failures.clear()
            return web.json_response({})
        state.failures.append(
            {
                "mode": str(body["mode"]),
                "count": int(body.get("count", 1)),
                "path": body.get("path", "/"),
                "retry_after": int(body.get("retry_after", 1)),
                "hang_seconds": float(body.get("hang_seconds", 5)),
            }
        )
        return web.json_response({})

    @routes.post("/_emulator/close")
    async def close(request: web.Request) -> web.Response:
        body = await request.json()
        state.closed.add(date.fromisoformat(body["date"]).isoformat())
        return web.json_response({})

    @routes.get("/_emulator/ledger")
    async def ledger(request: web.Request) -> web.Response:
        return web.json_response({"entries": state.ledger, "report_pages": state.report_pages})

    @routes.get("/_emulator/payments")
    async def listing(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "payments": {r: {**p.body(), "log": p.log} for r, p in state.payments.items()},
                "tokens_issued": state.tokens_issued,
            }
        )

    @routes.post("/_emulator/reset")
    async def reset(request: web.Request) -> web.Response:
        state.reset()
        return web.json_response({})

    application = web.Application(middlewares=[failures], client_max_size=64 * 1024)
    application.add_routes(routes)
    return application


def main() -> None:
    port = int(sys.argv[1])
    web.run_app(app(State(f"http://127.0.0.1:{port}")), host="127.0.0.1", port=port, print=None)


if __name__ == "__main__":
    main()
