"""The list page and one deal, byte for byte: the body the deal endpoints have always sent,
written out here as it was first rendered (every field read from the deal as the ORM loads it,
the seller's seven fields made afresh, the allowed actions worked out deal by deal, the price
through ``Decimal``), for deals of every shape a page may hold: prices whole, with cents and
none; sellers full, partial, in another order, with a field too many, JSON ``null`` and SQL
``NULL``; texts beyond ASCII; statuses that take offers and not, with a buyer and without; a
timestamp on the whole second. The rendering may be made faster, never different."""

import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import null, select, update

from dealbroker.core.pagination import PageRequest, page_body
from dealbroker.core.responses import dump
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import actions, lifecycle
from dealbroker.deals.models import Deal
from tests.conftest import SELLER, create_deal

SELLER_FIELDS = ("firstname", "lastname", "phone", "email", "address", "postcode", "town")


def _price(minor: int) -> float | int:
    if minor % 100 == 0:
        return minor // 100
    return float(Decimal(minor) / 100)


def _allowed(deal: Deal, scopes: frozenset[str], actor: lifecycle.Actor) -> dict[str, object]:
    if "deals:write" not in scopes:
        return {"changeStatus": [], "createOfferLink": False}
    status = DealStatus(deal.status)
    return {
        "changeStatus": [s.value for s in lifecycle.allowed_targets(status, actor)],
        "createOfferLink": status in lifecycle.OFFER_STATUSES
        and bool(deal.seller and deal.seller.get("email"))
        and deal.buyer_user_id is None,
    }


def _reference(deal: Deal, url: str, allowed: dict[str, object]) -> dict[str, object]:
    seller = deal.seller
    return {
        "id": deal.id,
        "name": deal.name,
        "description": deal.description,
        "price": None if deal.price_minor is None else _price(deal.price_minor),
        "status": deal.status,
        "seller": None if seller is None else {f: seller.get(f) for f in SELLER_FIELDS},
        "url": url,
        "images": deal.images,
        "packageType": deal.package_type,
        "currency": deal.currency,
        "paymentStatus": deal.payment_status,
        "createdAt": deal.created_at,
        "updatedAt": deal.updated_at,
        "allowedActions": allowed,
        "shippingPrice": None if deal.shipping_minor is None else _price(deal.shipping_minor),
        "shippingPaidBy": None if deal.shipping_minor is None else "buyer",
        "shipment": None if not deal.shipment else _shipment(deal.shipment),
    }


def _shipment(shipment: dict[str, Any]) -> dict[str, object]:
    last = (shipment.get("events") or [None])[-1]
    return {
        "source": shipment.get("source", "integration"),
        "carrier": shipment.get("carrier"),
        "trackingNumber": shipment.get("tracking"),
        "trackingUrl": shipment.get("trackingUrl"),
        "lastEvent": last and last["type"],
        "lastEventAt": last and datetime.fromtimestamp(last["occurredAt"] / 1000, UTC),
    }


async def _deals_of_every_shape(client, caller, sessionmaker) -> None:
    made = [
        await create_deal(client, caller, price=price, images=images)
        for price, images in (
            (4500, ["https://cdn.example.com/1.jpg", "https://cdn.example.com/2.jpg"]),
            (0.1, []),
            (19.99, ["https://cdn.example.com/3.jpg"]),
            (99_999.99, []),
            (10_000_000, []),
            (0.01, []),
        )
    ]
    made.append(await create_deal(client, caller, seller={"email": "solo@example.com"}))
    made.append(await create_deal(client, caller, seller=None, price=None, name=None))
    bare = await client.post("/deals/v1/deals", json={}, headers=caller.headers)
    assert bare.status_code == 201
    made.append(bare.json())
    changes: list[dict[str, Any]] = [
        {"seller": {"town": "Tromsø", "email": "ådne@example.com", "firstname": "Ådne"}},
        {"seller": {**SELLER, "nickname": "not in the body"}},
        {"seller": dict(reversed(SELLER.items()))},  # every field, in another order
        {"seller": null()},  # SQL NULL, where the API stores JSON null
        {"status": DealStatus.AD, "name": 'Sofa "Grå" \u2014 3 seter\n\U0001f6cb'},
        {
            "status": DealStatus.SHIPPING_IN_PROGRESS,
            "images": ["https://cdn.example.com/æøå.jpg"],
            "shipment": {
                "source": "carrier",
                "carrier": "Bring",
                "tracking": "370438101000000123",
                "trackingUrl": "https://tracking.bring.com/tracking/370438101000000123",
                "events": [
                    {"type": "booked", "occurredAt": 1795000000000},
                    {"type": "picked_up", "occurredAt": 1795000000123, "location": "Oslo"},
                ],
            },
        },
        {"status": DealStatus.SIGNED, "buyer_user_id": uuid.uuid4(), "payment_status": "pending"},
        {"status": DealStatus.AD, "buyer_user_id": uuid.uuid4(), "shipping_minor": 149_50},
        {"updated_at": datetime(2026, 11, 22, 12, 0, tzinfo=UTC)},
    ]
    async with sessionmaker() as session, session.begin():
        for deal, values in zip(made, changes, strict=True):
            deal_id = uuid.UUID(deal["id"])
            await session.execute(update(Deal).where(Deal.id == deal_id).values(**values))


async def _read_only(client, caller) -> dict[str, str]:
    """Headers with a token of ``caller``'s integration that has ``deals:read`` alone."""
    response = await client.post(
        "/oauth2/token",
        data={"grant_type": "client_credentials", "scope": "deals:read"},
        auth=(caller.client_id, caller.client_secret),
    )
    assert response.status_code == 200, response.text
    assert response.json()["scope"] == "deals:read"
    return {"Authorization": f"Bearer {response.json()['access_token']}"}


async def test_the_list_and_the_deal_are_the_bodies_first_rendered(
    app, client, caller, sessionmaker
):
    await _deals_of_every_shape(client, caller, sessionmaker)
    async with sessionmaker() as session:
        deals = list(
            await session.scalars(
                select(Deal)
                .where(Deal.integration_id == caller.integration_id)
                .order_by(Deal.created_at.desc(), Deal.id.desc())
            )
        )
    assert len(deals) == 9
    deal_url = app.state.links.deal_url
    actor = actions.api_actor(app.state.settings)
    for headers, scopes in (
        (caller.headers, frozenset({"deals:read", "deals:write"})),
        (await _read_only(client, caller), frozenset({"deals:read"})),
    ):
        for number, size in ((1, 20), (1, 3), (2, 3), (3, 3), (4, 3)):
            response = await client.get(
                f"/deals/v1/deals?page={number}&pageSize={size}", headers=headers
            )
            assert response.status_code == 200
            shown = deals[(number - 1) * size : number * size]
            items = [_reference(d, deal_url(d.id), _allowed(d, scopes, actor)) for d in shown]
            expected = dump(page_body(PageRequest(number, size), len(deals), items))
            assert response.content == expected, (number, size)
        for deal in deals:
            response = await client.get(f"/deals/v1/deals/{deal.id}", headers=headers)
            assert response.status_code == 200
            expected = dump(_reference(deal, deal_url(deal.id), _allowed(deal, scopes, actor)))
            assert response.content == expected
