"""The deal endpoints: create, get, list, change status; tenant isolation; idempotency."""

import re
import uuid

import pytest
from sqlalchemy import select

from dealbroker.deals.models import DealStatusChange
from tests.conftest import BASE_URL, SELLER, create_deal, row_counts

DEAL_KEYS = {
    "id",
    "name",
    "description",
    "price",
    "status",
    "seller",
    "url",
    "images",
    "packageType",
    "currency",
    "paymentStatus",
    "createdAt",
    "updatedAt",
    "allowedActions",
    "shippingPrice",
    "shippingPaidBy",
    "shipment",
}


async def test_create_returns_the_interface_body(client, caller):
    body = {
        "name": "Road bike",
        "description": "Aluminium frame, 56 cm.",
        "price": 4500.5,
        "images": ["https://cdn.example.com/1.jpg", "http://cdn.example.com/2.jpg"],
        "packageType": "Large",
        "seller": SELLER,
    }
    response = await client.post("/deals/v1/deals", json=body, headers=caller.headers)
    assert response.status_code == 201
    assert response.headers["content-type"] == "application/json"
    deal = response.json()
    assert set(deal) == DEAL_KEYS
    uuid.UUID(deal["id"])
    assert deal["status"] == "Draft"
    assert deal["name"] == body["name"]
    assert deal["description"] == body["description"]
    assert deal["price"] == 4500.5
    assert deal["images"] == body["images"]
    assert deal["packageType"] == "Large"
    assert deal["seller"] == SELLER
    assert deal["currency"] == "NOK"
    assert deal["paymentStatus"] is None
    assert deal["shippingPrice"] is deal["shippingPaidBy"] is None
    assert deal["shipment"] is None
    assert re.fullmatch(rf"{BASE_URL}/d/{deal['id']}/[A-Za-z0-9_-]{{43}}", deal["url"])


async def test_every_field_is_optional(client, caller):
    response = await client.post("/deals/v1/deals", json={}, headers=caller.headers)
    assert response.status_code == 201
    deal = response.json()
    assert deal["status"] == "Draft"
    assert deal["name"] is deal["price"] is deal["seller"] is deal["packageType"] is None
    assert deal["images"] == []


async def test_whole_prices_are_integers_and_cents_are_kept(client, caller):
    assert (await create_deal(client, caller, price=100))["price"] == 100
    assert (await create_deal(client, caller, price=0.1))["price"] == 0.1
    assert (await create_deal(client, caller, price=19.99))["price"] == 19.99


async def test_partial_seller_is_kept_with_nulls(client, caller):
    deal = await create_deal(client, caller, seller={"email": "solo@example.com"})
    assert deal["seller"] == {**dict.fromkeys(SELLER), "email": "solo@example.com"}


async def test_get_returns_what_create_returned(client, caller):
    deal = await create_deal(client, caller)
    response = await client.get(f"/deals/v1/deals/{deal['id']}", headers=caller.headers)
    assert response.status_code == 200
    assert response.json() == deal


async def test_get_unknown_deal_is_404(client, caller):
    response = await client.get(f"/deals/v1/deals/{uuid.uuid4()}", headers=caller.headers)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["title"] == "Not Found"


async def test_tenant_isolation(client, caller, other):
    """Integration B can neither list, read, change nor make offer links for A's deals."""
    deal = await create_deal(client, caller)
    listed = await client.get("/deals/v1/deals", headers=other.headers)
    assert listed.json() == {
        "page": {"pageSize": 20, "pageNumber": 1, "totalPages": 0, "totalCount": 0},
        "items": [],
    }
    path = f"/deals/v1/deals/{deal['id']}"
    assert (await client.get(path, headers=other.headers)).status_code == 404
    cancel = {"status": "Cancelled"}
    assert (
        await client.post(f"{path}/status", json=cancel, headers=other.headers)
    ).status_code == 404
    assert (
        await client.post(f"/deals/{deal['id']}/status", json=cancel, headers=other.headers)
    ).status_code == 404
    assert (await client.post(f"{path}/offer", json={}, headers=other.headers)).status_code == 404
    # And A's deal is untouched.
    assert (await client.get(path, headers=caller.headers)).json() == deal


async def test_list_is_newest_first(client, caller):
    ids = [(await create_deal(client, caller, name=f"deal {i}"))["id"] for i in range(3)]
    response = await client.get("/deals/v1/deals", headers=caller.headers)
    body = response.json()
    assert set(body) == {"page", "items"}
    assert [d["id"] for d in body["items"]] == ids[::-1]
    assert body["page"] == {"pageSize": 20, "pageNumber": 1, "totalPages": 1, "totalCount": 3}


@pytest.mark.parametrize("path", ["/deals/v1/deals/{id}/status", "/deals/{id}/status"])
async def test_cancel_a_draft(client, caller, sessionmaker, path):
    deal = await create_deal(client, caller)
    response = await client.post(
        path.format(id=deal["id"]), json={"status": "Cancelled"}, headers=caller.headers
    )
    assert response.status_code == 200
    cancelled = response.json()
    assert cancelled["status"] == "Cancelled"
    changed = ("status", "updatedAt", "allowedActions")
    assert {k: v for k, v in cancelled.items() if k not in changed} == {
        k: v for k, v in deal.items() if k not in changed
    }
    assert cancelled["allowedActions"] == {"changeStatus": [], "createOfferLink": False}
    async with sessionmaker() as session:
        history = list(
            await session.scalars(
                select(DealStatusChange)
                .where(DealStatusChange.deal_id == uuid.UUID(deal["id"]))
                .order_by(DealStatusChange.created_at)
            )
        )
    assert [(h.from_status, h.to_status) for h in history] == [
        (None, "Draft"),
        ("Draft", "Cancelled"),
    ]


async def test_illegal_status_change_is_409_with_allowed_statuses(client, caller):
    deal = await create_deal(client, caller)
    path = f"/deals/v1/deals/{deal['id']}/status"
    response = await client.post(path, json={"status": "Completed"}, headers=caller.headers)
    assert response.status_code == 409
    body = response.json()
    assert body["currentStatus"] == "Draft"
    assert body["allowedStatuses"] == ["Ad", "Cancelled"]
    assert "Completed" in body["detail"]
    await client.post(path, json={"status": "Cancelled"}, headers=caller.headers)
    again = await client.post(path, json={"status": "Cancelled"}, headers=caller.headers)
    assert again.status_code == 409
    assert again.json()["allowedStatuses"] == []


async def test_sandbox_may_walk_the_lifecycle(client, caller):
    deal = await create_deal(client, caller)
    path = f"/deals/v1/deals/{deal['id']}/status"
    for status in [
        "Ad",
        "Signed",
        "Shipping_Pending",
        "Shipping_In_Progress",
        "Shipping_Arrived",
        "Completed",
    ]:
        response = await client.post(path, json={"status": status}, headers=caller.headers)
        assert response.status_code == 200, response.text
        assert response.json()["status"] == status


async def test_status_of_unknown_deal_is_404(client, caller):
    response = await client.post(
        f"/deals/v1/deals/{uuid.uuid4()}/status",
        json={"status": "Cancelled"},
        headers=caller.headers,
    )
    assert response.status_code == 404


class TestIdempotency:
    async def test_same_key_and_body_replays_the_first_answer(self, client, caller, sessionmaker):
        headers = {**caller.headers, "Idempotency-Key": "create-1"}
        first = await client.post("/deals/v1/deals", json={"name": "A"}, headers=headers)
        counts = await row_counts(sessionmaker)
        second = await client.post("/deals/v1/deals", json={"name": "A"}, headers=headers)
        assert second.status_code == 201
        assert second.json() == first.json()
        assert second.headers["idempotent-replayed"] == "true"
        assert await row_counts(sessionmaker) == counts

    async def test_key_order_and_spacing_do_not_matter(self, client, caller):
        headers = {**caller.headers, "Idempotency-Key": "k", "Content-Type": "application/json"}
        first = await client.post(
            "/deals/v1/deals", content=b'{"name":"A","price":1}', headers=headers
        )
        second = await client.post(
            "/deals/v1/deals", content=b'{ "price": 1, "name": "A" }', headers=headers
        )
        assert second.json()["id"] == first.json()["id"]

    async def test_same_key_other_body_is_422(self, client, caller, sessionmaker):
        headers = {**caller.headers, "Idempotency-Key": "create-2"}
        await client.post("/deals/v1/deals", json={"name": "A"}, headers=headers)
        counts = await row_counts(sessionmaker)
        response = await client.post("/deals/v1/deals", json={"name": "B"}, headers=headers)
        assert response.status_code == 422
        assert response.headers["content-type"] == "application/problem+json"
        assert "create-2" in response.json()["detail"]
        assert await row_counts(sessionmaker) == counts

    async def test_keys_are_per_integration(self, client, caller, other):
        a = await client.post(
            "/deals/v1/deals",
            json={"name": "A"},
            headers={**caller.headers, "Idempotency-Key": "k"},
        )
        b = await client.post(
            "/deals/v1/deals", json={"name": "A"}, headers={**other.headers, "Idempotency-Key": "k"}
        )
        assert a.json()["id"] != b.json()["id"]

    async def test_a_failed_request_does_not_burn_the_key(self, client, caller):
        headers = {**caller.headers, "Idempotency-Key": "k"}
        deal = await create_deal(client, caller, seller=None)
        path = f"/deals/v1/deals/{deal['id']}/offer"
        assert (await client.post(path, json={}, headers=headers)).status_code == 400
        retry = await client.post(
            f"/deals/v1/deals/{deal['id']}/status", json={"status": "Cancelled"}, headers=headers
        )
        assert retry.status_code == 200

    async def test_key_expires_after_24_hours(self, client, caller, frozen_clock):
        from datetime import timedelta

        async def headers() -> dict[str, str]:
            # Access tokens live an hour: fetch a fresh one at each point in (frozen) time.
            response = await client.post(
                "/oauth2/token",
                data={"grant_type": "client_credentials"},
                auth=(caller.client_id, caller.client_secret),
            )
            return {
                "Authorization": f"Bearer {response.json()['access_token']}",
                "Idempotency-Key": "daily",
            }

        first = await client.post("/deals/v1/deals", json={"name": "A"}, headers=await headers())
        frozen_clock[0] += timedelta(hours=23)
        replay = await client.post("/deals/v1/deals", json={"name": "A"}, headers=await headers())
        assert replay.json() == first.json()
        frozen_clock[0] += timedelta(hours=2)
        later = await client.post("/deals/v1/deals", json={"name": "A"}, headers=await headers())
        assert later.status_code == 201
        assert later.json()["id"] != first.json()["id"]

    async def test_status_change_replays(self, client, caller):
        deal = await create_deal(client, caller)
        headers = {**caller.headers, "Idempotency-Key": "cancel-1"}
        path = f"/deals/v1/deals/{deal['id']}/status"
        first = await client.post(path, json={"status": "Cancelled"}, headers=headers)
        second = await client.post(path, json={"status": "Cancelled"}, headers=headers)
        assert first.status_code == second.status_code == 200
        assert second.json() == first.json()
