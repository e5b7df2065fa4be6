"""The seller's and the buyer's actions on a deal: one entry point each, with its rules.

The pages only parse a form, call one of these and render. Each takes the deal as loaded and
row locked by ``locked`` (the capability link already proved the caller may act on it), checks
the rule, fires the transition through ``deals.flows`` and returns. A refusal is a domain error;
nothing here knows HTTP. A refusal about one value a person typed is a ``FieldError`` named as
the page's form names the field, so the page shows it next to that field.

It joins the deal to its offers, signatures and messages, so it sits above ``deals``,
``offers``, ``signatures`` and ``notifications``, none of which calls it; the worker's
``eid-timeouts`` job (``EidTimeoutJob``) lives here beside ``fail_abandoned_eid``.
"""

import logging
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.audit import service as audit
from dealbroker.carriers.base import CarrierError, Delivery, ParcelEventKind
from dealbroker.carriers.registry import carrier_for
from dealbroker.conversations import service as conversations
from dealbroker.conversations.models import Conversation, ConversationMessage
from dealbroker.core import clock, i18n, money, oidc
from dealbroker.core.errors import (
    BadRequest,
    Conflict,
    DealSuspended,
    FieldError,
    NotFound,
    StaleDeal,
)
from dealbroker.core.i18n import N_, _
from dealbroker.core.jobs import ShortJob
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import flows, lifecycle, repository, shipments
from dealbroker.deals import service as deals
from dealbroker.deals.actions import takes_offers
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import Deal, DealStatusChange, DealTimer
from dealbroker.deals.shipments import CarrierEvent, ShipmentEventType
from dealbroker.deals.tasks import BATCH
from dealbroker.integrations import repository as integrations
from dealbroker.notifications import service as notifications
from dealbroker.notifications.models import OutboxMessage
from dealbroker.offers import service as offers
from dealbroker.offers.models import Offer, OfferLink, OfferStatus
from dealbroker.parcels import quotes
from dealbroker.parcels import service as parcels
from dealbroker.parcels.models import BOOKED, BOOKING, FAILED, Parcel
from dealbroker.payments import service as payments
from dealbroker.payments.methods import Method
from dealbroker.payments.models import PayoutAccountChange
from dealbroker.payments.provider import provider_for
from dealbroker.signatures import eid
from dealbroker.signatures import repository as eid_flows
from dealbroker.signatures.models import EidSignature
from dealbroker.signatures.service import SignatureStatus, SignatureType, record

log = logging.getLogger(__name__)

PACKAGE_TYPES = ("Small", "Medium", "Large", "XL")
SHIPPING_TYPES = ("Carrier", "Pickup")
STALE = N_(
    "This page was out of date (the deal changed since it was shown, or the form was sent "
    "twice). Nothing was changed; here is the current state."
)
SUSPENDED = N_("Nothing was changed: this deal is suspended.")


async def shown(session: AsyncSession, deal_id: uuid.UUID) -> Deal | None:
    """The deal behind a capability link, to show it."""
    return await repository.by_id(session, deal_id)


async def suspended(session: AsyncSession, deal: Deal) -> bool:
    """Whether the deal is suspended: the operator disabled its integration. Its pages still
    show it (the parties must be able to see where their deal and money stand), but no one may
    act on it until the integration is enabled again."""
    return not await integrations.is_active(session, deal.integration_id)


async def locked(session: AsyncSession, deal_id: uuid.UUID, version: str | None) -> Deal:
    """The deal behind a capability link, row locked for an action, as of the version the
    person's page showed: a post from a stale page, a second tab or a double click changes
    nothing (``StaleDeal``), nor does any post while the deal is suspended (``DealSuspended``).
    Every seller and buyer action starts here."""
    deal = await _acting_on(session, deal_id)
    if version != str(deal.version):
        raise StaleDeal(_(STALE))
    return deal


async def _acting_on(session: AsyncSession, deal_id: uuid.UUID) -> Deal:
    """The deal, row locked, unless it is gone or suspended."""
    deal = await repository.by_id_for_update(session, deal_id)
    if deal is None:
        raise NotFound(_("This deal does not exist (any more)."))
    if await suspended(session, deal):
        raise DealSuspended(_(SUSPENDED))
    return deal


def seller_reads(deal: Deal, locale: str) -> None:
    """The seller acts on their page in ``locale``: their messages are written in it."""
    if deal.seller_locale != locale:
        deal.seller_locale = locale


async def buyer_reads(session: AsyncSession, link: OfferLink, locale: str) -> None:
    """The buyer acts on their offer page in ``locale``: their messages are written in it."""
    mine = await offers.offers_from_link(session, link)
    if mine and mine[0].locale != locale:
        mine[0].locale = locale


async def confirm_payout_account(
    session: AsyncSession, deal_id: uuid.UUID, token: str, settings: Settings
) -> uuid.UUID | None:
    """The seller confirms a payout-account change from the link we e-mailed them (no page
    version: the link is the proof). A suspended deal refuses it, as every other action.

    When the seller signed the deal with eID, the link is not enough: the change waits for the
    same identity to confirm it with eID, and the eID flow's id is returned (``eid_returned``
    applies the change, or refuses another identity)."""
    deal = await _acting_on(session, deal_id)
    signed = (
        await eid_flows.completed(session, deal.id, SignatureType.SELLER.value)
        if settings.eid_enabled
        else None
    )
    if signed is None:
        await payments.confirm_payout_account(session, deal, token)
        return None
    change = await payments.change_to_confirm(session, deal, token)
    if change is None:
        raise NotFound(
            _("This confirmation link is not valid (any more). Ask for the change again.")
        )
    flow = EidSignature(
        id=uuid.uuid4(),
        deal_id=deal.id,
        signature_type=SignatureType.SELLER.value,
        purpose="payout",
        payout_change_id=change.id,
        status=SignatureStatus.INITIATED.value,
        terms_salt=eid.new_salt(),
        started_at=clock.now(),
    )
    eid_flows.add(session, flow)
    return flow.id


async def pending_account_change(session: AsyncSession, deal: Deal) -> PayoutAccountChange | None:
    return await payments.pending_account_change(session, deal)


async def change_to_confirm(
    session: AsyncSession, deal: Deal, token: str
) -> PayoutAccountChange | None:
    return await payments.change_to_confirm(session, deal, token)


async def history(session: AsyncSession, deal: Deal) -> list[DealStatusChange]:
    return await repository.history(session, deal.id)


@dataclass(frozen=True)
class Mailbox:
    to: str | None
    messages: list[OutboxMessage]


async def mailbox(session: AsyncSession, deal: Deal, offer_id: uuid.UUID | None) -> Mailbox | None:
    """The sandbox mailbox of one party: the seller's (``offer_id`` None), at the deal's seller
    email, or that of the buyer who made ``offer_id``, at that offer's email. Each party sees
    only their own messages. ``None`` when the deal has no such offer."""
    if offer_id is None:
        email, party = (deal.seller or {}).get("email"), notifications.Party.SELLER
    else:
        offer = next((o for o in await offers.offers_of(session, deal) if o.id == offer_id), None)
        if offer is None:
            return None
        email, party = offer.buyer_email, notifications.Party.BUYER
    if not email:
        return Mailbox(None, [])
    return Mailbox(email, await notifications.mailbox(session, deal.id, party, email))


# --- the seller -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Details:
    """What the seller may fill in on a draft; ``None`` clears a field."""

    name: str | None
    description: str | None
    price_minor: int | None
    package_type: str | None
    seller: dict[str, str | None]


async def complete_details(session: AsyncSession, deal: Deal, details: Details) -> Deal:
    if details.package_type is not None and details.package_type not in PACKAGE_TYPES:
        raise FieldError("packageType", _("Choose a package size from the list."))
    email = details.seller.get("email")
    if email and "@" not in email:
        raise FieldError("email", _("The email address does not look right."))
    fields: dict[str, object] = {
        "name": details.name,
        "description": details.description,
        "price_minor": details.price_minor,
        "package_type": details.package_type,
    }
    return await deals.update_details(session, deal, fields, details.seller)


def _consent(full_name: str | None, consent: bool) -> None:
    if not full_name:
        raise FieldError("full_name", _("Type your full name to sign."))
    if not consent:
        raise FieldError("consent", _("Tick the box to confirm that you agree to the deal."))


def _agrees(full_name: str | None, consent: bool, settings: Settings) -> None:
    """The typed name and the box; with eID the issuer gives the name, and only the box is
    asked."""
    if settings.eid_enabled:
        _consent("eID", consent)
    else:
        _consent(full_name, consent)


async def seller_signs(
    session: AsyncSession, deal: Deal, full_name: str | None, consent: bool, settings: Settings
) -> uuid.UUID | None:
    """The seller signs a complete draft: it is published (``Ad``). With eID signing on, the
    signature is only Initiated here and the eID flow's id returned: the seller is sent to the
    issuer, and ``eid_returned`` completes it."""
    _agrees(full_name, consent, settings)
    missing = [
        n for n, v in ((_("the name"), deal.name), (_("the price"), deal.price_minor)) if not v
    ]
    if not (deal.seller or {}).get("email"):
        missing.append(_("your email"))
    if missing:
        raise BadRequest(_("Before you sign, add %(missing)s.") % {"missing": ", ".join(missing)})
    if settings.eid_enabled:
        return await _begin_eid(session, deal, SignatureType.SELLER, Actor.SELLER, settings)
    await _sign(session, deal, SignatureType.SELLER, Actor.SELLER, settings)
    return None


async def _sign(
    session: AsyncSession, deal: Deal, party: SignatureType, actor: Actor, settings: Settings
) -> None:
    for status in (SignatureStatus.INITIATED, SignatureStatus.COMPLETED):
        await record(session, deal, party, status, actor, settings)


ACTORS = {SignatureType.SELLER: Actor.SELLER, SignatureType.BUYER: Actor.BUYER}


async def _begin_eid(
    session: AsyncSession, deal: Deal, party: SignatureType, actor: Actor, settings: Settings
) -> uuid.UUID:
    """A new eID flow for ``party`` (an earlier one never back from the issuer fails first):
    its signature is Initiated."""
    for earlier in await eid_flows.open_flows(session, deal.id, party.value):
        await _eid_fails(session, deal, earlier, "another signing started", settings)
    flow = EidSignature(
        id=uuid.uuid4(),
        deal_id=deal.id,
        signature_type=party.value,
        status=SignatureStatus.INITIATED.value,
        terms_salt=eid.new_salt(),
        started_at=clock.now(),
    )
    eid_flows.add(session, flow)
    await record(session, deal, party, SignatureStatus.INITIATED, actor, settings)
    return flow.id


async def verified_names(session: AsyncSession, deal: Deal) -> dict[str, str]:
    """Each party's name as their eID signature verified it ("Seller", "Buyer"); a party who
    signed by typed name, or not yet, is not in it. The simulated eID's names are labelled by
    the page as what they are."""
    return {
        flow.signature_type: flow.name
        for flow in await eid_flows.completed_of_deal(session, deal.id)
        if flow.name
    }


async def eid_send(
    session: AsyncSession, flow_id: uuid.UUID, settings: Settings
) -> tuple[EidSignature, oidc.Pending] | None:
    """The state, nonce and PKCE verifier to send the party to the issuer with, once per flow
    (the browser that follows the flow's link first); None for a flow already sent, finished
    or gone."""
    flow = await eid_flows.for_update(session, flow_id)
    if flow is None or flow.status != SignatureStatus.INITIATED or flow.state_hash is not None:
        return None
    deal = await repository.by_id(session, flow.deal_id)
    assert deal is not None  # the flow's foreign key
    pending = oidc.Pending.new(eid.nonce(deal, flow.terms_salt))
    flow.state_hash = eid.state_hash(pending.state)
    return flow, pending


async def eid_flow(
    session: AsyncSession, flow_id: uuid.UUID, state: str
) -> tuple[EidSignature, Deal] | None:
    """The open flow whose state this browser holds, and its deal; None for any other."""
    flow = await eid_flows.for_update(session, flow_id)
    if (
        flow is None
        or flow.status != SignatureStatus.INITIATED
        or flow.state_hash != eid.state_hash(state)
    ):
        return None
    deal = await repository.by_id(session, flow.deal_id)
    return None if deal is None else (flow, deal)


async def eid_returned(
    session: AsyncSession,
    flow_id: uuid.UUID,
    claims: dict[str, object] | None,
    failure: str | None,
    settings: Settings,
) -> EidSignature:
    """The party is back from the issuer: with the verified claims, the signature is Completed
    (the deal moves on) and its evidence kept; with ``failure`` (or when the deal can no longer
    be signed) it is Failed. Only the flow's own deal and party are signed."""
    flow = await eid_flows.for_update(session, flow_id)
    assert flow is not None  # found by eid_flow in this transaction
    deal = await _acting_on(session, flow.deal_id)
    if flow.status != SignatureStatus.INITIATED:
        return flow
    if flow.purpose == "payout":
        await _payout_identity(session, deal, flow, claims, failure, settings)
        return flow
    party = SignatureType(flow.signature_type)
    if failure is None and claims is not None:
        eid.keep_evidence(flow, claims, settings)
        if party is SignatureType.BUYER and deal.buyer_contact is not None:
            deal.buyer_contact = {**deal.buyer_contact, "name": flow.name}
        try:
            async with session.begin_nested():
                await record(
                    session, deal, party, SignatureStatus.COMPLETED, ACTORS[party], settings
                )
        except Conflict as exc:
            failure = f"the deal can no longer be signed: {exc.detail}"
        else:
            flow.status = SignatureStatus.COMPLETED.value
            flow.finished_at = clock.now()
            return flow
    await _eid_fails(session, deal, flow, failure or "no claims", settings)
    return flow


async def fail_abandoned_eid(session: AsyncSession, settings: Settings, limit: int) -> int:
    """Flows whose party never came back from the issuer within ``DEALBROKER_EID_FLOW_MINUTES``
    fail, a batch at a time: a signature's ``signature.status`` goes Failed, so the integration
    does not wait on an Initiated one for ever. The party may start again from the deal's page."""
    before = clock.now() - timedelta(minutes=settings.eid_flow_minutes)
    flows_left = await eid_flows.abandoned(session, before, limit)
    for flow in flows_left:
        deal = await repository.by_id_for_update(session, flow.deal_id)
        assert deal is not None  # the flow's foreign key
        reason = f"not back within {settings.eid_flow_minutes} minutes"
        await _eid_fails(session, deal, flow, reason, settings)
    return len(flows_left)


class EidTimeoutJob(ShortJob):
    """Fails the eID flows whose party never came back from the issuer in time
    (``fail_abandoned_eid``), every ``every`` seconds: one indexed query when there is
    none."""

    name = "eid-timeouts"
    every = 10.0

    async def run_once(self) -> int:
        async with self.sessionmaker() as session, session.begin():
            failed = await fail_abandoned_eid(session, self.settings, BATCH)
        self.more = failed == BATCH  # fewer: none was left past its time
        return failed


async def _eid_fails(
    session: AsyncSession, deal: Deal, flow: EidSignature, reason: str, settings: Settings
) -> None:
    party = SignatureType(flow.signature_type)
    flow.status = SignatureStatus.FAILED.value
    flow.failure = reason[:300]
    flow.finished_at = clock.now()
    if flow.purpose == "sign":  # a payout confirmation is no signature of the deal
        await record(session, deal, party, SignatureStatus.FAILED, ACTORS[party], settings)


async def _payout_identity(
    session: AsyncSession,
    deal: Deal,
    flow: EidSignature,
    claims: dict[str, object] | None,
    failure: str | None,
    settings: Settings,
) -> None:
    """The seller's eID confirmation of a payout account change: applied when it is the
    identity that signed for the seller; another identity is refused and recorded in the audit
    trail for the operators."""
    if failure is not None or claims is None:
        await _eid_fails(session, deal, flow, failure or "no claims", settings)
        return
    eid.keep_evidence(flow, claims, settings)
    signed = await eid_flows.completed(session, deal.id, SignatureType.SELLER.value)
    if signed is None or not eid.same_person(signed, flow):
        await _eid_fails(session, deal, flow, "another identity than the seller's", settings)
        await audit.record(
            session,
            audit.Actor("seller:eid"),
            "payout_account.identity_refused",
            "deal",
            deal.id,
            before={"issuer": signed.issuer, "subject": signed.subject} if signed else None,
            after={"issuer": flow.issuer, "subject": flow.subject, "change": flow.payout_change_id},
        )
        return
    assert flow.payout_change_id is not None  # set for every payout flow
    await payments.confirm_payout_change(session, deal, flow.payout_change_id)
    flow.status = SignatureStatus.COMPLETED.value
    flow.finished_at = clock.now()


async def decide_offer(
    session: AsyncSession,
    deal: Deal,
    offer_id: uuid.UUID | None,
    approve: bool,
    settings: Settings,
) -> Offer:
    """The seller approves or declines one pending offer."""
    if offer_id is None:
        raise BadRequest(_("Choose an offer."))
    offer = await offers.pending_offer(session, deal, offer_id)
    if approve:
        await offers.approve(session, deal, offer, settings)
    else:
        await offers.deny(session, deal, offer)
    return offer


async def seller_fires(
    session: AsyncSession, deal: Deal, trigger: Trigger, settings: Settings
) -> Deal:
    """A lifecycle step the seller takes: cancel, hand the item to the carrier."""
    return await flows.fire(session, deal, trigger, Actor.SELLER, settings)


async def carrier_reports(
    session: AsyncSession, deal: Deal, delivered: bool, settings: Settings
) -> Deal:
    """The sandbox's simulated carrier: the item was delivered, or sent back, reported now for
    the parcel the seller handed over, as a real carrier's event comes (``deals.shipments``);
    for a parcel booked with the sandbox's carrier, through its pushes (``parcels``)."""
    if flows.carrier_booked(deal):
        news = ParcelEventKind.DELIVERED if delivered else ParcelEventKind.RETURNED
        await parcels.simulate(session, deal, news, settings)
        return deal
    shipment = deal.shipment or {}
    kind = ShipmentEventType.DELIVERED if delivered else ShipmentEventType.RETURNED
    event = CarrierEvent(
        kind,
        str(shipment.get("carrier") or SANDBOX_CARRIER),
        str(shipment.get("tracking") or SANDBOX_CARRIER),
        clock.now(),
    )
    return await shipments.report(session, deal, event, settings)


SANDBOX_CARRIER = "Sandbox"


# --- a parcel booked at the deployment's carrier (parcels) ------------------------------------


@dataclass(frozen=True)
class Shipping:
    """A Carrier deal's parcel where the deployment books it (``DEALBROKER_CARRIER``), as the
    seller's "ship it" step shows it: the carrier, the parcel's size, the deliveries it may be
    booked with, by when it is handed in, and the latest outbound parcel (None before the first
    booking) with, after a refusal, why in the reader's words."""

    carrier: str
    size: str
    deliveries: list[str]
    deadline: datetime | None
    parcel: Parcel | None
    refusal: str | None
    # The buyer's return parcel in a return then refund (booked and paid by us), if any.
    return_parcel: Parcel | None = None

    @property
    def booking(self) -> bool:
        return self.parcel is not None and self.parcel.status == BOOKING

    @property
    def delayed(self) -> bool:
        """The carrier did not answer: we keep trying, the seller was told once."""
        return self.booking and self.parcel is not None and self.parcel.delay_told_at is not None

    @property
    def booked(self) -> bool:
        return self.parcel is not None and self.parcel.status == BOOKED

    @property
    def bookable(self) -> bool:
        """Nothing booked (yet, or after a refusal): the seller chooses a delivery and books."""
        return self.parcel is None or self.parcel.status not in (BOOKING, BOOKED)


def books_parcel(deal: Deal, settings: Settings) -> bool:
    """Whether the deal's parcel is booked here, at the deployment's carrier (not where the
    marketplace ships, nor for a pickup)."""
    return carrier_for(settings) is not None and deal.shipping_type == "Carrier"


async def shipping(session: AsyncSession, deal: Deal, settings: Settings) -> Shipping | None:
    """The deal's parcel at the deployment's carrier; None where parcels are not booked here
    (the marketplace ships them) or the deal is not sent with a carrier."""
    carrier = carrier_for(settings)
    if carrier is None or not books_parcel(deal, settings):
        return None
    size = parcels.size_of(deal)
    listed = await parcels.parcels_of(session, deal)
    outbound = parcels.latest(listed, parcels.OUTBOUND)
    refused = outbound is not None and outbound.status == FAILED
    return Shipping(
        carrier=parcels.carrier_name(carrier.name),
        size=size.value,
        deliveries=[d.value for d in parcels.deliveries(settings, size)],
        deadline=await parcels.shipping_deadline(session, deal),
        parcel=outbound,
        refusal=parcels.refusal_words((outbound.last_error or "").split(":", 1)[0])
        if refused and outbound is not None
        else None,
        return_parcel=parcels.latest(listed, parcels.RETURN),
    )


async def book_parcel(
    session: AsyncSession, deal: Deal, delivery: str | None, settings: Settings
) -> Parcel:
    """The seller books the parcel with the delivery they chose (one the carrier offers for
    the deal's size): the parcel job books it at the carrier in a moment, and the page shows
    the label once it is there."""
    parcels.bookable(deal, settings)  # what refuses the booking is said before the choice
    size = parcels.size_of(deal)
    if delivery not in {d.value for d in parcels.deliveries(settings, size)}:
        raise FieldError("delivery", _("Choose how the parcel goes to the buyer."))
    return await parcels.request_booking(session, deal, Delivery(delivery), settings)


async def parcel_label(session: AsyncSession, deal: Deal, parcel_id: uuid.UUID) -> Parcel:
    """The seller's label: the deal's outbound parcel ``parcel_id`` (another's is 404)."""
    parcel = await parcels.label(session, deal, parcel_id)
    if parcel.kind != parcels.OUTBOUND:
        raise NotFound("No such label.")
    return parcel


async def return_parcel(session: AsyncSession, link: OfferLink, deal: Deal) -> Parcel | None:
    """The return parcel we booked for the winning buyer in a return then refund (paid by us),
    while the return runs; None otherwise."""
    if deal.dispute_return is None or not await is_winner(session, link, deal):
        return None
    return parcels.latest(await parcels.parcels_of(session, deal), parcels.RETURN)


async def return_label(
    session: AsyncSession, link: OfferLink, deal: Deal, parcel_id: uuid.UUID
) -> Parcel:
    """The winning buyer's return label: the deal's return parcel ``parcel_id`` (404 for
    anything else, and for any other holder of an offer link)."""
    if not await is_winner(session, link, deal):
        raise NotFound("No such label.")
    parcel = await parcels.label(session, deal, parcel_id)
    if parcel.kind != parcels.RETURN:
        raise NotFound("No such label.")
    return parcel


# The events the sandbox's carrier buttons simulate, in the order a parcel meets them.
SIMULATED_EVENTS = (
    ParcelEventKind.PICKED_UP,
    ParcelEventKind.IN_TRANSIT,
    ParcelEventKind.READY_FOR_PICKUP,
    ParcelEventKind.DELIVERED,
    ParcelEventKind.RETURNED,
    ParcelEventKind.LOST,
    ParcelEventKind.DAMAGED,
)


async def simulate_parcel(
    session: AsyncSession, deal: Deal, kind: str | None, settings: Settings
) -> None:
    """The sandbox's carrier reports ``kind`` about the deal's booked parcel (its return
    parcel, once one is booked), through the handler Bring's pushes go through."""
    event = next((e for e in SIMULATED_EVENTS if e.value == kind), None)
    if event is None:
        raise BadRequest(_("Unknown carrier event."))
    await parcels.simulate(session, deal, event, settings)


async def sandbox_tracking(
    session: AsyncSession, tracking_number: str, settings: Settings
) -> tuple[Parcel, list[tuple[datetime, str]]] | None:
    """The sandbox carrier's tracking page for ``tracking_number``: the parcel and its events
    (when, which), nothing of the parties; None for a number it did not give."""
    found = await parcels.sandbox_tracking(session, tracking_number, settings)
    if found is None:
        return None
    parcel, seen = found
    booked = [(parcel.booked_at, ParcelEventKind.BOOKED.value)] if parcel.booked_at else []
    return parcel, booked + [(e.occurred_at, e.kind) for e in seen]


async def register_payout_account(
    session: AsyncSession,
    deal: Deal,
    holder: str | None,
    number: str | None,
    swish: payments.SwishPayee | None = None,
) -> payments.AccountRequest:
    """Where this deal's payout goes (a bank account, or with ``swish`` a Swish number); a
    change of an account already set waits for the seller's confirmation by e-mail."""
    if not (deal.seller or {}).get("email"):
        raise BadRequest(
            _("Add your email to the deal first: we confirm changes of the payout account there.")
        )
    if not holder:
        raise FieldError("holder", _("Give the account holder's name."))
    if swish is not None:
        if not number:
            raise FieldError("swish", _("Give the Swish number."))
        if not swish.ssn:
            raise FieldError(
                "ssn", _("Give the personal identity number of the Swish number's owner.")
            )
    elif not number:
        raise FieldError("account", _("Give the IBAN or account number."))
    return await payments.register_payout_account(session, deal, number, holder, swish)


# --- the buyer (holder of an offer link) ------------------------------------------------------


@dataclass(frozen=True)
class OfferInput:
    price_minor: int | None
    shipping_type: str
    buyer_name: str | None
    buyer_email: str | None


def check_offer(deal: Deal, data: OfferInput) -> tuple[int, str]:
    """Refuse an offer that could not be sent as it stands (asked before the buyer confirms
    it); its price in minor units and the buyer's email."""
    if data.price_minor is None:
        raise FieldError("price", _("Give the price you offer."))
    if data.shipping_type not in SHIPPING_TYPES:
        raise FieldError("shippingType", _("Choose Carrier or Pickup."))
    if not data.buyer_email or "@" not in data.buyer_email:
        raise FieldError("email", _("Give your email address, so the seller can answer."))
    if not takes_offers(deal):
        raise BadRequest(_("This deal does not take offers any more."))
    return data.price_minor, data.buyer_email


@dataclass(frozen=True)
class ShippingPrice:
    """The Carrier option's price on the buyer's page, before they offer: what the parcel
    costs (None: the carrier cannot quote it now) and who pays it (``shipping_paid_by``)."""

    price_minor: int | None
    paid_by: str

    def total(self, price_minor: int) -> int:
        """What the buyer pays for an item of ``price_minor`` sent with the carrier."""
        return money.Escrowed.charged(price_minor, self.price_minor, self.paid_by)


SHIPPING_UNAVAILABLE = N_(
    "The shipping price is not available right now, so the item cannot be offered with a "
    "carrier at the moment. Try again in a while, or choose pickup."
)


async def carrier_shipping(settings: Settings, deal: Deal) -> ShippingPrice | None:
    """What sending the deal's item costs (``parcels.quotes``: its packageType from the
    seller's postcode), or None when the deployment has no carrier (the marketplace ships:
    offers carry no shipping price, as before). A carrier that cannot quote now gives a price
    of None, which the page shows as not available."""
    try:
        quote = await quotes.shipping_quote(
            settings, deal.package_type, (deal.seller or {}).get("postcode")
        )
    except CarrierError as exc:
        log.warning("no shipping quote for deal %s: %r", deal.id, exc)
        return ShippingPrice(None, settings.shipping_paid_by)
    if quote is None:
        return None
    if quote.currency != deal.currency:
        log.warning("shipping quote in %s for a deal in %s", quote.currency, deal.currency)
        return ShippingPrice(None, settings.shipping_paid_by)
    return ShippingPrice(quote.price_minor, settings.shipping_paid_by)


async def offer_shipping(
    settings: Settings, deal: Deal, shipping_type: str
) -> ShippingPrice | None:
    """The shipping price an offer of ``shipping_type`` carries: None for Pickup or without a
    carrier; refused (``FieldError`` on ``shippingType``) when the carrier cannot quote now."""
    if shipping_type != "Carrier":
        return None
    shipping = await carrier_shipping(settings, deal)
    if shipping is not None and shipping.price_minor is None:
        raise FieldError("shippingType", _(SHIPPING_UNAVAILABLE))
    return shipping


def _worth_shipping(price_minor: int, shipping_minor: int) -> None:
    """A parcel sent for more than the item's price leaves nothing to pay out (the seller pays
    it) or to refund if it is not collected (the buyer does): such an offer is refused."""
    if price_minor <= shipping_minor:
        raise FieldError(
            "price",
            _("Offer more than the shipping costs, or choose to pick the item up."),
        )


async def send_offer(
    session: AsyncSession,
    link: OfferLink,
    deal: Deal,
    data: OfferInput,
    locale: str,
    shipping: ShippingPrice | None = None,
) -> Offer:
    """The buyer's offer, made on their page in ``locale`` (the language of their messages),
    with the shipping price ``offer_shipping`` found for it."""
    price_minor, buyer_email = check_offer(deal, data)
    if shipping is not None and shipping.price_minor is not None:
        _worth_shipping(price_minor, shipping.price_minor)
    return await offers.submit(
        session,
        deal,
        price_minor=price_minor,
        shipping_type=data.shipping_type,
        shipping_minor=None if shipping is None else shipping.price_minor,
        buyer_name=data.buyer_name,
        buyer_email=buyer_email,
        buyer_redirect_url=link.buyer_redirect_url,
        seller_redirect_url=link.seller_redirect_url,
        offer_link_id=link.id,
        verified=_same_address(link.buyer_email, data.buyer_email),
        locale=locale,
    )


async def withdraw_offer(session: AsyncSession, link: OfferLink, deal: Deal) -> Offer:
    """The buyer takes back their pending offer (this link's latest): the seller can no longer
    approve it, and the buyer may make a new one."""
    mine = await offers.offers_from_link(session, link)
    if not mine or mine[0].status != OfferStatus.PENDING:
        raise BadRequest(_("You have no offer waiting for the seller's answer."))
    return await offers.withdraw(session, deal, mine[0])


def _same_address(given: str | None, typed: str | None) -> bool:
    """Whether the buyer typed the address the integration gave with the link (and vouches
    for); only then is the offer linked to that buyer's user."""
    if not given or not typed:
        return False
    return given.strip().lower() == typed.strip().lower()


async def is_winner(session: AsyncSession, link: OfferLink, deal: Deal) -> bool:
    """Whether this link's latest offer is the one the seller approved (one rule, kept where
    the conversations also read it)."""
    return await conversations.is_winner(session, link, deal)


async def _winner(session: AsyncSession, link: OfferLink, deal: Deal) -> None:
    if not await is_winner(session, link, deal):
        raise BadRequest(_("Only the buyer whose offer was approved can do this."))


@dataclass(frozen=True)
class Contact:
    """How the seller reaches the buyer after payment: a phone, and where a Carrier deal goes."""

    phone: str | None
    address: str | None = None
    postcode: str | None = None
    town: str | None = None


async def buyer_signs(
    session: AsyncSession,
    link: OfferLink,
    deal: Deal,
    full_name: str | None,
    consent: bool,
    contact: Contact,
    settings: Settings,
) -> uuid.UUID | None:
    """The winning buyer signs, giving what the handover needs: a phone always, and the
    delivery address when the item is sent by carrier. With eID signing on, as the seller's:
    Initiated here, the flow's id returned."""
    await _winner(session, link, deal)
    if not contact.phone or sum(ch.isdigit() for ch in contact.phone) < 5:
        raise FieldError(
            "phone", _("Give a phone number, so the seller can reach you for the handover.")
        )
    carrier = deal.shipping_type == "Carrier"
    if carrier:
        for name, value, missing in (
            ("address", contact.address, _("Give the address the item is to be sent to.")),
            ("postcode", contact.postcode, _("Give the postcode of the delivery address.")),
            ("town", contact.town, _("Give the town of the delivery address.")),
        ):
            if not value:
                raise FieldError(name, missing)
    _agrees(full_name, consent, settings)  # after the contact fields, in the form's order
    mine = await offers.offers_from_link(session, link)
    deal.buyer_contact = {
        "name": None if settings.eid_enabled else full_name,  # eID: the verified name
        "email": mine[0].buyer_email,
        "phone": contact.phone,
        **(
            {"address": contact.address, "postcode": contact.postcode, "town": contact.town}
            if carrier
            else {}
        ),
    }
    if settings.eid_enabled:
        return await _begin_eid(session, deal, SignatureType.BUYER, Actor.BUYER, settings)
    await _sign(session, deal, SignatureType.BUYER, Actor.BUYER, settings)
    return None


# Once the buyer has paid, each party sees how to reach the other and where the item goes.
CONTACTS_SHARED = frozenset(
    {
        DealStatus.SHIPPING_PENDING,
        DealStatus.SHIPPING_IN_PROGRESS,
        DealStatus.SHIPPING_ARRIVED,
        DealStatus.SHIPPING_RETURNED,
        DealStatus.SHIPPING_REVIEW_DENIED,
        DealStatus.PICKUP_PENDING,
        DealStatus.PICKUP_DENIED,
        DealStatus.COMPLETED,
    }
)
MAX_CODE_ATTEMPTS = 5


def contacts_shared(deal: Deal) -> bool:
    return deal.status in CONTACTS_SHARED


async def hand_to_carrier(
    session: AsyncSession,
    deal: Deal,
    carrier: str | None,
    tracking: str | None,
    settings: Settings,
) -> Deal:
    """The seller hands a Carrier deal's package over and says which carrier has it, and its
    tracking number, which the buyer then sees."""
    if not carrier:
        raise FieldError("carrier", _("Give the carrier that has the package."))
    if not tracking:
        raise FieldError("tracking", _("Give the package's tracking number."))
    shipments.refuse_second_source(deal, shipments.Source.INTEGRATION)
    deal.shipment = {"carrier": carrier, "tracking": tracking}
    return await flows.fire(session, deal, Trigger.CARRIER_PICKED_UP, Actor.SELLER, settings)


async def confirm_pickup(
    session: AsyncSession, deal: Deal, code: str | None, settings: Settings
) -> bool:
    """The seller confirms a pickup with the code the buyer's page shows: the deal completes as
    the buyer's approval would. A wrong code is counted (and kept, so the page must not roll it
    back: this returns ``False`` rather than raising); after ``MAX_CODE_ATTEMPTS`` wrong codes
    only the buyer can approve."""
    if deal.status != DealStatus.PICKUP_PENDING or deal.handover_code is None:
        raise deals.illegal(deal, Trigger.HANDOVER_CONFIRMED.value, Actor.SELLER)
    if deal.handover_attempts >= MAX_CODE_ATTEMPTS:
        raise BadRequest(
            _("Too many wrong codes: the buyer approves the item on their own page instead.")
        )
    typed = "".join(ch for ch in (code or "") if ch.isdigit())
    if not secrets.compare_digest(typed, deal.handover_code):
        deal.handover_attempts += 1
        await session.flush()
        return False
    await flows.fire(session, deal, Trigger.HANDOVER_CONFIRMED, Actor.SELLER, settings)
    return True


async def start_payment(
    session: AsyncSession,
    link: OfferLink,
    deal: Deal,
    return_path: str,
    settings: Settings,
    method: Method = Method.CARD,
) -> str:
    """The winning buyer starts paying by ``method``: its provider's checkout URL."""
    await _winner(session, link, deal)
    _, token = await payments.start(session, deal, settings, method)
    return provider_for(settings, method).checkout_url(settings.base_url, token, return_path)


async def buyer_disputes(
    session: AsyncSession, link: OfferLink, deal: Deal, reason: str | None, settings: Settings
) -> Deal:
    """The winning buyer reports a problem with the item: the deal goes to dispute with the
    reason, which both parties and the operator see; the money stays held."""
    await _winner(session, link, deal)
    if not reason:
        raise FieldError("reason", _("Say what is wrong with the item, so we can look into it."))
    deal.dispute_reason = reason
    return await flows.fire(session, deal, Trigger.BUYER_DENIED, Actor.BUYER, settings)


async def not_received_from(
    session: AsyncSession, deal: Deal, settings: Settings
) -> datetime | None:
    """When the buyer's page offers "not received": a datetime, or None outside transit."""
    if deal.status != DealStatus.SHIPPING_IN_PROGRESS:
        return None
    return await flows.not_received_opens(session, deal, settings)


async def buyer_not_received(
    session: AsyncSession, link: OfferLink, deal: Deal, settings: Settings
) -> Deal:
    """The winning buyer reports that the parcel has not arrived: the deal goes to dispute
    ("not received"), the money stays held. Only once the usual delivery time
    (``not_received_after_days``) has passed since the hand-over to the carrier."""
    await _winner(session, link, deal)
    if deal.status == DealStatus.SHIPPING_IN_PROGRESS:
        opens = await flows.not_received_opens(session, deal, settings)
        if opens is not None and clock.now() < opens:
            when = i18n.when(opens, ZoneInfo(settings.time_zone), "long")
            raise Conflict(
                _(
                    "Parcels usually take a few days. If it has still not arrived, you can "
                    "report it from %(when)s."
                )
                % {"when": when}
            )
    return await flows.fire(session, deal, Trigger.BUYER_NOT_RECEIVED, Actor.BUYER, settings)


# --- every deal ends: the seller's recourse at a pickup --------------------------------------

# What the seller of a pickup may report instead of confirming the handover, worded for the
# dispute (stored as this English text, shown in each reader's language); "other" needs the
# seller's own words.
PICKUP_PROBLEMS = {
    "took": N_("The buyer took the item without giving the handover code."),
    "no_show": N_("The buyer did not come to the handover."),
}


async def seller_reports_problem(
    session: AsyncSession, deal: Deal, kind: str | None, text: str | None, settings: Settings
) -> Deal:
    """The seller of a pickup reports a problem before the 7 days run out (the buyer took the
    item without the code, did not come, or something else, in their words): the deal goes to
    the manual dispute with the seller's reason, and the money stays held rather than being
    refunded when the pickup deadline passes."""
    if deal.status != DealStatus.PICKUP_PENDING:
        raise deals.illegal(deal, Trigger.SELLER_REPORTED_PROBLEM.value, Actor.SELLER)
    deal.dispute_reason = pickup_problem_reason(kind, text)
    return await flows.fire(session, deal, Trigger.SELLER_REPORTED_PROBLEM, Actor.SELLER, settings)


def pickup_problem_reason(kind: str | None, text: str | None) -> str:
    """The dispute's reason for the seller's choice (``took``, ``no_show``, or ``other`` in
    their own words); a missing choice or words is a ``FieldError`` on that field."""
    if kind == "other":
        if not text:
            raise FieldError("reason", _("Say what happened, so we can look into it."))
        return text
    if kind in PICKUP_PROBLEMS:
        return PICKUP_PROBLEMS[kind]
    raise FieldError("problem", _("Choose what happened."))


def reason_read(reason: str | None) -> str | None:
    """A dispute's reason as the reader reads it: one of the fixed reasons (the seller's at a
    pickup, a parcel that did not arrive) in the page's language, anything else as the party
    wrote it."""
    if reason == lifecycle.NOT_RECEIVED_REASON:
        return _("The parcel did not arrive.")
    if reason == lifecycle.LOST_REASON:
        return _("The carrier lost the parcel.")
    if reason is not None and reason in PICKUP_PROBLEMS.values():
        return _(reason)
    return reason


def seller_opened_dispute(changes: list[DealStatusChange]) -> bool:
    """Whether the deal's dispute was opened by the seller (a pickup problem), not the buyer."""
    return any(c.trigger == Trigger.SELLER_REPORTED_PROBLEM.value for c in changes)


async def buyer_fires(
    session: AsyncSession, link: OfferLink, deal: Deal, trigger: Trigger, settings: Settings
) -> Deal:
    """A lifecycle step the winning buyer takes: arrival, approval or denial of the item."""
    await _winner(session, link, deal)
    return await flows.fire(session, deal, trigger, Actor.BUYER, settings)


# --- disputes decided on evidence: return then refund -------------------------------------------


@dataclass(frozen=True)
class Return:
    """A return then refund under way, as both parties' pages show it: where the item goes,
    by when the buyer sends it, and once sent its carrier, tracking number and time, and by
    when the seller confirms its receipt."""

    address: str
    send_by: datetime | None
    carrier: str | None = None
    tracking: str | None = None
    sent_at: datetime | None = None
    confirm_by: datetime | None = None

    @property
    def sent(self) -> bool:
        return self.sent_at is not None


async def dispute_return(session: AsyncSession, deal: Deal) -> Return | None:
    """The deal's return then refund, while it runs (the deal in dispute); None otherwise."""
    returning = deal.dispute_return
    if returning is None or deal.status not in (
        DealStatus.SHIPPING_REVIEW_DENIED,
        DealStatus.PICKUP_DENIED,
    ):
        return None
    timers = await repository.timers_of(session, deal.id)
    sent_at = returning.get("sentAt")
    return Return(
        address=str(returning.get("address") or ""),
        send_by=_due(timers, Trigger.RETURN_NOT_SENT),
        carrier=returning.get("carrier"),
        tracking=returning.get("tracking"),
        sent_at=None if not sent_at else datetime.fromisoformat(sent_at),
        confirm_by=_due(timers, Trigger.RETURN_CONFIRM_EXPIRED),
    )


def _due(timers: list[DealTimer], trigger: Trigger) -> datetime | None:
    """When the deadline ``trigger`` falls due (the latest set); None if there is none."""
    due = [t.due_at for t in timers if t.trigger == trigger.value]
    return max(due, default=None)


async def buyer_returns(
    session: AsyncSession,
    link: OfferLink,
    deal: Deal,
    carrier: str | None,
    tracking: str | None,
    settings: Settings,
) -> Deal:
    """The winning buyer has sent the item back, as we decided: the carrier and tracking
    number, which the seller then sees. The seller's deadline to confirm its receipt starts."""
    await _winner(session, link, deal)
    if not carrier:
        raise FieldError("carrier", _("Give the carrier that has the package."))
    if not tracking:
        raise FieldError("tracking", _("Give the package's tracking number."))
    return await flows.return_sent(session, deal, carrier, tracking, settings)


async def seller_has_return(session: AsyncSession, deal: Deal, settings: Settings) -> Deal:
    """The seller confirms that the item the buyer sent back has come: the buyer is refunded."""
    return await flows.fire(session, deal, Trigger.RETURN_RECEIVED, Actor.SELLER, settings)


# --- conversations ------------------------------------------------------------------------------
#
# A message is no deal action: it is written whatever the deal's version (another buyer's offer
# or a status change since the page was shown must not throw away what a person typed), but
# never on a suspended deal. The deal's row is locked all the same, so a message and an approval
# racing are taken one after the other (``conversations.service.post`` reads who may write).

CLOSED_ENDED = N_("The deal has ended: you can read this conversation, but not write in it.")
CLOSED_SUSPENDED = N_("The deal is suspended: no messages can be written for now.")
CLOSED_OTHER_BUYER = N_(
    "The seller accepted another buyer's offer: no more messages can be written here."
)
CLOSED_NOT_WINNER = N_(
    "You accepted another buyer's offer: no more messages can be written to this buyer."
)
BLOCKED = N_("Our support has stopped you writing messages on this deal.")


@dataclass(frozen=True)
class Talk:
    """One conversation as a party's page shows it: the buyer's link, the name the seller knows
    the buyer by (None: "Buyer n", with ``number``), its visible messages (oldest first),
    whether the reader may write, and if not why (in the page's language)."""

    link_id: uuid.UUID
    name: str | None
    number: int
    messages: list[ConversationMessage]
    closed: str | None
    awaits_answer: bool
    # Messages before those shown: a page shows the latest ``PAGE_MESSAGES`` of a conversation.
    earlier: int = 0


# The most messages of one conversation a page shows, the latest.
PAGE_MESSAGES = 100


def _closed_why(
    deal: Deal, winner: bool, is_suspended: bool, blocked: bool, reader: conversations.Party
) -> str | None:
    if DealStatus(deal.status) in lifecycle.FINAL_STATUSES:
        return _(CLOSED_ENDED)
    if is_suspended:
        return _(CLOSED_SUSPENDED)
    if not conversations.open_for(deal, winner):
        return _(CLOSED_OTHER_BUYER if reader is conversations.Party.BUYER else CLOSED_NOT_WINNER)
    return _(BLOCKED) if blocked else None


def _awaits(
    messages: list[ConversationMessage], reader: conversations.Party, closed: str | None
) -> bool:
    """Whether the other party's message waits for ``reader``'s answer, which they can give."""
    return closed is None and bool(messages) and messages[-1].author == reader.other.value


def _latest(messages: list[ConversationMessage]) -> tuple[list[ConversationMessage], int]:
    """The messages a page shows, and how many before them it does not."""
    return messages[-PAGE_MESSAGES:], max(0, len(messages) - PAGE_MESSAGES)


async def buyer_talk(session: AsyncSession, link: OfferLink, deal: Deal) -> Talk:
    """The buyer's conversation with the seller, as their offer page shows it."""
    conversation = await conversations.of_link(session, link)
    shown = (
        (await conversations.messages_of(session, [conversation.id]))[conversation.id]
        if conversation
        else []
    )
    blocked = conversation is not None and conversation.buyer_blocked_at is not None
    winner = await conversations.is_winner(session, link, deal)
    closed = _closed_why(
        deal, winner, await suspended(session, deal), blocked, conversations.Party.BUYER
    )
    latest, earlier = _latest(shown)
    return Talk(
        link.id,
        None,
        0,
        latest,
        closed,
        _awaits(shown, conversations.Party.BUYER, closed),
        earlier,
    )


async def seller_talks(session: AsyncSession, deal: Deal) -> list[Talk]:
    """Every conversation of the deal as the seller's page shows it, the latest first; with
    each buyer's name where the seller knows it (their latest offer's, or the link's), else
    "Buyer 1", "Buyer 2"... in the order they began (the page's words)."""
    found: list[Conversation] = await conversations.of_deal(session, deal.id)
    if not found:
        return []
    messages = await conversations.messages_of(session, [c.id for c in found])
    links = await offers.links_of(session, deal.id, [c.offer_link_id for c in found])
    named: dict[uuid.UUID, str] = {
        link_id: link.buyer_name for link_id, link in links.items() if link.buyer_name
    }
    for offer in await offers.offers_of(session, deal):  # oldest first: the latest name wins
        if offer.offer_link_id is not None and offer.buyer_name:
            named[offer.offer_link_id] = offer.buyer_name
    numbers: dict[uuid.UUID, int] = {}
    for conversation in sorted(found, key=lambda c: (c.created_at, c.id)):
        if conversation.offer_link_id not in named:
            numbers[conversation.offer_link_id] = len(numbers) + 1
    is_suspended = await suspended(session, deal)
    talks = []
    for conversation in found:
        link = links[conversation.offer_link_id]
        shown = messages[conversation.id]
        winner = await conversations.is_winner(session, link, deal)
        closed = _closed_why(
            deal,
            winner,
            is_suspended,
            conversation.seller_blocked_at is not None,
            conversations.Party.SELLER,
        )
        latest, earlier = _latest(shown)
        talks.append(
            Talk(
                link.id,
                named.get(link.id),
                numbers.get(link.id, 0),
                latest,
                closed,
                _awaits(shown, conversations.Party.SELLER, closed),
                earlier,
            )
        )
    return talks


async def unanswered(session: AsyncSession, deal: Deal) -> int:
    """How many of the deal's conversations wait for an answer the seller can give (none in a
    closed one)."""
    return await conversations.waiting(session, deal, conversations.Party.SELLER)


async def seller_may_write_first(
    session: AsyncSession, deal: Deal, talks: list[Talk]
) -> set[uuid.UUID]:
    """The offer links whose buyer made an offer but never wrote, that the seller may write to
    now (the conversation would take the message)."""
    if DealStatus(deal.status) in lifecycle.FINAL_STATUSES or await suspended(session, deal):
        return set()
    started = {talk.link_id for talk in talks}
    may: set[uuid.UUID] = set()
    for offer in await offers.offers_of(session, deal):
        if offer.offer_link_id is None or offer.offer_link_id in started:
            continue
        winner = offer.status == OfferStatus.APPROVED and offer.buyer_user_id == deal.buyer_user_id
        if conversations.open_for(deal, winner):
            may.add(offer.offer_link_id)
    return may


async def messaging(session: AsyncSession, deal_id: uuid.UUID) -> Deal:
    """The deal behind a capability link, row locked to write or report a message: not as of
    any version (a message is no deal action), but never while it is suspended
    (``DealSuspended``)."""
    return await _acting_on(session, deal_id)


async def buyer_writes(
    session: AsyncSession,
    link: OfferLink,
    deal: Deal,
    text: str | None,
    settings: Settings,
    locale: str | None = None,
) -> ConversationMessage:
    """The holder of ``link`` writes to the seller (``conversations.service.post``'s rules),
    on a page in ``locale``: the language of their e-mail until an offer of theirs says."""
    return await conversations.post(
        session, deal, link, conversations.Party.BUYER, text, settings, locale
    )


async def seller_writes(
    session: AsyncSession,
    deal: Deal,
    link_id: uuid.UUID | None,
    text: str | None,
    settings: Settings,
) -> ConversationMessage:
    """The seller writes to the buyer of offer link ``link_id``: a link of this deal only (any
    other is NotFound, whoever names it)."""
    conversations.cleaned(text, settings)  # the text's refusal first: it is what was typed
    link = (
        None
        if link_id is None
        else (await offers.links_of(session, deal.id, [link_id])).get(link_id)
    )
    if link is None:
        raise NotFound(_("There is no such conversation on this deal."))
    return await conversations.post(session, deal, link, conversations.Party.SELLER, text, settings)


async def seller_reports_message(
    session: AsyncSession, deal: Deal, message_id: uuid.UUID | None, reason: str | None
) -> ConversationMessage:
    """The seller reports a buyer's message on their deal to support."""
    if message_id is None:
        raise NotFound(_("There is no such message on this deal."))
    return await conversations.report(session, deal, conversations.Party.SELLER, message_id, reason)


async def buyer_reports_message(
    session: AsyncSession,
    link: OfferLink,
    deal: Deal,
    message_id: uuid.UUID | None,
    reason: str | None,
) -> ConversationMessage:
    """The buyer reports a message the seller wrote in their conversation to support."""
    if message_id is None:
        raise NotFound(_("There is no such message on this deal."))
    return await conversations.report(
        session, deal, conversations.Party.BUYER, message_id, reason, link
    )
