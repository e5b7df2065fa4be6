"""``dealbroker trigger``: simulate an event or run a scenario from a terminal, in the sandbox.

The same service calls as the sandbox triggers and ``POST /sandbox/v1/scenarios``, on the
configured database, for one integration; prints one line per event emitted, in order.
"""

import uuid
from typing import Annotated, Any

import orjson
import typer
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.cli.common import _in_transaction, _validated, _with_sessionmaker
from dealbroker.core.errors import NotFound
from dealbroker.core.settings import get_settings
from dealbroker.events import service as events
from dealbroker.integrations import service as integrations
from dealbroker.integrations.models import Integration
from dealbroker.sandbox import schemas, service
from dealbroker.sandbox.scenarios import SCENARIOS, run

# Each trigger by its event kind and by its path's name: (body schema, body fields it takes).
TRIGGERS: dict[str, tuple[type, tuple[str, ...]]] = {
    "signature.status": (schemas.SignatureStatusTrigger, ("status", "signatureType")),
    "deal.offer": (schemas.DealOfferTrigger, ()),
    "deal.offerApproved": (schemas.OfferDecisionTrigger, ()),
    "deal.offerDenied": (schemas.OfferDecisionTrigger, ()),
    "payment.status": (schemas.PaymentStatusTrigger, ("status",)),
    "deal.status": (schemas.DealStatusTrigger, ("status",)),
}
PATH_NAMES = {
    "signatureStatus": "signature.status",
    "dealOffer": "deal.offer",
    "dealOfferApproved": "deal.offerApproved",
    "dealOfferDenied": "deal.offerDenied",
    "paymentStatus": "payment.status",
    "dealStatus": "deal.status",
}


def trigger(
    name: Annotated[
        str,
        typer.Argument(
            metavar="EVENT|SCENARIO",
            help="An event kind (signature.status, deal.offer, deal.offerApproved, "
            "deal.offerDenied, payment.status, deal.status; or the trigger's name, e.g. "
            "paymentStatus) or a scenario (" + ", ".join(SCENARIOS) + ").",
        ),
    ],
    client_id: Annotated[
        str | None,
        typer.Option("--client-id", help="The integration (default: the only one there is)."),
    ] = None,
    deal: Annotated[
        uuid.UUID | None,
        typer.Option(
            "--deal",
            help="The deal to act on (an event without one carries dummy data; a "
            "scenario without one makes a new deal).",
        ),
    ] = None,
    status: Annotated[
        str | None,
        typer.Option(
            help="The status to simulate (signature.status, payment.status, deal.status)."
        ),
    ] = None,
    signature_type: Annotated[
        str | None, typer.Option("--signature-type", help="Seller or Buyer (signature.status).")
    ] = None,
) -> None:
    """Simulate an event, or run a scenario, as the sandbox triggers do: where the deal's
    status does not allow the effect yet, it is fast-forwarded through the real lifecycle.
    Prints one line per event emitted, in order; the deal's status at the end goes to stderr."""
    settings = get_settings()
    if not settings.is_sandbox:
        typer.echo("error: events are simulated only in the sandbox", err=True)
        raise typer.Exit(2)
    kind = PATH_NAMES.get(name, name)
    if name in SCENARIOS:
        if status or signature_type:
            typer.echo("error: a scenario takes no --status or --signature-type", err=True)
            raise typer.Exit(2)

        async def scenario(sessionmaker: async_sessionmaker[AsyncSession]) -> Any:
            async with sessionmaker() as session, session.begin():
                integration = await _integration(session, client_id)
            return await run(sessionmaker, integration, name, deal, settings)

        outcome = _with_sessionmaker(scenario)
        _report(outcome.events, outcome.deal.id, outcome.deal.status, outcome.deal.payment_status)
        return
    if kind not in TRIGGERS:
        typer.echo(
            f"error: no event or scenario {name!r}; events: {', '.join(TRIGGERS)}; "
            f"scenarios: {', '.join(SCENARIOS)}",
            err=True,
        )
        raise typer.Exit(2)
    model, takes = TRIGGERS[kind]
    given = {"status": status, "signatureType": signature_type}
    for field, value in given.items():
        if value is not None and field not in takes:
            option = "--status" if field == "status" else "--signature-type"
            typer.echo(f"error: {kind} takes no {option}", err=True)
            raise typer.Exit(2)
    body: Any = _validated(
        model, {"dealId": deal, **{k: v for k, v in given.items() if k in takes}}
    )

    async def simulate(session: AsyncSession) -> tuple[list[dict[str, Any]], Any]:
        integration = await _integration(session, client_id)
        changed = await _effect(kind, session, integration, body)
        emitted = [orjson.loads(e.payload) for e in events.emitted(session)]
        state = None if changed is None else (changed.id, changed.status, changed.payment_status)
        return emitted, state

    emitted, state = _in_transaction(simulate)
    _report(emitted, *(state or (None, None, None)))


async def _effect(kind: str, session: AsyncSession, integration: Integration, body: Any) -> Any:
    settings = get_settings()
    if kind == "signature.status":
        return await service.signature_status(session, integration, body, settings)
    if kind == "deal.offer":
        return await service.deal_offer(session, integration, body)
    if kind in ("deal.offerApproved", "deal.offerDenied"):
        approve = kind == "deal.offerApproved"
        return await service.offer_decision(session, integration, body, approve, settings)
    if kind == "payment.status":
        return await service.payment_status(session, integration, body, settings)
    return await service.deal_status(session, integration, body, settings)


async def _integration(session: AsyncSession, client_id: str | None) -> Integration:
    if client_id is not None:
        return await integrations.get_by_client_id(session, client_id)
    active = [i for i in await integrations.list_all(session) if i.active]
    if len(active) != 1:
        raise NotFound(
            f"There are {len(active)} active integrations: name one with --client-id "
            "(`dealbroker integrations list` shows them)."
        )
    return active[0]


def _line(event: dict[str, Any]) -> str:
    data = event["data"]
    kind = event["event"]
    if kind == "signature.status":
        detail = f"{data['signatureType']} {data['status']}"
    elif kind == "deal.offer":
        detail = f"{data['id']} {data['shippingType']} {data['price']} {data['buyerEmail']}"
    elif kind in ("deal.offerApproved", "deal.offerDenied"):
        detail = str(data["id"])
    elif kind == "payment.status":
        detail = f"{data['status']} {data['amount']} {data['currency']}"
    else:
        detail = str(data.get("status", ""))
    return f"{event['id']}  {kind:<18}  {detail}"


def _report(
    emitted: list[dict[str, Any]],
    deal_id: uuid.UUID | None,
    status: str | None,
    payment_status: str | None,
) -> None:
    for event in emitted:
        typer.echo(_line(event))
    if deal_id is not None:
        payment = f", payment {payment_status}" if payment_status else ""
        typer.echo(f"deal {deal_id} is {status}{payment}", err=True)
