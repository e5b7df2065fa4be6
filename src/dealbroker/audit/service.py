"""The audit trail: who did what, when, to what, and the values before and after.

``record`` is the one way in, called by every operator action, in the back office and in the
server's CLI, in the same transaction as the action: a refused or rolled-back action leaves no
record, and a done one always has its record. Records are never changed nor deleted: the ORM
refuses it here (on both backends), and PostgreSQL's trigger (migration 0021) refuses it from
any client.
"""

import csv
import io
import os
import pwd
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import ORMExecuteState, Session

from dealbroker.audit import repository
from dealbroker.audit.models import AuditRecord
from dealbroker.core import clock

# The CSV export's columns, in order.
COLUMNS = (
    "id",
    "at",
    "actor",
    "action",
    "target_type",
    "target_id",
    "before",
    "after",
    "request_id",
)


class AppendOnly(Exception):
    """Something tried to change or delete an audit record: a bug, never a user's error."""


@dataclass(frozen=True)
class Actor:
    """Who acts: an operator of the back office, a member of an integration in the developer
    portal, or the system user who ran a CLI command."""

    label: str
    operator_id: uuid.UUID | None = None

    @classmethod
    def operator(cls, operator_id: uuid.UUID, email: str) -> "Actor":
        return cls(f"operator:{email}", operator_id)

    @classmethod
    def member(cls, email: str) -> "Actor":
        """A member of an integration, in the developer portal."""
        return cls(f"member:{email}")

    @classmethod
    def system(cls) -> "Actor":
        """The operating system account running this process (the CLI's operator): the name
        of its real uid in the user database, else the uid itself (a bare container). Never
        ``LOGNAME``, ``USER`` or any other variable: the caller sets those at will, and a
        proposer must not approve their own dispute decision by naming another account."""
        uid = os.getuid()
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:  # no name for this uid
            user = str(uid)
        return cls(f"system:{user}")


async def record(
    session: AsyncSession,
    actor: Actor,
    action: str,
    target_type: str,
    target_id: object,
    *,
    before: Any = None,
    after: Any = None,
    request_id: str | None = None,
    integration_id: uuid.UUID | None = None,
) -> AuditRecord:
    """Add one record to the trail in ``session``'s transaction. ``before`` and ``after`` are
    JSON-able values (what changed, as it was and as it is); ``None`` where there is none.
    ``integration_id``: the integration the action was on, whose owners may read the record."""
    row = AuditRecord(
        at=clock.now(),
        actor=actor.label[:300],
        operator_id=actor.operator_id,
        action=action,
        target_type=target_type,
        target_id=str(target_id)[:200],
        before=_jsonable(before),
        after=_jsonable(after),
        request_id=request_id,
        integration_id=integration_id,
    )
    session.add(row)
    await session.flush()
    return row


def _jsonable(value: Any) -> Any:
    # UUIDs, datetimes and enums as the API writes them.
    return None if value is None else orjson.loads(orjson.dumps(value, default=str))


async def page(
    session: AsyncSession, number: int, size: int, integration_id: uuid.UUID | None = None
) -> tuple[list[AuditRecord], int]:
    """Page ``number`` (from 1) of the trail, newest first, and how many records there are;
    with ``integration_id``, of that integration's records only."""
    rows = await repository.page(session, (number - 1) * size, size, integration_id)
    return list(rows), await repository.count(session, integration_id)


def safe_cell(value: object) -> str:
    """A CSV cell a spreadsheet shows as text: one that starts like a formula (= + - @, or a
    tab or carriage return before one) gets a leading quote."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def csv_row(row: AuditRecord) -> list[str]:
    values: list[object] = [
        row.id,
        row.at.isoformat(),
        row.actor,
        row.action,
        row.target_type,
        row.target_id,
        None if row.before is None else orjson.dumps(row.before).decode(),
        None if row.after is None else orjson.dumps(row.after).decode(),
        row.request_id,
    ]
    return [safe_cell(v) for v in values]


async def export(session: AsyncSession, batch: int = 500) -> AsyncIterator[str]:
    """The whole trail as CSV text, newest first, a header line then batches of lines."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    before: int | None = None
    while True:
        rows = await repository.older_than(session, before, batch)
        for row in rows:
            writer.writerow(csv_row(row))
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        if len(rows) < batch:
            return
        before = rows[-1].id


@event.listens_for(Session, "before_flush")
def _refuse_changes(session: Session, _context: Any, _instances: Any) -> None:
    for row in session.deleted:
        if isinstance(row, AuditRecord):
            raise AppendOnly("an audit record cannot be deleted")
    for row in session.dirty:
        if isinstance(row, AuditRecord) and session.is_modified(row):
            raise AppendOnly("an audit record cannot be changed")


@event.listens_for(Session, "do_orm_execute")
def _refuse_bulk_changes(state: ORMExecuteState) -> None:
    if not (state.is_update or state.is_delete):
        return
    table = getattr(state.statement, "table", None)
    if table is not None and getattr(table, "name", None) == AuditRecord.__tablename__:
        raise AppendOnly("audit records cannot be changed or deleted")
