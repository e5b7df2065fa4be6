"""The pages of a parcel we book at the deployment's carrier (``DEALBROKER_CARRIER``): the
seller's "ship it" step (size, deliveries, deadline, "Book shipping"), the label being made,
booked (label PDF, QR code, tracking), delayed and refused; the label's route and its bounds;
the sandbox carrier's buttons and tracking page; the carrier's news on both pages; the buyer's
return label in a return then refund. The sandbox's simulated carrier, booked by the real
parcel job."""

import base64
import html
import io
import re
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
import segno
from sqlalchemy.ext.asyncio import AsyncEngine

from dealbroker.app import create_app
from dealbroker.carriers.base import Booking, Delivery, PackageSize
from dealbroker.core import clock
from dealbroker.core.settings import Settings
from dealbroker.deals import flows
from dealbroker.parcels import service as parcels
from dealbroker.parcels.models import Parcel
from dealbroker.parcels.tasks import ParcelJob
from tests.conftest import BASE_URL, make_settings
from tests.web.english import english_in
from tests.web.pages import (
    forms,
    next_card,
    paid,
    post_action,
    signed_deal,
    status_of,
    submit,
)

KEY = "parcel-pages-" + "k" * 32


@pytest.fixture
def settings(db_url: str) -> Settings:
    return make_settings(db_url, carrier="simulated", secret_key=KEY)


@pytest.fixture
async def app(settings: Settings, engine: AsyncEngine) -> AsyncIterator[object]:
    """The sandbox's app with the simulated carrier (``client`` and ``caller`` use it)."""
    application = create_app(settings, engine)
    async with application.router.lifespan_context(application):
        yield application


async def _shipping_pending(client, caller) -> tuple[dict, str, str]:
    deal, seller, buyer = await signed_deal(client, caller, "Carrier", price=450)
    await paid(client, seller, buyer)
    assert await status_of(client, caller, deal) == ("Shipping_Pending", "Paid")
    return deal, seller, buyer


async def _parcels(sessionmaker, deal) -> list[Parcel]:
    async with sessionmaker() as session:
        found = await parcels.parcels_of(session, await _deal(session, deal))
        return found


async def _deal(session, deal):  # type: ignore[no-untyped-def]
    from dealbroker import parties

    return await parties.shown(session, uuid.UUID(deal["id"]))


async def _book(client, seller: str, delivery: str = "pickup_point"):
    return await submit(client, seller, "book", delivery=delivery)


async def _booked(client, caller, sessionmaker, settings) -> tuple[dict, str, str, Parcel]:
    deal, seller, buyer = await _shipping_pending(client, caller)
    assert (await _book(client, seller)).status_code == 303
    assert await ParcelJob(sessionmaker, settings).run_once() == 1
    [parcel] = await _parcels(sessionmaker, deal)
    assert parcel.status == "booked"
    return deal, seller, buyer, parcel


def text(page: str) -> str:
    """What the page reads as: tags gone, spaces as one."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


async def test_the_seller_books_and_the_page_shows_the_label_being_made(
    client, caller, sessionmaker, settings
) -> None:
    deal, seller, buyer = await _shipping_pending(client, caller)
    page = (await client.get(seller)).text
    assert "handover" not in forms(page)  # no typing of a carrier and a tracking number
    assert 'data-parcel-size="Medium"' in page  # the deal has no packageType: Medium
    offered = re.findall(r'name="delivery" value="(\w+)"', page)
    assert offered == ["mailbox", "parcel_locker", "pickup_point"]
    assert "data-hand-in-by" in page
    assert "Book the shipping on this page and hand the parcel in" in next_card(page)
    assert "tracking number" not in next_card(page)
    buyer_card = next_card((await client.get(buyer)).text)
    assert "Book the shipping and hand the parcel in; you can follow it here." in buyer_card
    # No delivery chosen, or one not offered: refused beside the field, nothing booked.
    refused = await submit(client, seller, "book", delivery="drone")
    assert refused.status_code == 400
    assert 'data-field-error="delivery"' in refused.text
    assert await _parcels(sessionmaker, deal) == []
    booked = await _book(client, seller)
    assert booked.status_code == 303
    assert "done=booking" in booked.headers["location"]
    page = (await client.get(seller)).text
    assert 'data-parcel-status="booking"' in page
    assert "http-equiv" not in page  # no page reloading itself (WCAG 2.2.1)
    assert f'href="{seller}" data-show-label' in page
    assert "book" not in forms(page)
    # Booked by the parcel job: the label, the QR code, the tracking number and link.
    assert await ParcelJob(sessionmaker, settings).run_once() == 1
    [parcel] = await _parcels(sessionmaker, deal)
    page = (await client.get(seller)).text
    assert 'data-parcel-status="booked"' in page
    assert f"{seller}/parcels/{parcel.id}/label.pdf" in page
    assert '<svg role="img"' in page
    assert parcel.qr_code in page
    assert parcel.tracking_number in page
    assert f'href="{parcel.tracking_url}"' in page
    assert "Hand the parcel in at a Sandbox Post counter or drop-off point by" in text(page)


async def test_a_double_click_books_once(client, caller, sessionmaker) -> None:
    deal, seller, buyer = await _shipping_pending(client, caller)
    page = (await client.get(seller)).text
    form = forms(page)["book"]
    action = form.pop("action")
    first = await client.post(action, data={**form, "delivery": "mailbox"})
    second = await client.post(action, data={**form, "delivery": "mailbox"})
    assert first.status_code == 303
    assert second.status_code == 409  # the page it was posted from is out of date
    assert len(await _parcels(sessionmaker, deal)) == 1


async def test_the_label_is_this_deals_only(client, caller, sessionmaker, settings) -> None:
    deal, seller, buyer, parcel = await _booked(client, caller, sessionmaker, settings)
    label = await client.get(f"{seller}/parcels/{parcel.id}/label.pdf")
    assert label.status_code == 200
    assert label.headers["content-type"] == "application/pdf"
    assert label.headers["content-disposition"].startswith("attachment; filename=")
    assert label.headers["cache-control"] == "no-store"
    assert label.content.startswith(b"%PDF")
    other, other_seller, _ = await _shipping_pending(client, caller)
    for url in (
        f"{other_seller}/parcels/{parcel.id}/label.pdf",  # another deal's link
        f"{seller}/parcels/{uuid.uuid4()}/label.pdf",
        f"{seller}/parcels/not-a-uuid/label.pdf",
        f"{seller[:-4]}xxxx/parcels/{parcel.id}/label.pdf",  # a forged signature
        f"{buyer.split('?')[0]}/parcels/{parcel.id}/label.pdf",  # the buyer's: returns only
    ):
        assert (await client.get(url)).status_code == 404, url


async def test_a_refusal_says_why_and_offers_another_delivery(
    client, caller, sessionmaker, settings
) -> None:
    deal, seller, buyer = await _shipping_pending(client, caller)
    await _book(client, seller, "mailbox")
    [parcel] = await _parcels(sessionmaker, deal)
    async with sessionmaker() as session, session.begin():
        await parcels.booking_refused(session, parcel.id, "invalid_address", "BOOK_INPUT-057")
    page = (await client.get(seller)).text
    assert 'data-parcel-status="failed"' in page
    assert (
        "Sandbox Post could not book the parcel: it does not know the delivery address or its "
        "postcode." in text(page)
    )
    assert "BOOK_INPUT" not in page  # the carrier's code is for the log
    assert re.search(r'value="parcel_locker" checked', page)  # not the refused mailbox again
    assert (await _book(client, seller, "pickup_point")).status_code == 303
    assert [p.status for p in await _parcels(sessionmaker, deal)] == ["failed", "booking"]


async def test_a_delayed_booking_says_we_keep_trying(client, caller, sessionmaker) -> None:
    deal, seller, buyer = await _shipping_pending(client, caller)
    await _book(client, seller)
    [parcel] = await _parcels(sessionmaker, deal)
    async with sessionmaker() as session, session.begin():
        retry = clock.now() + timedelta(minutes=2)
        await parcels.booking_delayed(session, parcel.id, "TimeoutError()", retry)
    page = (await client.get(seller)).text
    shown = text(page)
    assert "Sandbox Post is not answering at the moment" in shown
    assert "We keep trying and e-mail you as soon as it is." in shown
    assert "The deadline to hand the parcel in stays" in shown
    assert "data-show-label" not in page


async def test_a_booking_found_again_without_its_label(client, caller, sessionmaker, settings):
    deal, seller, buyer = await _shipping_pending(client, caller)
    await _book(client, seller)
    [parcel] = await _parcels(sessionmaker, deal)
    found_again = Booking(
        carrier="simulated",
        service="sim-pickup_point",
        shipment_id="SIM1",
        tracking_number="SIM2",
        tracking_url="http://testserver/sandbox/parcels/SIM2",
        label_pdf=b"",
    )
    async with sessionmaker() as session, session.begin():
        await parcels.booked(session, parcel.id, found_again, settings)
    page = (await client.get(seller)).text
    assert "data-label-missing" in page
    assert "support@market.example.com" in page
    assert "label.pdf" not in page
    assert "SIM2" in page
    assert (await client.get(f"{seller}/parcels/{parcel.id}/label.pdf")).status_code == 404


async def test_a_carriers_own_qr_image_is_shown_as_it_drew_it(
    client, caller, sessionmaker, settings
):
    """A carrier that draws its own QR code (Bring's PNG, which its pickup points scan) has it
    shown inline as given, with no code typed beside it; the page fetches nothing."""
    deal, seller, buyer = await _shipping_pending(client, caller)
    await _book(client, seller)
    [parcel] = await _parcels(sessionmaker, deal)
    drawn = io.BytesIO()
    segno.make("370438101000000042", error="m").save(drawn, kind="png", scale=6)
    with_image = Booking(
        carrier="simulated",
        service="sim-pickup_point",
        shipment_id="SIM1",
        tracking_number="SIM2",
        tracking_url="http://testserver/sandbox/parcels/SIM2",
        label_pdf=b"%PDF-1.4 a label",
        qr_png=drawn.getvalue(),
    )
    async with sessionmaker() as session, session.begin():
        await parcels.booked(session, parcel.id, with_image, settings)
    page = (await client.get(seller)).text
    encoded = base64.b64encode(drawn.getvalue()).decode()
    assert f'<img class="qr-code" src="data:image/png;base64,{encoded}"' in page
    assert 'alt="QR code to show at the counter"' in page
    assert "<figcaption>" not in page  # no label-free code to write on the parcel
    assert "Show the QR code there, or print the label and stick it on the parcel." in text(page)


async def test_the_sandbox_buttons_move_the_parcel_and_both_pages_show_it(
    client, caller, sessionmaker, settings
) -> None:
    deal, seller, buyer, parcel = await _booked(client, caller, sessionmaker, settings)
    for event, status in (
        ("picked_up", "Shipping_In_Progress"),
        ("in_transit", "Shipping_In_Progress"),
        ("damaged", "Shipping_In_Progress"),
        ("ready_for_pickup", "Shipping_In_Progress"),
        ("delivered", "Shipping_Arrived"),
    ):
        moved = await submit(client, seller, "carrier", event=event)
        assert moved.status_code == 303, moved.text
        assert "done=parcel-event" in moved.headers["location"]
        assert (await status_of(client, caller, deal))[0] == status
        waiting = f"ready to be collected at {parcels.SIMULATED_POINT}"
        # Where to collect it, while it waits there (then the buyer has it).
        assert (waiting in text((await client.get(buyer)).text)) is (event == "ready_for_pickup")
    refused = await post_action(client, seller, "carrier", {"event": "teleported"})
    assert refused.status_code == 400
    buyer_page = text((await client.get(buyer)).text)
    seller_page = text((await client.get(seller)).text)
    for shown in (buyer_page, seller_page):
        assert "The parcel is booked with Sandbox Post" in shown
        assert "Sandbox Post picked the parcel up" in shown
        assert "The parcel has been handed in" in shown  # the carrier's own words
        assert f"Collect it at: {parcels.SIMULATED_POINT}" in shown
        assert f"Tracking number {parcel.tracking_number}" in shown
    assert "you have 24 hours to report a problem with the item, with photos" in buyer_page
    assert "24 hours to report a problem with the item, with photos" not in seller_page
    assert f'href="{parcel.tracking_url}"' in (await client.get(buyer)).text


async def test_a_parcel_the_carrier_lost_is_not_said_to_be_the_buyers_report(
    client, caller, sessionmaker, settings
) -> None:
    """The carrier's loss opens the dispute: both pages say the carrier lost the parcel, and
    neither says a party reported a problem (nor quotes the carrier as if it had)."""
    deal, seller, buyer, _ = await _booked(client, caller, sessionmaker, settings)
    for event in ("picked_up", "lost"):
        assert (await submit(client, seller, "carrier", event=event)).status_code == 303
    assert await status_of(client, caller, deal) == ("Shipping_Review_Denied", "Paid")
    seller_page = (await client.get(seller)).text
    buyer_page = (await client.get(buyer)).text
    for page in (seller_page, buyer_page):
        assert "The carrier lost the parcel; the money stays held." in next_card(page)
        assert "The carrier lost the parcel." in text(page)
        assert "reported a problem" not in text(page)
        assert "“The carrier lost the parcel.”" not in text(page)


async def test_the_sandbox_tracking_page_shows_the_events_and_nothing_personal(
    client, caller, sessionmaker, settings
) -> None:
    deal, seller, buyer, parcel = await _booked(client, caller, sessionmaker, settings)
    await submit(client, seller, "carrier", event="picked_up")
    page = await client.get(f"/sandbox/parcels/{parcel.tracking_number}")
    assert page.status_code == 200
    shown = text(page.text)
    assert "The parcel is booked with Sandbox Post" in shown
    assert "Sandbox Post picked the parcel up" in shown
    for personal in ("Nordmann", "Ola", "Kongens gate", "Storgata", "+47", "@example.com"):
        assert personal not in page.text, personal
    assert (await client.get("/sandbox/parcels/SIM000")).status_code == 404


async def test_the_buyer_gets_a_return_label_we_pay_for(
    client, caller, sessionmaker, settings
) -> None:
    deal, seller, buyer, parcel = await _booked(client, caller, sessionmaker, settings)
    await submit(client, seller, "carrier", event="delivered")
    assert (await submit(client, buyer, "deny", reason="Cracked")).status_code == 303
    async with sessionmaker() as session, session.begin():
        await flows.resolve_dispute(
            session,
            uuid.UUID(deal["id"]),
            flows.DisputeOutcome.RETURN_THEN_REFUND,
            settings,
            return_address="Kari Nordmann, Storgata 1, 0155 Oslo",
        )
    page = (await client.get(buyer)).text
    assert "data-return-label-coming" in page
    assert "return-sent" not in forms(page)  # no carrier and tracking number to type
    assert await ParcelJob(sessionmaker, settings).run_once() == 1
    returned = [p for p in await _parcels(sessionmaker, deal) if p.kind == "return"]
    assert [p.status for p in returned] == ["booked"]
    page = (await client.get(buyer)).text
    shown = text(page)
    assert "We pay for sending it back: use the return label we booked for you." in shown
    assert "You pay the postage" not in shown
    base = buyer.split("?")[0]
    assert f"{base}/parcels/{returned[0].id}/label.pdf" in page
    assert '<svg role="img"' in page
    label = await client.get(f"{base}/parcels/{returned[0].id}/label.pdf")
    assert label.status_code == 200
    assert label.headers["content-type"] == "application/pdf"
    # The seller's link gives no return label, nor the buyer's the outbound one.
    assert (await client.get(f"{seller}/parcels/{returned[0].id}/label.pdf")).status_code == 404
    assert (await client.get(f"{base}/parcels/{parcel.id}/label.pdf")).status_code == 404
    seller_page = text((await client.get(seller)).text)
    assert "We booked the buyer a return label and pay for it" in seller_page
    # The sandbox buttons now move the return parcel: its hand-in is the buyer's sending.
    assert (await submit(client, seller, "carrier", event="picked_up")).status_code == 303
    assert 'data-return-sent="yes"' in (await client.get(buyer)).text


def test_bring_offers_no_parcel_locker_and_a_mailbox_only_where_the_size_fits() -> None:
    bring = Settings(carrier="bring")  # type: ignore[arg-type]
    assert parcels.deliveries(bring, PackageSize.MEDIUM) == [
        Delivery.MAILBOX,
        Delivery.PICKUP_POINT,
    ]
    assert parcels.deliveries(bring, PackageSize.LARGE) == [Delivery.PICKUP_POINT]
    none = Settings()
    assert parcels.deliveries(none, PackageSize.SMALL) == []


@pytest.mark.parametrize("language", ["nb", "sv"])
async def test_every_parcel_state_reads_without_english(
    app, client, caller, sessionmaker, settings, language
) -> None:
    """The ship-it step, its refusals, the label being made, delayed, refused and booked, the
    carrier's news on both pages, its tracking page and the buyer's return label, in nb and sv
    (the carrier's own words are quoted as it gave them, marked as English)."""
    person = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url=BASE_URL,
        headers={"Accept-Language": language},
    )
    found: dict[str, str] = {}

    async def read(url: str, where: str, status: int = 200) -> str:
        page = await person.get(url)
        assert page.status_code == status, (where, page.status_code)
        for said in english_in(page.text):
            found.setdefault(said, where)
        return page.text

    async def post(url: str, name: str, where: str, **data: str) -> None:
        form = dict(forms(await read(url, where))[name])
        answer = await person.post(form.pop("action"), data={**form, **data, "confirm": "yes"})
        assert answer.status_code in (303, 400, 409), (where, answer.status_code)
        for said in english_in(answer.text):
            found.setdefault(said, f"{where} (answer)")

    async with person:
        deal, seller, buyer = await _shipping_pending(client, caller)
        await read(seller, "ship it")
        await post(seller, "book", "book, nothing chosen")
        await post(seller, "book", "book", delivery="mailbox")
        await read(seller, "booking")
        [parcel] = await _parcels(sessionmaker, deal)
        async with sessionmaker() as session, session.begin():
            retry = clock.now() + timedelta(minutes=2)
            await parcels.booking_delayed(session, parcel.id, "TimeoutError()", retry)
        await read(seller, "delayed")
        async with sessionmaker() as session, session.begin():
            await parcels.booking_refused(session, parcel.id, "route_not_served", "no")
        await read(seller, "refused")
        await post(seller, "book", "book again", delivery="pickup_point")
        assert await ParcelJob(sessionmaker, settings).run_once() == 1
        await read(seller, "booked")
        await read(buyer, "buyer, booked")
        for event in ("picked_up", "in_transit", "damaged", "ready_for_pickup", "delivered"):
            await post(seller, "carrier", f"sandbox carrier {event}", event=event)
            await read(seller, f"seller after {event}")
            await read(buyer, f"buyer after {event}")
        await post(seller, "carrier", "sandbox carrier, unknown event", event="teleported")
        booked = next(p for p in await _parcels(sessionmaker, deal) if p.status == "booked")
        await read(f"/sandbox/parcels/{booked.tracking_number}", "tracking page")
        await read("/sandbox/parcels/SIM0", "tracking page, unknown", 404)
        await post(buyer, "deny", "buyer denies", reason="Sprukket")
        async with sessionmaker() as session, session.begin():
            await flows.resolve_dispute(
                session,
                uuid.UUID(deal["id"]),
                flows.DisputeOutcome.RETURN_THEN_REFUND,
                settings,
                return_address="Kari Nordmann, Storgata 1, 0155 Oslo",
            )
        await read(buyer, "return label coming")
        assert await ParcelJob(sessionmaker, settings).run_once() == 1
        await read(buyer, "return label")
        await read(seller, "seller, return label")
    assert found == {}, "\n".join(f"{t!r}  <- {w}" for t, w in found.items())
