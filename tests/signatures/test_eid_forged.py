"""A forged ID token in the issuer's token response, met by the whole signing flow: the real
OpenID provider on loopback answers the token exchange with an ID token that is unsigned
(``alg: none``), signed by a key not in its JWKS, or signed with its own key but for another
audience, by another issuer, expired, or with another flow's nonce. Each is refused with the
page that says nothing was signed, ``signature.status`` ``Failed``, and the reason kept for the
operator."""

from collections.abc import Iterator

import pytest

from tests.oidc import Provider
from tests.signatures.eid import CALLBACK, at_broker, flows_of, refused, seller_deal, to_provider

pytestmark = pytest.mark.server

# The forgery, and what the kept reason names.
FORGERIES = {
    "none": "unsupported_algorithm",
    "other-key": "bad_signature",
    "audience": "aud",
    "issuer": "iss",
    "expired": "expired",
    "nonce": "nonce",
}


@pytest.fixture
def app(eid_app: object) -> object:
    """The app signs with eID at this module's forging provider."""
    return eid_app


@pytest.fixture(scope="module", params=sorted(FORGERIES))
def provider(request: pytest.FixtureRequest) -> Iterator[Provider]:
    running = Provider(CALLBACK, f"eid-forged-{request.param}")
    running.forgery = request.param  # type: ignore[attr-defined]
    yield running
    running.stop()


async def test_a_forged_id_token_is_refused(provider, client, caller, sessionmaker):
    deal, seller = await seller_deal(client, caller)
    callback = await at_broker(await to_provider(client, seller, "sign"), "sigrid")
    await refused(client, sessionmaker, deal, callback)
    (flow,) = await flows_of(sessionmaker, deal["id"])
    assert FORGERIES[provider.forgery] in flow.failure, flow.failure
    assert (flow.name, flow.subject) == (None, None)  # nothing of the forged token is kept
