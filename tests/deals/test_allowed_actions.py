"""A deal's ``allowedActions`` says exactly what the API accepts: for every status (and the
situations within one that matter), in production and in the sandbox, each action listed
succeeds and each action not listed is refused with its documented code, changing nothing."""

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from dealbroker.app import create_app
from dealbroker.core.statuses import DealStatus
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import Deal
from dealbroker.signatures.service import SignatureType
from tests.conftest import BASE_URL, create_deal, make_settings
from tests.lifecycle_helpers import DealDriver

Step = Callable[[DealDriver], Awaitable[object]]


def _fire(trigger: Trigger, actor: Actor) -> Step:
    return lambda d: d.fire(trigger, actor)


def _rest_in(status: DealStatus) -> Step:
    """Put the deal in ``status`` directly. Only for the statuses a deal passes through within
    one transaction (their ``refund`` effect moves it on to ``Refunded`` at once), so never
    rests in; the property must hold there too."""

    async def run(d: DealDriver) -> None:
        async with d.sessionmaker() as session, session.begin():
            deal = await session.get(Deal, d.deal_id)
            assert deal is not None
            deal.status = status

    return run


SIGNED: list[Step] = [lambda d: d.to_signed("Carrier")]
SHIPPING_PENDING = [*SIGNED, lambda d: d.pay()]
IN_PROGRESS = [*SHIPPING_PENDING, _fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)]
ARRIVED = [*IN_PROGRESS, _fire(Trigger.CARRIER_DELIVERED, Actor.PROVIDER)]
PICKUP_PENDING: list[Step] = [lambda d: d.to_signed("Pickup"), lambda d: d.pay()]

# Situation -> (seller given at creation, the steps from Draft, the status it ends in).
SITUATIONS: dict[str, tuple[bool, list[Step], DealStatus]] = {
    "Draft": (True, [], DealStatus.DRAFT),
    "Draft without a seller": (False, [], DealStatus.DRAFT),
    "Draft with an approved offer": (
        True,
        [lambda d: d.offer(), lambda d: d.approve()],
        DealStatus.DRAFT,
    ),
    "Ad": (True, [lambda d: d.sign(SignatureType.SELLER, Actor.SELLER)], DealStatus.AD),
    "Signed": (True, SIGNED, DealStatus.SIGNED),
    "Cancelled": (True, [_fire(Trigger.CANCEL, Actor.INTEGRATION)], DealStatus.CANCELLED),
    "Shipping_Pending": (True, SHIPPING_PENDING, DealStatus.SHIPPING_PENDING),
    "Shipping_Expired": (
        True,
        [*SHIPPING_PENDING, _rest_in(DealStatus.SHIPPING_EXPIRED)],
        DealStatus.SHIPPING_EXPIRED,
    ),
    "Shipping_In_Progress": (True, IN_PROGRESS, DealStatus.SHIPPING_IN_PROGRESS),
    "Shipping_Returned": (
        True,
        [*IN_PROGRESS, _rest_in(DealStatus.SHIPPING_RETURNED)],
        DealStatus.SHIPPING_RETURNED,
    ),
    "Shipping_Arrived": (True, ARRIVED, DealStatus.SHIPPING_ARRIVED),
    "Shipping_Review_Denied": (
        True,
        [*ARRIVED, _fire(Trigger.BUYER_DENIED, Actor.BUYER)],
        DealStatus.SHIPPING_REVIEW_DENIED,
    ),
    "Completed": (
        True,
        [*ARRIVED, _fire(Trigger.BUYER_APPROVED, Actor.BUYER)],
        DealStatus.COMPLETED,
    ),
    "Refunded": (
        True,
        [*IN_PROGRESS, _fire(Trigger.CARRIER_RETURNED, Actor.PROVIDER)],
        DealStatus.REFUNDED,
    ),
    "Pickup_Pending": (True, PICKUP_PENDING, DealStatus.PICKUP_PENDING),
    "Pickup_Expired": (
        True,
        [*PICKUP_PENDING, _rest_in(DealStatus.PICKUP_EXPIRED)],
        DealStatus.PICKUP_EXPIRED,
    ),
    "Pickup_Denied": (
        True,
        [*PICKUP_PENDING, _fire(Trigger.BUYER_DENIED, Actor.BUYER)],
        DealStatus.PICKUP_DENIED,
    ),
}
# Moving to one of these runs its refund at once: the answer shows the deal Refunded.
PASSING = {DealStatus.SHIPPING_EXPIRED, DealStatus.SHIPPING_RETURNED, DealStatus.PICKUP_EXPIRED}


def test_every_status_has_a_situation():
    assert {status for _, _, status in SITUATIONS.values()} == set(DealStatus)


@pytest.fixture(params=["production", "sandbox"])
async def api(request, db_url, engine) -> AsyncIterator[httpx.AsyncClient]:
    """The API of a deployment in each environment, on the test database."""
    settings = make_settings(db_url, environment=request.param, secret_key="s" * 40)
    application = create_app(settings, engine)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as c:
            yield c


async def _reach(client, caller, sessionmaker, situation: str) -> str:
    """A new deal of ``caller``'s in ``situation``, driven there by the real services."""
    with_seller, steps, status = SITUATIONS[situation]
    deal = await create_deal(client, caller, **({} if with_seller else {"seller": None}))
    driver = DealDriver(sessionmaker, uuid.UUID(deal["id"]), caller.integration_id)
    for step in steps:
        await step(driver)
    assert await driver.status() == status
    return deal["id"]


async def _post_status(api, caller, deal_id: str, status: str) -> httpx.Response:
    return await api.post(
        f"/deals/v1/deals/{deal_id}/status", json={"status": status}, headers=caller.headers
    )


async def _post_offer(api, caller, deal_id: str) -> httpx.Response:
    return await api.post(f"/deals/v1/deals/{deal_id}/offer", json={}, headers=caller.headers)


@pytest.mark.parametrize("situation", list(SITUATIONS))
async def test_listed_is_accepted_and_unlisted_refused(
    situation, api, client, caller, sessionmaker
):
    deal_id = await _reach(client, caller, sessionmaker, situation)
    path = f"/deals/v1/deals/{deal_id}"
    before = (await api.get(path, headers=caller.headers)).json()
    allowed = before["allowedActions"]
    assert set(allowed) == {"changeStatus", "createOfferLink"}

    # Every action not listed is refused with the code the API documents, and changes nothing.
    for target in DealStatus:
        if target.value in allowed["changeStatus"]:
            continue
        response = await _post_status(api, caller, deal_id, target.value)
        assert response.status_code == 409, (target, response.text)
        assert response.json()["allowedStatuses"] == allowed["changeStatus"]
    if not allowed["createOfferLink"]:
        response = await _post_offer(api, caller, deal_id)
        assert response.status_code == 400, response.text
    assert (await api.get(path, headers=caller.headers)).json() == before

    # Every action listed is accepted: each status change on a deal of its own in the situation.
    for target in allowed["changeStatus"]:
        fresh = await _reach(client, caller, sessionmaker, situation)
        response = await _post_status(api, caller, fresh, target)
        assert response.status_code == 200, (target, response.text)
        moved = DealStatus(response.json()["status"])
        assert moved is (DealStatus.REFUNDED if target in PASSING else DealStatus(target))
    if allowed["createOfferLink"]:
        response = await _post_offer(api, caller, deal_id)
        assert response.status_code == 201, response.text


EXPECTED_OUTSIDE_THE_SANDBOX = {
    "Draft": {"changeStatus": ["Cancelled"], "createOfferLink": True},
    "Draft without a seller": {"changeStatus": ["Cancelled"], "createOfferLink": False},
    "Draft with an approved offer": {"changeStatus": ["Cancelled"], "createOfferLink": False},
    "Ad": {"changeStatus": ["Cancelled"], "createOfferLink": True},
    "Signed": {"changeStatus": ["Cancelled"], "createOfferLink": False},
    "Shipping_Pending": {"changeStatus": [], "createOfferLink": False},
    "Completed": {"changeStatus": [], "createOfferLink": False},
}


@pytest.mark.parametrize("situation", list(EXPECTED_OUTSIDE_THE_SANDBOX))
async def test_what_production_allows(situation, client, caller, sessionmaker, db_url, engine):
    deal_id = await _reach(client, caller, sessionmaker, situation)
    settings = make_settings(db_url, environment="production", secret_key="s" * 40)
    application = create_app(settings, engine)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as production:
            deal = await production.get(f"/deals/v1/deals/{deal_id}", headers=caller.headers)
    assert deal.json()["allowedActions"] == EXPECTED_OUTSIDE_THE_SANDBOX[situation]


async def test_sandbox_allows_every_transition_of_the_table(client, caller, sessionmaker):
    deal_id = await _reach(client, caller, sessionmaker, "Shipping_Arrived")
    deal = (await client.get(f"/deals/v1/deals/{deal_id}", headers=caller.headers)).json()
    assert deal["allowedActions"] == {
        "changeStatus": ["Completed", "Shipping_Review_Denied"],
        "createOfferLink": False,
    }


async def test_every_deal_answer_carries_them(client, caller):
    created = await create_deal(client, caller)
    expected = {"changeStatus": ["Ad", "Cancelled"], "createOfferLink": True}
    assert created["allowedActions"] == expected
    listed = (await client.get("/deals/v1/deals", headers=caller.headers)).json()["items"]
    assert [d["allowedActions"] for d in listed] == [expected]
    got = (await client.get(f"/deals/v1/deals/{created['id']}", headers=caller.headers)).json()
    assert got["allowedActions"] == expected
    in_ad = {"changeStatus": ["Signed", "Cancelled"], "createOfferLink": True}
    moved = await _post_status(client, caller, created["id"], "Ad")
    assert moved.json()["allowedActions"] == in_ad
    cancelled = await _post_status(client, caller, created["id"], "Cancelled")
    assert cancelled.json()["allowedActions"] == {"changeStatus": [], "createOfferLink": False}
    # The sandbox triggers answer the deal too, with the same field.
    response = await client.post(
        "/webhooks/v1/dealStatus",
        json={"dealId": (await create_deal(client, caller))["id"], "status": "Ad"},
        headers={"webhook-secret": caller.webhook_secret},
    )
    assert response.status_code == 200, response.text
    assert response.json()["deal"]["allowedActions"] == in_ad


async def test_a_token_without_write_may_do_nothing(client, caller):
    """A token limited to deals:read sees no actions, and indeed each is refused (403) for it;
    a token of the same integration that may write sees them."""
    deal = await create_deal(client, caller)
    token = await client.post(
        "/oauth2/token",
        data={"grant_type": "client_credentials", "scope": "deals:read"},
        auth=(caller.client_id, caller.client_secret),
    )
    assert token.json()["scope"] == "deals:read"
    reader = {"Authorization": f"Bearer {token.json()['access_token']}"}
    path = f"/deals/v1/deals/{deal['id']}"
    got = (await client.get(path, headers=reader)).json()
    assert got["allowedActions"] == {"changeStatus": [], "createOfferLink": False}
    listed = (await client.get("/deals/v1/deals", headers=reader)).json()["items"]
    assert listed[0]["allowedActions"] == got["allowedActions"]
    cancel = await client.post(f"{path}/status", json={"status": "Cancelled"}, headers=reader)
    assert cancel.status_code == 403
    assert (await client.post(f"{path}/offer", json={}, headers=reader)).status_code == 403
    assert deal["allowedActions"] == {"changeStatus": ["Ad", "Cancelled"], "createOfferLink": True}
