"""A deal in dispute through the pages, and the evidence card's photo uploads, for the evidence
tests of every area."""

import re

from tests.web.pages import forms, paid, signed_deal, status_of, submit


async def disputed(client, caller) -> tuple[dict, str, str]:
    """A pickup deal, paid, whose seller reported that the buyer took the item: in dispute."""
    deal, seller, buyer = await signed_deal(client, caller, "Pickup")
    await paid(client, seller, buyer)
    await submit(client, seller, "problem", problem="took")
    assert (await status_of(client, caller, deal))[0] == "Pickup_Denied"
    return deal, seller, buyer


async def upload(client, page_url: str, data: bytes, name: str = "photo.jpg"):
    page = await client.get(page_url)
    form = forms(page.text)["evidence-photo"]
    action = form.pop("action")
    return await client.post(action, data=form, files={"photo": (name, data, "image/jpeg")})


def photo_ids(page: str) -> list[str]:
    return re.findall(r'data-photo="([0-9a-f-]{36})"', page)
