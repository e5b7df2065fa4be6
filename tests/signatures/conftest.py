"""The eID tests' fixtures."""

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from dealbroker.app import create_app
from tests.oidc import Provider
from tests.signatures.eid import eid_settings


@pytest.fixture
async def eid_app(provider: Provider, db_url: str, engine: AsyncEngine) -> AsyncIterator[object]:
    """The app signing with eID at the requesting module's ``provider`` (an OpenID provider on
    loopback); a module takes it as its ``app`` where its tests sign with eID."""
    application = create_app(eid_settings(provider, db_url), engine)
    async with application.router.lifespan_context(application):
        yield application
