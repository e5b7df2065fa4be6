"""The API's request log: each integration's requests of the last ``api_request_log_days``.

What a request leaves: its integration, method, route template (``/deals/v1/deals/{dealId}``,
never the path), the deal its path named (for support), status, request id (the response's
``X-Request-Id``), time and duration. Never its body, query string, headers or token.

An events poll that found nothing (``GET /events/v1/events`` answered 200 with no event) leaves
no row: a follower such as ``dealbroker listen`` asks every second, and its idle polls would
crowd every other request out of the log. A poll that found events, and every refusal, does.

Whose a request is, ``core.callers`` says: the integration its token (or a sandbox trigger's
webhook secret) authenticated, or, for a token request, the one whose client id it names; a
request that names no one (a made-up token, a made-up client id) is not recorded.

Cheap on the request's path: ``RecordRequests`` appends one tuple to this process's
``RequestLog`` after the response has gone, and ``core.buffered`` writes the pending rows every
``api_request_log_flush_seconds`` and at shutdown, in one insert; a full buffer drops (counted,
with a warning) rather than making a request wait.
"""

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dealbroker.core import callers, clock
from dealbroker.core.buffered import Buffer
from dealbroker.core.request_log import NOT_RECORDED, STATUS
from dealbroker.core.request_metrics import RouteTemplates
from dealbroker.integrations import repository
from dealbroker.integrations.models import ApiRequest

log = logging.getLogger("dealbroker.http")

MAX_PENDING = 20_000
# The status classes a reader may filter by, each as the statuses it holds (to excluded).
STATUS_CLASSES = {"2xx": (200, 300), "4xx": (400, 500), "5xx": (500, 600)}

# Whose (an integration's id, or a client id to look up), when (seconds since the epoch),
# method, route template, the path's deal id as sent, status, request id, duration in
# microseconds.
Entry = tuple[uuid.UUID | str, float, str, str, str | None, int, str, int]


class RequestLog(Buffer[list[Entry]]):
    """This process's requests not yet written."""

    what = "api requests"
    log = log

    def __init__(self, max_pending: int = MAX_PENDING) -> None:
        super().__init__(max_pending)

    def note(self, entry: Entry) -> None:
        if len(self._pending) >= self.max_pending:
            self._drop()
            return
        self._pending.append(entry)

    def _empty(self) -> list[Entry]:
        return []

    def _size(self, pending: list[Entry]) -> int:
        return len(pending)

    def _merge(self, older: list[Entry]) -> None:
        room = self.max_pending - len(self._pending)
        if room > 0:
            self._pending[:0] = older[-room:]

    async def _write(self, session: AsyncSession, pending: list[Entry]) -> None:
        client_ids = {e[0] for e in pending if isinstance(e[0], str)}
        ids = await repository.ids_by_client_id(session, client_ids) if client_ids else {}
        rows: list[dict[str, object]] = []
        for who, at, method, route, deal_id, status, request_id, duration_us in pending:
            integration_id = ids.get(who) if isinstance(who, str) else who
            if integration_id is None:  # a client id no integration has
                continue
            rows.append(
                {
                    "integration_id": integration_id,
                    "at": datetime.fromtimestamp(at, UTC),
                    "method": method,
                    "route": route[:200],
                    "deal_id": _deal_id(deal_id),
                    "status": status,
                    "request_id": request_id,
                    "duration_us": duration_us,
                }
            )
        if rows:
            await repository.add_api_requests(session, rows)


def _deal_id(value: str | None) -> uuid.UUID | None:
    """The deal id a path named, read at the flush, off the request's path."""
    if value is None:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:  # a malformed id: the request's 400 says so, the log keeps the route
        return None


class RecordRequests:
    """ASGI middleware: each request an integration made, noted in ``requests`` once its
    response has gone (or failed). Inside the request log's middleware, whose request id it
    records, and whose note of the answer's status it reads (``core.request_log.STATUS``)
    rather than wrapping the answer again; outside it (a benchmark), it reads the status
    itself."""

    def __init__(self, app: ASGIApp, requests: RequestLog) -> None:
        self.app = app
        self.requests = requests
        self.template = RouteTemplates()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        at = time.time()
        started = time.perf_counter()
        state = scope.get("state")
        if state is None or "request_id" not in state:
            state = scope.setdefault("state", {})
            send = _noting_status(send, state)

        try:
            await self.app(scope, receive, send)
        finally:
            who = callers.caller(scope)
            if who is not None and not state.get(NOT_RECORDED):
                self.requests.note(
                    (
                        who,
                        at,
                        scope["method"][:10],
                        self.template(scope),
                        scope.get("path_params", {}).get("dealId"),
                        state.get(STATUS, 500),
                        state.get("request_id", ""),
                        int((time.perf_counter() - started) * 1_000_000),
                    )
                )


def _noting_status(send: Send, state: dict[str, Any]) -> Send:
    """``send``, noting the answer's status in ``state`` as the request log's middleware does."""

    async def send_noting_status(message: Message) -> None:
        if message["type"] == "http.response.start":
            state[STATUS] = message["status"]
        await send(message)

    return send_noting_status


@dataclass(frozen=True)
class RequestPage:
    requests: list[ApiRequest]
    total: int


async def list_requests(
    session: AsyncSession,
    integration_id: uuid.UUID,
    *,
    keep_days: int,
    status_class: str | None = None,
    route: str | None = None,
    page: int = 1,
    size: int = 20,
    now: datetime | None = None,
) -> RequestPage:
    """The integration's requests of the last ``keep_days`` days (up to ``now``), newest first,
    a page at a time; ``status_class`` one of ``STATUS_CLASSES``, ``route`` a route template."""
    since = (now or clock.now()) - timedelta(days=keep_days)
    statuses = None if status_class is None else STATUS_CLASSES[status_class]
    total = await repository.count_api_requests(session, integration_id, since, statuses, route)
    offset = (page - 1) * size
    found = (
        []
        if offset >= total
        else await repository.api_request_page(
            session, integration_id, since, statuses, route, offset, size
        )
    )
    return RequestPage(found, total)


async def purge(session: AsyncSession, before: datetime, limit: int) -> int:
    """Delete one batch of the requests from before ``before``; returns how many went."""
    return await repository.purge_api_requests(session, before, limit)
