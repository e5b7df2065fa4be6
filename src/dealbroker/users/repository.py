"""All queries on users."""

import uuid

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core import clock
from dealbroker.core.idempotency import insert_for
from dealbroker.users.models import User


async def user_id_for(
    session: AsyncSession, integration_id: uuid.UUID, email: str, name: str | None = None
) -> uuid.UUID:
    """The id of the user with this email in this integration, created if new.

    Emails compare case-insensitively; two requests creating the same user agree on one row.
    """
    normalized = email.strip().lower()
    insert = insert_for(session)
    stmt = insert(User).values(
        id=uuid.uuid4(),
        integration_id=integration_id,
        email=normalized,
        name=name,
        created_at=clock.now(),
    )
    # One round trip: a no-op update on conflict makes RETURNING give the existing row's id.
    user_id = await session.scalar(
        stmt.on_conflict_do_update(
            index_elements=[User.integration_id, User.email], set_={"email": stmt.excluded.email}
        ).returning(User.id)
    )
    assert user_id is not None
    return user_id
