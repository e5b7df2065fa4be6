"""The person's claims from the issuer's userinfo endpoint (``DEALBROKER_EID_USERINFO``), as
Vipps Login gives them: ``oidc-provider`` in "eid-userinfo" mode keeps name, birthdate and the
national identity number out of the ID token. With "auto" (the default) the callback reads
userinfo with the access token and keeps the same evidence as from an ID token that carried
them; a userinfo answer naming another ``sub`` (OpenID Connect Core 5.3.2), or a userinfo
endpoint that is down, fails the signature with the page that says nothing was signed; "never"
keeps to the ID token (a signature then without the person's name), not asking userinfo."""

from collections.abc import AsyncIterator, Iterator
from datetime import date

import pytest

from dealbroker.app import create_app
from dealbroker.signatures import eid
from tests.conftest import make_settings
from tests.oidc import Provider
from tests.signatures.eid import (
    CALLBACK,
    at_broker,
    eid_settings,
    flows_of,
    refused,
    seller_deal,
    statuses,
    to_provider,
)

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def providers() -> Iterator[dict[str, Provider]]:
    running = {mode: Provider(CALLBACK, mode) for mode in MODES}
    yield running
    for provider in running.values():
        provider.stop()


MODES = ("eid-userinfo", "eid-userinfo-other-sub", "eid-userinfo-down")


@pytest.fixture
def mode() -> str:
    return "eid-userinfo"


@pytest.fixture
def userinfo() -> str:
    return "auto"


@pytest.fixture
async def app(providers, mode, userinfo, db_url, engine) -> AsyncIterator[object]:
    settings = eid_settings(providers[mode], db_url, eid_userinfo=userinfo)
    application = create_app(settings, engine)
    async with application.router.lifespan_context(application):
        yield application


async def test_the_claims_from_userinfo(client, caller, sessionmaker):
    deal, seller = await seller_deal(client, caller)
    back = await client.get(await at_broker(await to_provider(client, seller, "sign"), "sigrid"))
    assert back.status_code == 303, back.text
    assert back.headers["location"] == f"{seller}?done=signed"
    assert await statuses(sessionmaker, deal["id"], "Seller") == ["Initiated", "Completed"]
    (flow,) = await flows_of(sessionmaker, deal["id"])
    assert (flow.name, flow.birthdate, flow.subject) == (
        "Sigrid Selger",
        date(1980, 4, 1),
        "sigrid",
    )
    assert flow.national_id_hash
    assert flow.acr  # from the ID token, which userinfo does not override


@pytest.mark.parametrize(("mode", "userinfo"), [("eid-userinfo-down", "never")])
async def test_never_keeps_to_the_id_token(client, caller, sessionmaker):
    # The provider's userinfo is down: "never" does not ask it.
    deal, seller = await seller_deal(client, caller)
    back = await client.get(await at_broker(await to_provider(client, seller, "sign"), "sigrid"))
    assert back.status_code == 303, back.text
    (flow,) = await flows_of(sessionmaker, deal["id"])
    assert (flow.status, flow.subject, flow.name, flow.national_id_hash) == (
        "Completed",
        "sigrid",
        None,
        None,
    )


@pytest.mark.parametrize("mode", ["eid-userinfo-other-sub"])
async def test_another_subjects_userinfo_is_refused(client, caller, sessionmaker):
    deal, seller = await seller_deal(client, caller)
    callback = await at_broker(await to_provider(client, seller, "sign"), "sigrid")
    await refused(client, sessionmaker, deal, callback)
    (flow,) = await flows_of(sessionmaker, deal["id"])
    assert "another subject" in flow.failure
    assert flow.name is None


@pytest.mark.parametrize("mode", ["eid-userinfo-down"])
async def test_userinfo_down_is_refused(client, caller, sessionmaker):
    deal, seller = await seller_deal(client, caller)
    callback = await at_broker(await to_provider(client, seller, "sign"), "sigrid")
    await refused(client, sessionmaker, deal, callback)
    (flow,) = await flows_of(sessionmaker, deal["id"])
    assert "503" in flow.failure


def test_which_claims_are_complete(db_url):
    settings = make_settings(db_url, eid_national_id_claim="socialno")
    person = {"sub": "s", "name": "Sigrid Selger", "birthdate": "1980-04-01", "socialno": "1"}
    assert eid.complete(person, settings)
    assert eid.complete({**person, "name": "", "given_name": "Sigrid"}, settings)
    assert not eid.complete({**person, "name": ""}, settings)
    assert not eid.complete({**person, "socialno": None}, settings)
    assert not eid.complete({k: v for k, v in person.items() if k != "birthdate"}, settings)
