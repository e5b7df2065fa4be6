"""What an integration writes with the client openapi-python-client generates from
``/openapi.json`` (as ``dealbroker_openapi``): the suite type-checks it with the generated
package (``mypy --strict``) and runs it against a real server. Arguments: the server's base
URL, then the demo integration's client id and secret."""

import asyncio
import base64
import sys
import uuid

from dealbroker_openapi import AuthenticatedClient, Client
from dealbroker_openapi.api.authentication import issue_token
from dealbroker_openapi.api.deals import change_deal_status, create_deal, get_deal
from dealbroker_openapi.api.health import ping
from dealbroker_openapi.models import (
    DealCreate,
    DealOut,
    DealStatus,
    IssueTokenBody,
    IssueTokenBodyGrantType,
    Pong,
    Problem,
    Seller,
    StatusChange,
    TokenResponse,
)


def token(base: str, client_id: str, client_secret: str) -> str:
    """The token endpoint takes the client's credentials as HTTP Basic."""
    basic = base64.b64encode(f"{client_id}:{client_secret}".encode()).decode()
    with AuthenticatedClient(base_url=base, token=basic, prefix="Basic") as client:
        answer = issue_token.sync(
            client=client,
            body=IssueTokenBody(grant_type=IssueTokenBodyGrantType.CLIENT_CREDENTIALS),
        )
    assert isinstance(answer, TokenResponse), answer
    assert answer.token_type.lower() == "bearer"
    return answer.access_token


def deal_flow(client: AuthenticatedClient) -> uuid.UUID:
    """Create a deal, read it back, move it on, and be refused an illegal move."""
    created = create_deal.sync(
        client=client,
        body=DealCreate(name="Road bike", price=4500, seller=Seller(email="kari@example.com")),
        idempotency_key=str(uuid.uuid4()),
    )
    assert isinstance(created, DealOut), created
    assert created.status is DealStatus.DRAFT
    assert created.price == 4500

    read = get_deal.sync(created.id, client=client)
    assert isinstance(read, DealOut), read
    assert (read.id, read.name, read.seller and read.seller.email) == (
        created.id,
        "Road bike",
        "kari@example.com",
    )
    assert DealStatus.AD in read.allowed_actions.change_status

    moved = change_deal_status.sync(created.id, client=client, body=StatusChange(DealStatus.AD))
    assert isinstance(moved, DealOut), moved
    assert moved.status is DealStatus.AD

    refused = change_deal_status.sync_detailed(
        created.id, client=client, body=StatusChange(DealStatus.COMPLETED)
    )
    assert refused.status_code == 409, refused.content
    assert isinstance(refused.parsed, Problem), refused.parsed
    assert refused.parsed.current_status == "Ad"
    return created.id


async def read_async(client: AuthenticatedClient, deal_id: uuid.UUID) -> None:
    """The same operations, awaited: a missing deal is a Problem, the deal moved is read."""
    async with client:
        missing = await get_deal.asyncio_detailed(uuid.uuid4(), client=client)
        assert missing.status_code == 404
        assert isinstance(missing.parsed, Problem), missing.parsed
        assert missing.parsed.status == 404
        found = await get_deal.asyncio(deal_id, client=client)
    assert isinstance(found, DealOut), found
    assert found.status is DealStatus.AD


def main(base: str, client_id: str, client_secret: str) -> None:
    with Client(base_url=base) as anonymous:
        pong = ping.sync(client=anonymous)
    assert isinstance(pong, Pong), pong

    access = token(base, client_id, client_secret)
    with AuthenticatedClient(base_url=base, token=access, raise_on_unexpected_status=True) as api:
        deal_id = deal_flow(api)
    async_api = AuthenticatedClient(base_url=base, token=access, raise_on_unexpected_status=True)
    asyncio.run(read_async(async_api, deal_id))


if __name__ == "__main__":
    main(*sys.argv[1:4])
