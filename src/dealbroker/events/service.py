"""Events: the one place they are emitted, and the integration's control over their delivery.

``emit`` writes the event and one delivery per subscribed endpoint in the caller's transaction
(the outbox): if the change that caused it rolls back, so does the event; once it commits, the
worker is woken to send it.
"""

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import event as orm_events
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from dealbroker.audit import service as audit
from dealbroker.audit.service import Actor
from dealbroker.core import clock, wakeup
from dealbroker.core.errors import BadRequest, Conflict, NotFound, found
from dealbroker.core.settings import Settings
from dealbroker.events import repository
from dealbroker.events.egress import EgressRefused, check_url
from dealbroker.events.envelope import (
    INTERFACE_KINDS,
    OPT_IN_KINDS,
    EventKind,
    envelope,
    webhook_test,
)
from dealbroker.events.models import Delivery, DeliveryAttempt, Event, WebhookEndpoint

MAX_ENDPOINTS = 20
# Why an endpoint is disabled, as its integration reads it (the back office translates them).
DISABLED_BY_INTEGRATION = "disabled by the integration"
DISABLED_BY_OPERATOR = "disabled by dealbroker's operators"
# The session's ``info`` key under which every event emitted in the transaction is listed.
EMITTED = "dealbroker_events"


async def emit(
    session: AsyncSession,
    integration_id: uuid.UUID,
    kind: EventKind,
    data: dict[str, Any],
    *,
    deal_id: uuid.UUID | None = None,
    endpoint_ids: list[uuid.UUID] | None = None,
) -> Event:
    """Record an event and queue it for every enabled endpoint that subscribes to its kind (or
    for ``endpoint_ids`` only). Call inside the transaction of the change it reports.

    An event about a deal gets the next number in that deal's sequence (``deal_sequence`` in
    its envelope): counting it locks the deal's row until the transaction ends, so the numbers
    follow the order the deal's changes commit in, with no gap and no repeat. An opt-in kind
    (``OPT_IN_KINDS``) takes no number: an integration that never subscribed to it must see no
    gap where one would have been."""
    now = clock.now()
    sequence = (
        None
        if deal_id is None or kind in OPT_IN_KINDS
        else await repository.next_in_deal(session, deal_id)
    )
    event = _event(integration_id, kind, data, now, deal_id, sequence)
    seq = await repository.add_event(session, event)
    targets = (
        endpoint_ids
        if endpoint_ids is not None
        else await repository.subscribed_endpoints(session, integration_id, kind.value)
    )
    await _queue(session, seq, integration_id, targets, now)
    emitted_now(session, event)
    return event


@dataclass(slots=True)
class NewEvent:
    """An event written by a statement of its own rather than by ``emit`` (a new deal's first,
    see ``first_of_deal``): ``Event``'s column values, not an ORM object, so building it costs
    a fraction of an ``Event``'s construction. ``seq`` is set once it is stored."""

    id: uuid.UUID
    integration_id: uuid.UUID
    deal_id: uuid.UUID | None
    deal_sequence: int | None
    kind: str
    payload: str
    created_at: datetime
    seq: int | None = None


def first_of_deal(
    integration_id: uuid.UUID,
    kind: EventKind,
    data: dict[str, Any],
    deal_id: uuid.UUID,
    now: datetime,
) -> NewEvent:
    """The first event of a deal being created, number 1 of its sequence, not stored yet: the
    statement that stores the new deal writes it and queues its deliveries in the same
    transaction (``deals.repository.add``), then ``emitted_now`` lists it."""
    return NewEvent(**_event_values(integration_id, kind, data, now, deal_id, 1))


def emitted_now(session: AsyncSession, event: Event | NewEvent) -> None:
    """List an event written without ``emit`` among the transaction's events."""
    session.info.setdefault(EMITTED, []).append(event)


def _event(
    integration_id: uuid.UUID,
    kind: EventKind,
    data: dict[str, Any],
    now: datetime,
    deal_id: uuid.UUID | None,
    sequence: int | None,
) -> Event:
    return Event(**_event_values(integration_id, kind, data, now, deal_id, sequence))


def _event_values(
    integration_id: uuid.UUID,
    kind: EventKind,
    data: dict[str, Any],
    now: datetime,
    deal_id: uuid.UUID | None,
    sequence: int | None,
) -> dict[str, Any]:
    """An event's columns (but ``seq``, the database's): its envelope serialised once."""
    event_id = uuid.uuid4()
    return {
        "id": event_id,
        "integration_id": integration_id,
        "deal_id": deal_id,
        "deal_sequence": sequence,
        "kind": kind.value,
        "payload": orjson.dumps(envelope(event_id, kind, now, data, sequence)).decode(),
        "created_at": now,
    }


def emitted(session: AsyncSession) -> list[Event | NewEvent]:
    """The events emitted so far in this session's transaction, in order."""
    return list(session.info.get(EMITTED, []))


@orm_events.listens_for(Session, "after_commit")
@orm_events.listens_for(Session, "after_rollback")
def _forget_emitted(session: Session) -> None:
    # The list describes one transaction; the next one on the same session starts empty.
    session.info.pop(EMITTED, None)


async def _queue(
    session: AsyncSession,
    seq: int,
    integration_id: uuid.UUID,
    endpoint_ids: list[uuid.UUID],
    now: datetime,
) -> None:
    if not endpoint_ids:
        return
    repository.add_deliveries(
        session,
        [
            Delivery(
                id=uuid.uuid4(),
                event_seq=seq,
                endpoint_id=endpoint_id,
                integration_id=integration_id,
                status="pending",
                attempts=0,
                next_attempt_at=now,
                created_at=now,
                updated_at=now,
            )
            for endpoint_id in endpoint_ids
        ],
    )
    await wakeup.mark(session, wakeup.DELIVERIES)


# --- webhook endpoints ----------------------------------------------------------------------


@dataclass(frozen=True)
class By:
    """A person's change (an operator in the back office or the server's CLI, or a member of
    the integration in the developer portal): recorded in the audit trail in the change's
    transaction. A change without one is the integration's own, through its API."""

    actor: Actor
    request_id: str | None = None
    # False for a member of the integration (the developer portal): its own change, which an
    # endpoint's disabling reason then names as the integration's.
    operator: bool = True

    async def record(
        self,
        session: AsyncSession,
        integration_id: uuid.UUID,
        action: str,
        target_type: str,
        target: object,
        *,
        before: object = None,
        after: object = None,
    ) -> None:
        """Audit this person's ``action`` on ``target``, in ``session``'s transaction: the
        record names the integration, whose owners read it in the developer portal."""
        await audit.record(
            session,
            self.actor,
            action,
            target_type,
            target,
            before=before,
            after=after,
            request_id=self.request_id,
            integration_id=integration_id,
        )


async def describe(session: AsyncSession, endpoint: WebhookEndpoint) -> dict[str, object]:
    """An endpoint as the audit trail keeps it (and the CLI prints the integration's client id
    with it)."""
    return {
        "id": endpoint.id,
        "clientId": await repository.client_id(session, endpoint.integration_id),
        "url": endpoint.url,
        "description": endpoint.description,
        "events": endpoint.event_kinds,
        "enabled": endpoint.enabled,
        "disabledReason": endpoint.disabled_reason,
        "failingSince": endpoint.failing_since,
    }


async def _record(
    session: AsyncSession,
    by: By | None,
    integration_id: uuid.UUID,
    action: str,
    target: object,
    before: object = None,
    after: object = None,
    target_type: str = "webhook_endpoint",
) -> None:
    """Audit ``by``'s action on the integration's endpoint (or event), if a person's."""
    if by is not None:
        await by.record(
            session, integration_id, action, target_type, target, before=before, after=after
        )


@dataclass(frozen=True)
class EndpointChange:
    url: str | None = None
    event_kinds: Sequence[str] | None = None
    clear_event_kinds: bool = False
    description: str | None = None
    enabled: bool | None = None


async def _vet_url(url: str, settings: Settings) -> None:
    # The sandbox takes a host that does not resolve yet (the example URLs of our own docs, a
    # receiver not deployed): its addresses are vetted at dial time, as in production.
    try:
        await check_url(
            url,
            allow_private=settings.private_webhooks_allowed,
            allow_unresolved=settings.is_sandbox,
        )
    except EgressRefused as exc:
        raise BadRequest(
            f"Webhook URL refused: {exc}", errors=[{"field": "url", "message": str(exc)}]
        ) from exc


async def create_endpoint(
    session: AsyncSession,
    integration_id: uuid.UUID,
    settings: Settings,
    *,
    url: str,
    event_kinds: Sequence[str] | None,
    description: str | None,
    enabled: bool,
    by: By | None = None,
) -> WebhookEndpoint:
    await _vet_url(url, settings)
    if await repository.count_endpoints(session, integration_id) >= MAX_ENDPOINTS:
        raise Conflict(f"An integration may have at most {MAX_ENDPOINTS} webhook endpoints.")
    now = clock.now()
    endpoint = WebhookEndpoint(
        id=uuid.uuid4(),
        integration_id=integration_id,
        url=url,
        description=description,
        event_kinds=None if event_kinds is None else list(event_kinds),
        enabled=enabled,
        disabled_reason=None if enabled else DISABLED_BY_INTEGRATION,
        failing_since=None,
        created_at=now,
        updated_at=now,
    )
    session.add(endpoint)
    await session.flush()
    if by is not None:
        after = await describe(session, endpoint)
        await _record(session, by, integration_id, "webhook.create", endpoint.id, after=after)
    return endpoint


async def get_endpoint(
    session: AsyncSession,
    integration_id: uuid.UUID,
    endpoint_id: uuid.UUID,
    for_update: bool = False,
) -> WebhookEndpoint:
    """One of the integration's endpoints; ``for_update`` row-locks it, so a change and a
    delete racing on it run one after the other (the loser sees 404, never a lost write)."""
    return found(
        await repository.endpoint(session, integration_id, endpoint_id, for_update),
        f"No webhook endpoint {endpoint_id}.",
    )


async def list_endpoints(session: AsyncSession, integration_id: uuid.UUID) -> list[WebhookEndpoint]:
    return await repository.endpoints(session, integration_id)


async def update_endpoint(
    session: AsyncSession,
    integration_id: uuid.UUID,
    endpoint_id: uuid.UUID,
    settings: Settings,
    change: EndpointChange,
    by: By | None = None,
) -> WebhookEndpoint:
    endpoint = await get_endpoint(session, integration_id, endpoint_id, for_update=True)
    before = await describe(session, endpoint) if by else None
    if change.url is not None:
        await _vet_url(change.url, settings)
        endpoint.url = change.url
    if change.clear_event_kinds:
        endpoint.event_kinds = None
    elif change.event_kinds is not None:
        endpoint.event_kinds = list(change.event_kinds)
    if change.description is not None:
        endpoint.description = change.description
    if change.enabled is not None:
        set_enabled(endpoint, change.enabled, DISABLED_BY_INTEGRATION)
    endpoint.updated_at = clock.now()
    await session.flush()
    after = await describe(session, endpoint) if by else None
    await _record(session, by, integration_id, "webhook.update", endpoint.id, before, after)
    return endpoint


def set_enabled(endpoint: WebhookEndpoint, enabled: bool, reason: str) -> None:
    """Enable (clearing the failure run) or disable an endpoint, with the reason shown to the
    integration. Its pending deliveries wait while it is disabled and resume when enabled."""
    endpoint.enabled = enabled
    endpoint.disabled_reason = None if enabled else reason
    if enabled:
        endpoint.failing_since = None
    endpoint.updated_at = clock.now()


async def change_enabled(
    session: AsyncSession,
    integration_id: uuid.UUID,
    endpoint_id: uuid.UUID,
    enabled: bool,
    by: By | None = None,
) -> WebhookEndpoint:
    """Enable or disable an endpoint: the integration's own switch (through its API or a
    member's ``by``), or an operator's (``by``), which the endpoint's reason then names."""
    endpoint = await get_endpoint(session, integration_id, endpoint_id, for_update=True)
    before = await describe(session, endpoint) if by else None
    by_operator = by is not None and by.operator
    set_enabled(endpoint, enabled, DISABLED_BY_OPERATOR if by_operator else DISABLED_BY_INTEGRATION)
    await session.flush()
    after = await describe(session, endpoint) if by else None
    action = "webhook.enable" if enabled else "webhook.disable"
    await _record(session, by, integration_id, action, endpoint.id, before, after)
    return endpoint


async def delete_endpoint(
    session: AsyncSession,
    integration_id: uuid.UUID,
    endpoint_id: uuid.UUID,
    by: By | None = None,
) -> None:
    endpoint = await get_endpoint(session, integration_id, endpoint_id, for_update=True)
    before = await describe(session, endpoint) if by else None
    await repository.delete_endpoint(session, endpoint)
    await session.flush()
    await _record(session, by, integration_id, "webhook.delete", endpoint_id, before)


async def send_test_event(
    session: AsyncSession,
    integration_id: uuid.UUID,
    endpoint_id: uuid.UUID,
    by: By | None = None,
) -> Event:
    endpoint = await get_endpoint(session, integration_id, endpoint_id)
    if not endpoint.enabled:
        raise Conflict("This endpoint is disabled; enable it before sending a test event.")
    data = webhook_test(endpoint.id)
    event = await emit(
        session, integration_id, EventKind.WEBHOOK_TEST, data, endpoint_ids=[endpoint.id]
    )
    if by is not None:
        client_id = await repository.client_id(session, integration_id)
        after = {"clientId": client_id, "eventId": event.id}
        await _record(session, by, integration_id, "webhook.test", endpoint.id, after=after)
    return event


@dataclass(frozen=True)
class AttemptPage:
    attempts: list[DeliveryAttempt]
    total: int


async def attempts(
    session: AsyncSession, integration_id: uuid.UUID, endpoint_id: uuid.UUID, page: int, size: int
) -> AttemptPage:
    await get_endpoint(session, integration_id, endpoint_id)
    total = await repository.count_attempts(session, endpoint_id)
    rows = await repository.attempts_page(session, endpoint_id, (page - 1) * size, size)
    return AttemptPage(rows, total)


async def recover(
    session: AsyncSession,
    integration_id: uuid.UUID,
    endpoint_id: uuid.UUID,
    since: datetime,
    *,
    waiting: bool = False,
    by: By | None = None,
) -> int:
    """Queue for this endpoint everything since ``since`` that did not reach it: deliveries that
    failed for good, and events it never got (emitted while it was disabled). ``waiting``: the
    deliveries waiting for their next retry are made due now as well (the receiver is fixed:
    no need to wait out the schedule). Returns how many."""
    endpoint = await get_endpoint(session, integration_id, endpoint_id)
    now = clock.now()
    count = await repository.requeue_failed(session, endpoint.id, since, now)
    if waiting:
        count += await repository.retry_waiting_now(session, endpoint.id, since, now)
    kinds = endpoint.event_kinds or [k.value for k in INTERFACE_KINDS]
    missing = await repository.undelivered_event_seqs(session, endpoint, since, kinds)
    for seq in missing:
        await _queue(session, seq, integration_id, [endpoint.id], now)
    if count:
        await wakeup.mark(session, wakeup.DELIVERIES)
    queued = count + len(missing)
    if by is not None:
        client_id = await repository.client_id(session, integration_id)
        after = {"clientId": client_id, "since": since, "waiting": waiting, "queued": queued}
        await _record(session, by, integration_id, "webhook.recover", endpoint.id, after=after)
    return queued


async def resend(
    session: AsyncSession,
    integration_id: uuid.UUID,
    event_id: uuid.UUID,
    endpoint_id: uuid.UUID | None,
    by: By | None = None,
) -> int:
    """Send an event again, with its original ``webhook-id``: to one endpoint, or to every
    enabled endpoint that subscribes to its kind."""
    event = await get_event(session, integration_id, event_id)
    if endpoint_id is not None:
        endpoint = await get_endpoint(session, integration_id, endpoint_id)
        targets = [endpoint.id]
    else:
        targets = await repository.subscribed_endpoints(session, integration_id, event.kind)
    await _queue(session, event.seq, integration_id, targets, clock.now())
    if by is not None:
        client_id = await repository.client_id(session, integration_id)
        after = {"clientId": client_id, "endpointId": endpoint_id, "queued": len(targets)}
        await _record(
            session, by, integration_id, "event.resend", event.id, after=after, target_type="event"
        )
    return len(targets)


# --- the back office: every integration's endpoints ----------------------------------------

# The window an endpoint's failure rate is counted over, and the default of an operator's
# recovery (longer than the retry schedule and the five failing days that disable an endpoint).
FAILURE_WINDOW = timedelta(hours=24)
RECOVER_WINDOW = timedelta(days=7)


@dataclass(frozen=True)
class EndpointHealth:
    """An endpoint with its integration and how its deliveries go: attempts and failures in
    the last ``FAILURE_WINDOW``, the backlog (deliveries not delivered yet: how many, since
    when, the next attempt's time) and the deliveries that failed for good in the last
    ``RECOVER_WINDOW`` (what a recovery queues again)."""

    endpoint: WebhookEndpoint
    integration_name: str
    client_id: str
    attempts: int
    failures: int
    backlog: int
    oldest_waiting: datetime | None
    next_attempt: datetime | None
    failed: int

    @property
    def failure_rate(self) -> int | None:
        """The share of attempts that failed, in whole per cent; None without attempts."""
        if not self.attempts:
            return None
        return round(100 * self.failures / self.attempts)

    @property
    def failing(self) -> bool:
        return self.endpoint.failing_since is not None


@dataclass(frozen=True)
class HealthPage:
    endpoints: list[EndpointHealth]
    total: int


async def health_page(session: AsyncSession, page: int, size: int) -> HealthPage:
    """Page ``page`` (from 1) of every integration's endpoints, failing ones first."""
    rows = await _health(session, offset=(page - 1) * size, limit=size)
    return HealthPage(rows, await repository.count_all_endpoints(session))


async def health(session: AsyncSession, endpoint_id: uuid.UUID) -> EndpointHealth:
    """One endpoint, whatever its integration, with how its deliveries go."""
    rows = await _health(session, offset=0, limit=1, endpoint_id=endpoint_id)
    if not rows:
        raise NotFound(f"No webhook endpoint {endpoint_id}.")
    return rows[0]


async def _health(
    session: AsyncSession,
    *,
    offset: int,
    limit: int,
    endpoint_id: uuid.UUID | None = None,
    integration_id: uuid.UUID | None = None,
) -> list[EndpointHealth]:
    now = clock.now()
    rows = await repository.endpoint_health(
        session,
        attempts_since=now - FAILURE_WINDOW,
        failed_since=now - RECOVER_WINDOW,
        offset=offset,
        limit=limit,
        endpoint_id=endpoint_id,
        integration_id=integration_id,
    )
    return [
        EndpointHealth(
            endpoint=row.WebhookEndpoint,
            integration_name=row.integration_name,
            client_id=row.client_id,
            attempts=int(row.attempts),
            failures=int(row.failures),
            backlog=int(row.backlog),
            oldest_waiting=row.oldest_waiting,
            next_attempt=row.next_attempt,
            failed=int(row.failed),
        )
        for row in rows
    ]


async def health_of_integration(
    session: AsyncSession, integration_id: uuid.UUID
) -> list[EndpointHealth]:
    """Every endpoint of one integration (at most ``MAX_ENDPOINTS``), failing ones first, with
    how its deliveries go: the developer portal's list."""
    return await _health(session, offset=0, limit=MAX_ENDPOINTS, integration_id=integration_id)


async def health_of(
    session: AsyncSession, integration_id: uuid.UUID, endpoint_id: uuid.UUID
) -> EndpointHealth:
    """One of the integration's endpoints with how its deliveries go; another integration's
    is not found, as an unknown one."""
    endpoint = await get_endpoint(session, integration_id, endpoint_id)
    return await health(session, endpoint.id)


async def find_endpoint(session: AsyncSession, endpoint_id: uuid.UUID) -> WebhookEndpoint:
    """An endpoint whatever its integration, for an operator's action on it."""
    return found(
        await repository.endpoint_by_id(session, endpoint_id), f"No webhook endpoint {endpoint_id}."
    )


@dataclass(frozen=True)
class Waiting:
    """A delivery not delivered yet, with its event's id and kind."""

    delivery: Delivery
    event_id: uuid.UUID
    kind: str


async def waiting(session: AsyncSession, endpoint_id: uuid.UUID, limit: int) -> list[Waiting]:
    """The endpoint's oldest ``limit`` deliveries waiting to be delivered."""
    rows = await repository.waiting_deliveries(session, endpoint_id, limit)
    return [Waiting(row.Delivery, row.event_id, row.kind) for row in rows]


async def event_kinds(
    session: AsyncSession, event_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, str]:
    return await repository.event_kinds(session, event_ids)


# --- the developer portal: an endpoint's deliveries -----------------------------------------

DELIVERY_STATUSES = ("pending", "succeeded", "failed")


@dataclass(frozen=True)
class DeliveryPage:
    deliveries: list[Waiting]
    total: int


async def deliveries(
    session: AsyncSession,
    integration_id: uuid.UUID,
    endpoint_id: uuid.UUID,
    status: str | None,
    page: int,
    size: int,
) -> DeliveryPage:
    """Page ``page`` (from 1) of one of the integration's endpoints' deliveries, newest first,
    of one status (``DELIVERY_STATUSES``) or all."""
    endpoint = await get_endpoint(session, integration_id, endpoint_id)
    total = await repository.count_deliveries(session, integration_id, endpoint.id, status)
    rows = await repository.deliveries_page(
        session, integration_id, endpoint.id, status, (page - 1) * size, size
    )
    return DeliveryPage([Waiting(r.Delivery, r.event_id, r.kind) for r in rows], total)


@dataclass(frozen=True)
class DeliveryDetail:
    """A delivery with its event (whose payload is the body every attempt sent) and every
    attempt, oldest first."""

    delivery: Delivery
    event: Event
    attempts: list[DeliveryAttempt]


async def delivery(
    session: AsyncSession, integration_id: uuid.UUID, delivery_id: uuid.UUID
) -> DeliveryDetail:
    """One of the integration's deliveries; another integration's is not found, as an unknown
    one."""
    row = found(
        await repository.delivery_with_event(session, integration_id, delivery_id),
        f"No delivery {delivery_id}.",
    )
    tried = await repository.attempts_of_delivery(session, delivery_id)
    return DeliveryDetail(row.Delivery, row.Event, tried)


# --- the events API -------------------------------------------------------------------------


async def get_event(session: AsyncSession, integration_id: uuid.UUID, event_id: uuid.UUID) -> Event:
    return found(await repository.event(session, integration_id, event_id), f"No event {event_id}.")


@dataclass(frozen=True)
class EventPage:
    payloads: list[str]
    total: int


async def list_events(
    session: AsyncSession,
    integration_id: uuid.UUID,
    *,
    kind: str | None,
    deal_id: uuid.UUID | None,
    after: uuid.UUID | None,
    page: int,
    size: int,
) -> EventPage:
    after_seq = None
    if after is not None:
        after_seq = (await get_event(session, integration_id, after)).seq
    filters: dict[str, Any] = {"kind": kind, "deal_id": deal_id, "after_seq": after_seq}
    total = await repository.count_events(session, integration_id, **filters)
    offset = (page - 1) * size
    payloads = (
        []
        if offset >= total
        else await repository.event_page(
            session, integration_id, offset=offset, limit=size, **filters
        )
    )
    return EventPage(payloads, total)
