"""A hold on money going out (payouts and refunds), for the time after the database was
restored to an earlier moment.

A restore to a moment T forgets what happened after T, money included. A payout sent after T is
pending again in the restored database: sent again it may pay the seller twice (a new bank file
carries the same end-to-end id, which not every bank refuses twice; a payout decided before
this code derived its ids has an id Swish never saw). A payment paid out after T looks held again: a
refund of it (a deadline, a dispute) takes from the client-funds account money that has left
it. So `scripts/restore` holds money going out as it finishes, and it stays held until the
operator has reconciled what moved after T (docs/operations/backup-restore.md) and releases it:

* the worker's provider-call job makes no payout and no refund call while held (captures and
  cancels of reservations go on: they move no money out), and says so once;
* ``payouts export`` (command line and back office) writes no bank file.

`scripts/restore` writes the same row with SQL, before it checks the schema: a backup older than
the code's schema must be held before anyone migrates it and starts a worker.

Deals go on meanwhile: what they decide is queued, and made once released. The hold is one row
of ``instance_settings``, so every process reads the same; taking and releasing it are in the
audit trail (``payments.hold``, ``payments.release``)."""

import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.audit import service as audit
from dealbroker.audit.service import Actor
from dealbroker.core import clock
from dealbroker.core.errors import Conflict
from dealbroker.core.idempotency import insert_for
from dealbroker.integrations.models import InstanceSetting

KEY = "money_out_hold"
MAX_REASON = 300
MAX_BY = 120
MAX_VALUE = 500  # instance_settings.value
# The provider calls that move money out of the client-funds account.
HELD_KINDS = ("payout", "refund")


@dataclass(frozen=True)
class Hold:
    reason: str
    since: datetime
    by: str

    def words(self) -> str:
        """One line for the refusals: since when, why, and the way out."""
        return (
            f"payouts and refunds are held since {self.since.isoformat(timespec='seconds')} "
            f"({self.reason}); reconcile, then `dealbroker payments release`"
        )


async def current(session: AsyncSession) -> Hold | None:
    value = await session.scalar(select(InstanceSetting.value).where(InstanceSetting.key == KEY))
    if value is None:
        return None
    data = json.loads(value)
    return Hold(data["reason"], datetime.fromisoformat(data["since"]), data["by"])


async def refuse_if_held(session: AsyncSession) -> None:
    """``Conflict`` with the hold's words while money out is held."""
    held = await current(session)
    if held is not None:
        raise Conflict(held.words())


async def hold(session: AsyncSession, reason: str, actor: Actor) -> Hold:
    """Hold payouts and refunds (a hold already in place is kept as it is, and returned)."""
    reason = " ".join(reason.split())[:MAX_REASON] or "held"
    held = Hold(reason, clock.now(), actor.label[:MAX_BY])
    value = _stored(held)
    while len(value) > MAX_VALUE:  # quotes and backslashes take two characters each in JSON
        held = Hold(held.reason[:-20] or "held", held.since, held.by[:-20] or "?")
        value = _stored(held)
    insert = insert_for(session)
    await session.execute(
        insert(InstanceSetting).values(key=KEY, value=value).on_conflict_do_nothing()
    )
    found = await current(session)
    assert found is not None
    if found == held:
        await audit.record(
            session,
            actor,
            "payments.hold",
            "payments",
            "money out",
            after={"reason": held.reason},
        )
    return found


def _stored(held: Hold) -> str:
    return json.dumps(
        {"reason": held.reason, "since": held.since.isoformat(), "by": held.by},
        ensure_ascii=False,
    )


async def release(session: AsyncSession, actor: Actor) -> Hold | None:
    """Release the hold; the one released, or None when there was none."""
    found = await current(session)
    if found is None:
        return None
    await session.execute(delete(InstanceSetting).where(InstanceSetting.key == KEY))
    await audit.record(
        session,
        actor,
        "payments.release",
        "payments",
        "money out",
        before={"reason": found.reason, "since": found.since, "by": found.by},
    )
    return found
