"""Dispute evidence on both parties' pages: statements and photos while the deal is in dispute,
each side seeing both, photos served only under the deal's own links, a 6-photo limit that two
racing uploads cannot pass, and nothing added once the operator has decided.

On SQLite and PostgreSQL (the ``client`` fixture's backends)."""

import asyncio
import html
import io
import json
import re
import uuid
from contextlib import AsyncExitStack
from datetime import timedelta

import httpx
from PIL import Image
from prometheus_client import REGISTRY

from dealbroker.app import create_app
from dealbroker.deals import flows
from dealbroker.evidence.intake import MAX_PHOTO_BYTES
from tests.conftest import BASE_URL, SELLER, make_settings
from tests.evidence import hostile
from tests.lifecycle_helpers import SETTINGS
from tests.processes import cli
from tests.web.evidence import disputed, photo_ids, upload
from tests.web.pages import forms, outbox_of, paid, signed_deal, status_of, submit


def photos_left(page: str) -> str:
    return re.findall(r'data-photos-left="(\d+)"', page)[0]


async def test_both_parties_add_statements_and_photos_and_see_each_others(
    client, caller, sessionmaker
):
    deal, seller, buyer = await disputed(client, caller)
    seller_page = (await client.get(seller)).text
    assert "data-evidence" in seller_page
    assert photos_left(seller_page) == "6"

    said = await submit(client, seller, "evidence", statement="He took it & ran <b>off</b>.")
    assert said.status_code == 303
    assert "done=evidence-statement" in said.headers["location"]
    said = await submit(client, buyer, "evidence", statement="I paid; the code was not asked.")
    assert said.status_code == 303

    sent = await upload(client, seller, hostile.jpeg_with_gps())
    assert sent.status_code == 303
    assert "done=evidence-photo" in sent.headers["location"]
    assert (await upload(client, buyer, hostile.png())).status_code == 303

    for page_url, _me in ((seller, "seller"), (buyer, "buyer")):
        page = (await client.get(page_url)).text
        text = html.unescape(page)
        assert "He took it & ran <b>off</b>." in text  # shown as typed, escaped
        assert "<b>off</b>" not in page
        assert "I paid; the code was not asked." in text
        assert re.findall(r'data-statement="(\w+)"', page) == ["seller", "buyer"]
        assert re.findall(r'data-photo-party="(\w+)"', page) == ["seller", "buyer"]
        assert photos_left(page) == "5"
        for photo in photo_ids(page):  # each party opens both photos, under their own link
            served = await client.get(f"{page_url.split('?')[0]}/evidence/{photo}")
            assert served.status_code == 200
            assert served.headers["content-type"] == "image/jpeg"
            assert served.headers["cache-control"] == "no-store"
            assert served.headers["x-content-type-options"] == "nosniff"
            assert served.headers["content-disposition"] == "inline"
            kept = Image.open(io.BytesIO(served.content))
            assert kept.format == "JPEG"
            assert not kept.getexif()

    # Each statement tells the other party, once; photos tell no one.
    told = [m for m in await outbox_of(sessionmaker, deal) if m.kind == "evidence_added"]
    assert sorted(m.to_email == SELLER["email"] for m in told) == [False, True]
    to_seller = next(m for m in told if m.to_email == SELLER["email"])
    assert "the buyer added a statement" in to_seller.subject


async def test_deals_show_lists_the_evidence_and_disputes_photo_saves_one(
    client, caller, db_url, tmp_path
):
    deal, seller, buyer = await disputed(client, caller)
    await submit(client, buyer, "evidence", statement="Scratched frame.")
    await upload(client, buyer, hostile.jpeg_with_gps((320, 240)))

    shown = await asyncio.to_thread(cli, db_url, "deals", "show", deal["id"])
    assert shown.returncode == 0, shown.stderr
    evidence = json.loads(shown.stdout)["evidence"]
    assert [(s["party"], s["text"]) for s in evidence["statements"]] == [
        ("buyer", "Scratched frame.")
    ]
    (photo,) = evidence["photos"]
    assert (photo["party"], photo["width"], photo["height"]) == ("buyer", 240, 320)
    assert photo["contentType"] == "image/jpeg"
    assert photo["storage"] == "database"

    out = tmp_path / "photo.jpg"
    saved = await asyncio.to_thread(
        cli, db_url, "disputes", "photo", deal["id"], photo["id"], "--out", str(out)
    )
    assert saved.returncode == 0, saved.stderr
    import hashlib

    assert hashlib.sha256(out.read_bytes()).hexdigest() == photo["sha256"]
    assert len(out.read_bytes()) == photo["bytes"]
    again = await asyncio.to_thread(
        cli, db_url, "disputes", "photo", deal["id"], photo["id"], "--out", str(out)
    )
    assert again.returncode == 1
    assert "exists already" in again.stderr
    other = await asyncio.to_thread(
        cli, db_url, "disputes", "photo", deal["id"], str(uuid.uuid4()), "--out", str(out) + "2"
    )
    assert other.returncode == 1
    assert "No such photo" in other.stderr


async def test_a_photo_is_served_only_under_its_own_deals_links(client, caller):
    deal, seller, buyer = await disputed(client, caller)
    await upload(client, seller, hostile.jpeg_with_gps())
    (photo,) = photo_ids((await client.get(seller)).text)
    _, other_seller, other_buyer = await disputed(client, caller)
    assert (await client.get(f"{seller}/evidence/{photo}")).status_code == 200
    for elsewhere in (other_seller, other_buyer.split("?")[0]):
        assert (await client.get(f"{elsewhere}/evidence/{photo}")).status_code == 404
    forged = seller.rsplit("/", 1)[0] + "/" + "0" * 43
    assert (await client.get(f"{forged}/evidence/{photo}")).status_code == 404
    assert (await client.get(f"{seller}/evidence/not-a-uuid")).status_code == 404


async def test_a_buyer_whose_offer_was_not_approved_sees_and_adds_nothing(client, caller, app):
    from tests.conftest import create_deal
    from tests.web.pages import BUYER_SIGNS, offer_link, path

    deal = await create_deal(client, caller, price=10)
    stranger = await offer_link(client, caller, deal)
    buyer = await offer_link(client, caller, deal)
    await submit(client, stranger, "offer", price="10", shippingType="Pickup", email="a@x.example")
    await submit(client, buyer, "offer", price="10", shippingType="Pickup", email="b@x.example")
    seller = path(deal["url"])
    await submit(client, seller, "sign", full_name="Kari", consent="yes")
    offer_ids = re.findall(r'data-offer="([^"]+)"', (await client.get(seller)).text)
    await submit(client, seller, "approve", offer=offer_ids[1])
    await submit(client, buyer, "sign", **BUYER_SIGNS)
    await paid(client, seller, buyer)
    await submit(client, seller, "problem", problem="took")
    await upload(client, seller, hostile.jpeg_with_gps())
    (photo,) = photo_ids((await client.get(seller)).text)
    assert (await client.get(f"{buyer.split('?')[0]}/evidence/{photo}")).status_code == 200

    # The declined offerer's link on the same deal: no evidence, no photo, no additions.
    page = (await client.get(stranger)).text
    assert "data-evidence" not in page
    assert (await client.get(f"{stranger.split('?')[0]}/evidence/{photo}")).status_code == 404
    token_path = stranger.split("?")[0]
    # Their page has no form left; a valid token for it, as a form on it would carry.
    version = re.findall(r'name="version" value="(\d+)"', (await client.get(seller)).text)[0]
    form = {"csrf": app.state.links.form_token(token_path), "version": version}
    posted = await client.post(
        f"{token_path}/-/evidence", data={**form, "statement": "I also saw it"}
    )
    assert posted.status_code == 400
    assert "Only the buyer whose offer was approved" in html.unescape(posted.text)
    posted = await client.post(
        f"{token_path}/-/evidence-photo",
        data=form,
        files={"photo": ("p.png", hostile.png(), "image/png")},
    )
    assert posted.status_code == 400
    page = (await client.get(seller)).text
    assert "I also saw it" not in page
    assert len(photo_ids(page)) == 1


async def test_non_photos_are_refused_on_the_page_in_its_language(client, caller):
    deal, seller, buyer = await disputed(client, caller)
    refused = await upload(client, seller, hostile.TEXT, "photo.jpg")
    assert refused.status_code == 400
    assert 'data-field-error="photo"' in refused.text
    assert "not a photo we can read" in html.unescape(refused.text)
    await client.get(f"{seller}?lang=nb")  # the seller chooses Norwegian
    refused = await upload(client, seller, hostile.png_bomb(), "bomb.png")
    assert refused.status_code == 400
    assert 'data-field-error="photo"' in refused.text
    assert "for stort" in html.unescape(refused.text)  # Bokmål: too large
    assert photos_left((await client.get(seller)).text) == "6"


async def test_an_oversized_upload_is_refused_before_it_is_read(client, caller):
    deal, seller, buyer = await disputed(client, caller)
    page = await client.get(seller)
    form = forms(page.text)["evidence-photo"]
    action = form.pop("action")
    big = b"\xff\xd8" + b"\0" * (MAX_PHOTO_BYTES + 100 * 1024)
    refused = await client.post(action, data=form, files={"photo": ("big.jpg", big)})
    assert refused.status_code == 413
    # A body just over the photo's bound but within the route's cap reaches the form: 400.
    over = b"\xff\xd8" + b"\0" * MAX_PHOTO_BYTES
    refused = await client.post(action, data=form, files={"photo": ("big.jpg", over)})
    assert refused.status_code == 400
    assert "at most 10 MB" in html.unescape(refused.text)
    # Every other form keeps the small cap.
    statement = forms(page.text)["evidence"]
    too_big = await client.post(
        statement.pop("action"), data={**statement, "statement": "x" * (300 * 1024)}
    )
    assert too_big.status_code == 413


async def test_six_photos_at_most_even_when_two_uploads_race(client, caller):
    deal, seller, buyer = await disputed(client, caller)
    photo = hostile.jpeg_with_gps((64, 64))
    for _ in range(5):
        assert (await upload(client, seller, photo)).status_code == 303
    page = await client.get(seller)
    assert photos_left(page.text) == "1"
    form = forms(page.text)["evidence-photo"]
    action = form.pop("action")
    raced = await asyncio.gather(
        *(
            client.post(action, data=form, files={"photo": ("p.jpg", photo, "image/jpeg")})
            for _ in range(2)
        )
    )
    assert sorted(r.status_code for r in raced) == [303, 409]
    refused = next(r for r in raced if r.status_code == 409)
    assert "You have added 6 photos" in html.unescape(refused.text)
    page = (await client.get(seller)).text
    assert len(photo_ids(page)) == 6
    assert photos_left(page) == "0"
    assert "evidence-photo" not in forms(page)
    # The buyer's six are their own.
    assert photos_left((await client.get(buyer)).text) == "6"


async def test_nothing_is_added_once_the_dispute_is_decided(client, caller, sessionmaker):
    deal, seller, buyer = await disputed(client, caller)
    await submit(client, buyer, "evidence", statement="Before the decision.")
    await upload(client, buyer, hostile.png())
    stale = (await client.get(seller)).text
    async with sessionmaker() as session, session.begin():
        await flows.resolve_dispute(
            session, uuid.UUID(deal["id"]), flows.DisputeOutcome.REFUND, SETTINGS
        )
    assert (await status_of(client, caller, deal))[0] == "Refunded"

    for page_url in (seller, buyer):
        page = (await client.get(page_url)).text
        assert "data-evidence-closed" in page
        assert "Before the decision." in page
        assert "evidence-photo" not in forms(page)  # the forms are gone
    # A form from before the decision, even at the deal's current version, is refused in the
    # page's words.
    from dealbroker.deals.models import Deal

    async with sessionmaker() as session:
        version = str((await session.get(Deal, uuid.UUID(deal["id"]))).version)
    form = forms(stale)["evidence"] | {"version": version}
    refused = await client.post(form.pop("action"), data={**form, "statement": "Too late"})
    assert refused.status_code == 409
    assert "Evidence can no longer be added" in html.unescape(refused.text)
    form = forms(stale)["evidence-photo"] | {"version": version}
    refused = await client.post(
        form.pop("action"), data=form, files={"photo": ("p.png", hostile.png(), "image/png")}
    )
    assert refused.status_code == 409
    assert "Too late" not in (await client.get(seller)).text
    assert len(photo_ids((await client.get(seller)).text)) == 1


async def test_a_deal_never_in_dispute_has_no_evidence_section(client, caller):
    deal, seller, buyer = await signed_deal(client, caller, "Pickup")
    await paid(client, seller, buyer)
    assert "data-evidence" not in (await client.get(seller)).text
    page = (await client.get(seller)).text
    form = forms(page)["handover"] if "handover" in forms(page) else forms(page)["pickup"]
    posted = await client.post(
        form["action"].rsplit("/-/", 1)[0] + "/-/evidence",
        data={k: v for k, v in form.items() if k != "action"} | {"statement": "early"},
    )
    assert posted.status_code == 409


async def test_a_statement_is_bounded_and_a_post_takes_one_file(client, caller):
    deal, seller, buyer = await disputed(client, caller)
    refused = await submit(client, seller, "evidence", statement="x" * 4001)
    assert refused.status_code == 400
    assert 'data-field-error="statement"' in refused.text
    assert "at most 4000 characters" in html.unescape(refused.text)
    assert (await submit(client, seller, "evidence", statement="   ")).status_code == 400
    page = await client.get(seller)
    form = forms(page.text)["evidence-photo"]
    action = form.pop("action")
    two = [("photo", ("a.png", hostile.png(), "image/png")) for _ in range(2)]
    assert (await client.post(action, data=form, files=two)).status_code == 400
    page = (await client.get(seller)).text
    assert "data-no-statements" in page
    assert photos_left(page) == "6"


def refusals(reason: str) -> float:
    return (
        REGISTRY.get_sample_value("dealbroker_evidence_photo_refusals_total", {"reason": reason})
        or 0
    )


async def post_streamed(client, page: str, form: dict, photo: bytes, pulled: list[str]):
    """The photo form posted as a stream that notes in ``pulled`` each part the server read:
    nothing is read unless the app asks for the body."""
    action = form.pop("action")
    boundary = "photo-upload-boundary"
    head = "".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
        for k, v in form.items()
    ).encode()
    file_head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="photo"; filename="b.png"\r\n'
        "Content-Type: image/png\r\n\r\n"
    ).encode()

    async def body():
        pulled.append("fields")
        yield head
        pulled.append("photo")
        yield file_head + photo + f"\r\n--{boundary}--\r\n".encode()

    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    return await client.post(action, content=body(), headers=headers)


async def test_a_photo_that_could_not_be_kept_is_refused_before_its_upload_is_read(
    client, caller, sessionmaker
):
    deal, seller, buyer = await disputed(client, caller)
    bomb = hostile.png_bomb(7000, colour=True)  # 49 megapixels: decoded, if it were read
    photo = hostile.jpeg_with_gps((64, 64))
    for _ in range(5):
        assert (await upload(client, seller, photo)).status_code == 303
    stale = forms((await client.get(seller)).text)["evidence-photo"]  # one place left
    assert (await upload(client, seller, photo)).status_code == 303

    counted = refusals("no_places")
    pulled: list[str] = []
    refused = await post_streamed(client, seller, dict(stale), bomb, pulled)
    assert refused.status_code == 409
    assert "You have added 6 photos" in html.unescape(refused.text)
    assert pulled == []  # not a byte of the form was read, so nothing was decoded
    assert refusals("no_places") == counted + 1

    # Once the dispute is decided, the buyer's upload is refused as unread, in their words.
    buyer_form = forms((await client.get(buyer)).text)["evidence-photo"]
    async with sessionmaker() as session, session.begin():
        await flows.resolve_dispute(
            session, uuid.UUID(deal["id"]), flows.DisputeOutcome.REFUND, SETTINGS
        )
    counted = refusals("closed")
    pulled = []
    refused = await post_streamed(client, buyer, buyer_form, bomb, pulled)
    assert refused.status_code == 409
    assert "Evidence can no longer be added" in html.unescape(refused.text)
    assert pulled == []
    assert refusals("closed") == counted + 1


def big_enough(side: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (side, side), (120, 60, 30)).save(out, "PNG")
    return out.getvalue()


async def test_each_party_has_an_hourly_pixel_budget_that_refused_photos_spend_too(
    client, caller, db_url, engine, frozen_clock
):
    """1 megapixel per photo, 2 per hour: a photo refused once decoded spends its pixels too;
    the third is refused before it is read (429, Retry-After, in the page's language), by
    every server process (another app on the database); an hour later it is taken."""
    deal, seller, buyer = await disputed(client, caller)
    bounded = make_settings(
        db_url, evidence_photo_max_pixels=1_000_000, evidence_pixels_per_party_per_hour=2_000_000
    )
    one_megapixel = big_enough(1000)
    truncated = one_megapixel[: len(one_megapixel) // 2]  # its header says 1 megapixel
    async with AsyncExitStack() as stack:
        apps = []
        for _ in range(2):
            other_app = create_app(bounded, engine)
            await stack.enter_async_context(other_app.router.lifespan_context(other_app))
            transport = httpx.ASGITransport(app=other_app)
            apps.append(
                await stack.enter_async_context(
                    httpx.AsyncClient(transport=transport, base_url=BASE_URL)
                )
            )
        first, second = apps
        too_many = await upload(first, seller, big_enough(1001))
        assert too_many.status_code == 400
        assert "at most 1 megapixels" in html.unescape(too_many.text)
        refused = await upload(first, seller, truncated)
        assert refused.status_code == 400
        assert "not a photo we can read" in html.unescape(refused.text)
        assert (await upload(first, seller, one_megapixel)).status_code == 303
        frozen_clock[0] += timedelta(minutes=10)

        counted = refusals("pixel_budget")
        form = forms((await second.get(seller)).text)["evidence-photo"]
        pulled: list[str] = []
        spent = await post_streamed(second, seller, form, one_megapixel, pulled)
        assert spent.status_code == 429
        assert spent.headers["retry-after"] == str(50 * 60)  # the first charge leaves the hour
        assert "Try again in 50 minutes" in html.unescape(spent.text)
        assert pulled == []
        assert refusals("pixel_budget") == counted + 1
        # The buyer's budget is their own.
        assert (await upload(second, buyer, one_megapixel)).status_code == 303

        await second.get(f"{seller}?lang=nb")  # the seller chooses Norwegian
        spent = await upload(second, seller, one_megapixel)
        assert spent.status_code == 429
        assert "Prøv igjen om 50 minutter" in html.unescape(spent.text)

        frozen_clock[0] += timedelta(minutes=50, seconds=1)
        assert (await upload(first, seller, one_megapixel)).status_code == 303
        assert photos_left((await client.get(seller)).text) == "4"
