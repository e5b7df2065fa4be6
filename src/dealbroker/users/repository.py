"""All queries on users."""

import uuid
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.dml import ReturningInsert

from dealbroker.core import clock
from dealbroker.core.idempotency import insert_for
from dealbroker.users.models import User


class NewUser(NamedTuple):
    """A user not stored yet (a new deal's seller, see ``deals.repository.add``): the values
    of its row, not an ORM object."""

    id: uuid.UUID
    integration_id: uuid.UUID
    email: str
    name: str | None
    created_at: datetime


def new_user(integration_id: uuid.UUID, email: str, name: str | None, now: datetime) -> NewUser:
    """A user not stored yet, its email normalised (see ``user_id_for``)."""
    return NewUser(uuid.uuid4(), integration_id, email.strip().lower(), name, now)


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
    user_id = await session.scalar(upsert_user(stmt))
    assert user_id is not None
    return user_id


def upsert_user(new_user: Any) -> ReturningInsert[uuid.UUID]:
    """``new_user`` (a dialect's INSERT of one user, email normalised) as an upsert returning
    the id of the user with that email in that integration: the new row, or the existing one.
    One round trip: a no-op update on conflict makes RETURNING give the existing row's id."""
    return new_user.on_conflict_do_update(  # type: ignore[no-any-return]
        index_elements=[User.integration_id, User.email], set_={"email": new_user.excluded.email}
    ).returning(User.id)
