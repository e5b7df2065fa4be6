"""Logging in to the developer portal in tests: an integration with a member of a role, and a
client logged in as that member, through the real path (the login page's e-mail in the outbox,
its link's button).

``await portal_member(client, sessionmaker, "developer")`` returns a ``PortalLogin``; the
client's cookie jar then holds the session (``PortalLogin.cookie`` is its value, for a
browser's context), and ``csrf(page.text)`` reads a page's form token.
"""

import re
import uuid
from dataclasses import dataclass

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.audit.service import Actor
from dealbroker.integrations import service as integrations
from dealbroker.notifications.models import OutboxMessage
from dealbroker.portal import service
from tests.conftest import BASE_URL
from tests.web.login_links import press

COOKIE = "dealbroker-portal"  # http base URL: no __Host- prefix, not Secure
LINK = re.compile(r"(?:https?://[^/\s]+)?(/portal/login/[A-Za-z0-9_-]+)")


@dataclass(frozen=True)
class PortalLogin:
    integration_id: uuid.UUID
    client_id: str
    client_secret: str
    member_id: uuid.UUID
    email: str
    role: str
    cookie: str


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


async def make_integration(
    sessionmaker: async_sessionmaker[AsyncSession], name: str = "Marketplace"
) -> integrations.Credentials:
    async with sessionmaker() as session, session.begin():
        return await integrations.create(session, name)


async def add_member(
    sessionmaker: async_sessionmaker[AsyncSession],
    integration_id: uuid.UUID,
    email: str,
    role: str,
) -> uuid.UUID:
    async with sessionmaker() as session, session.begin():
        member = await service.add(session, integration_id, email, role, Actor("system:test"))
        return member.id


async def last_link(sessionmaker: async_sessionmaker[AsyncSession], email: str) -> str | None:
    """The path of the newest login link e-mailed to ``email``, or None."""
    async with sessionmaker() as session:
        body = await session.scalar(
            select(OutboxMessage.body)
            .where(OutboxMessage.kind == "portal_login_link", OutboxMessage.to_email == email)
            .order_by(OutboxMessage.created_at.desc())
            .limit(1)
        )
    found = LINK.search(body or "")
    return found.group(1) if found else None


async def log_in(
    client: httpx.AsyncClient, sessionmaker: async_sessionmaker[AsyncSession], email: str
) -> httpx.Response:
    """Ask for a link on the login page, press its button; the answer (303 to the portal)."""
    asked = await client.post("/portal/login", data={"email": email})
    assert asked.status_code == 200, asked.text
    path = await last_link(sessionmaker, email)
    assert path is not None, f"no login link was e-mailed to {email}"
    answer = await press(client, path)
    assert answer.status_code == 303, answer.text
    return answer


async def portal_member(
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    role: str = "owner",
    email: str | None = None,
    integration: integrations.Credentials | None = None,
) -> PortalLogin:
    """An integration (new unless given) with a member of ``role`` (``email``, or a fresh
    address), and ``client`` logged in as them."""
    created = integration or await make_integration(sessionmaker)
    address = email or f"{role}-{uuid.uuid4().hex[:8]}@example.com"
    member_id = await add_member(sessionmaker, created.integration.id, address, role)
    answer = await log_in(client, sessionmaker, address)
    assert answer.headers["location"] == "/portal/"
    return PortalLogin(
        created.integration.id,
        created.integration.client_id,
        created.client_secret,
        member_id,
        address,
        role,
        client.cookies[COOKIE],
    )


def other_client(client: httpx.AsyncClient) -> httpx.AsyncClient:
    """Another browser on the same app: no cookies of ``client``'s."""
    return httpx.AsyncClient(transport=client._transport, base_url=BASE_URL)
