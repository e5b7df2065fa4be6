"""The access log: a request can neither forge a line nor leave a capability secret in it.

A penetration test (issue "Security") wrote a forged line with ``GET /x%0a2026-… rid=forged``,
and found the tokens of ``/pay/<token>`` and of the sandbox mailbox logged in full.
"""

import logging
import os
import secrets
import uuid
from urllib.parse import quote, urlsplit

import pytest

from dealbroker.core.request_log import loggable, loggable_path, new_request_id
from tests.conftest import SELLER, create_deal

DEAL = "3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10"


@pytest.mark.parametrize(
    ("path", "logged"),
    [
        ("/deals/v1/deals", "/deals/v1/deals"),
        (f"/deals/v1/deals/{DEAL}/offer", f"/deals/v1/deals/{DEAL}/offer"),
        (f"/d/{DEAL}/SIGNATURE", "/d/…/…"),
        (f"/d/{DEAL}/SIGNATURE/-/sign", "/d/…/…/-/sign"),
        (f"/d/{DEAL}", "/d/…"),
        ("/o/TOKEN", "/o/…"),
        ("/o/TOKEN/-/offer", "/o/…/-/offer"),
        ("/pay/TOKEN", "/pay/…"),
        ("/portal/login/TOKEN", "/portal/login/…"),
        ("/back-office/login/TOKEN", "/back-office/login/…"),
        ("/back-office/login", "/back-office/login"),
        (f"/sandbox/mailbox/{DEAL}/SIGNATURE", "/sandbox/mailbox/…/…"),
        # Whatever a capability path grows, all of it is masked but a form action's name.
        (f"/sandbox/mailbox/{DEAL}/seller/SIGNATURE", "/sandbox/mailbox/…/…/…"),
        (f"/d/{DEAL}/SIGNATURE/payout-account/TOKEN", "/d/…/…/…/…"),
        (f"/d/{DEAL}/SIGNATURE/-/carrier/TOKEN", "/d/…/…/-/carrier/…"),
        ("/o/", "/o/…"),
        ("/pay", "/pay"),
        ("/sandbox/v1/clock/advance", "/sandbox/v1/clock/advance"),
        ("/o/TO\nKEN", "/o/…"),
        (
            "/x\n2026-11-22 12:00:00 INFO GET / 200 rid=forged",
            "/x\\n2026-11-22 12:00:00 INFO GET / 200 rid=forged",
        ),
        ("/x\r\x1b[31m\x00\x7f\x85", "/x\\r\\x1b[31m\\x00\\x7f\\x85"),
        ("/x\u2028y\u202ez", "/x\\u2028y\\u202ez"),
        ("/x\\ny", "/x\\\\ny"),  # a typed backslash cannot pass for an escape
        ("/søknad/ærlig", "/søknad/ærlig"),
    ],
)
def test_loggable_path_masks_secrets_and_escapes_control_characters(path, logged):
    assert loggable_path(path) == logged


def test_our_own_request_ids_are_random_uuid4_hex():
    ids = [new_request_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for rid in ids:
        parsed = uuid.UUID(hex=rid)
        assert (parsed.hex, parsed.version, parsed.variant) == (rid, 4, uuid.RFC_4122)
    # every bit that is not the version's or the variant's varies
    varying = 0
    for rid in ids:
        varying |= int(rid, 16) ^ int(ids[0], 16)
    assert bin(varying).count("1") == 128 - 6


def test_a_forked_process_hands_out_request_ids_of_its_own():
    # Ids are made ahead: a child forked with some pending must not hand out the parent's.
    new_request_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.write(write, " ".join(new_request_id() for _ in range(5)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read().split()
    os.waitpid(pid, 0)
    parent = [new_request_id() for _ in range(300)]
    assert len(child) == 5
    assert not set(child) & set(parent)


def test_loggable_leaves_printable_text_alone():
    assert loggable("Kari Nordmann, Storgata 1") == "Kari Nordmann, Storgata 1"
    assert loggable("a\tb") == "a\\tb"


def log_messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


def assert_single_lines(messages: list[str]) -> None:
    for message in messages:
        assert "\n" not in message, message
        assert "\r" not in message, message


async def test_forged_newline_writes_no_line_of_its_own(client, caplog):
    caplog.set_level(logging.INFO, logger="dealbroker")
    forged = "2026-11-22 12:00:00,000 INFO dealbroker.http GET /ping 200 0.1ms rid=forged"

    await client.get("/x%0a" + quote(forged) + "%0d%0a" + quote(forged))
    await client.get("/ping", headers={"X-Request-Id": "abc\x1b[2Kdef"})

    messages = log_messages(caplog)
    assert_single_lines(messages)
    assert any(m.startswith("GET /x\\n2026-11-22") and "\\r\\n2026" in m for m in messages)
    assert any(m.endswith("rid=abc\\x1b[2Kdef") for m in messages)
    assert "\x1b" not in caplog.text


async def test_capability_links_are_masked_in_the_log(app, client, caller, caplog):
    deal = await create_deal(client, caller, price=10, seller=SELLER)
    created = await client.post(
        f"/deals/v1/deals/{deal['id']}/offer", json={}, headers=caller.headers
    )
    offer = urlsplit(created.json()["url"])
    reference = offer.query.removeprefix("offer=")
    seller = urlsplit(deal["url"]).path
    mailbox = urlsplit(app.state.links.mailbox_url(uuid.UUID(deal["id"]), None)).path
    pay_token = secrets.token_urlsafe(32)
    back = quote(f"{offer.path}?{offer.query}", safe="")
    secret_parts = [
        deal["id"],
        seller.rsplit("/", 1)[1],
        offer.path.rsplit("/", 1)[1],
        reference,
        mailbox.rsplit("/", 1)[1],
        pay_token,
    ]
    caplog.set_level(logging.INFO, logger="dealbroker")

    await client.get(seller)
    await client.post(f"{seller}/-/sign", data={"full_name": "Kari"})
    await client.get(f"{offer.path}?{offer.query}")
    await client.post(f"{offer.path}/-/offer?{offer.query}", data={"price": "10"})
    await client.get(mailbox)
    await client.get(f"/pay/{pay_token}?return={back}")
    await client.post(f"/pay/{pay_token}?return={back}", data={"outcome": "succeeded"})

    messages = log_messages(caplog)
    assert_single_lines(messages)
    for part in secret_parts:
        assert part not in caplog.text
    logged = " ".join(messages)
    for masked in ("GET /d/…/… ", "POST /d/…/…/-/sign ", "GET /o/… ", "POST /o/…/-/offer "):
        assert masked in logged
    for masked in ("GET /sandbox/mailbox/…/…/… ", "GET /pay/… ", "POST /pay/… "):
        assert masked in logged
