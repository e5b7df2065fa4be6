"""The retention job and the eID flows (docs/identity.md): a flow that did not complete goes
after ``eid_unfinished_retention_days``; a completed signature keeps its issuer, level, token id
and time, but no longer names its person after ``eid_evidence_retention_days``."""

import uuid
from datetime import date, timedelta

from sqlalchemy import select

from dealbroker.core import clock
from dealbroker.retention import RetentionJob
from dealbroker.signatures.models import EidSignature
from tests.conftest import SELLER, create_deal, make_settings


def flow(deal_id: uuid.UUID, status: str, age_days: int) -> EidSignature:
    at = clock.now() - timedelta(days=age_days)
    return EidSignature(
        id=uuid.uuid4(),
        deal_id=deal_id,
        signature_type="Seller",
        purpose="sign",
        status=status,
        terms_salt="s",
        started_at=at,
        finished_at=at,
        issuer="https://eid.example.com",
        subject="sub-1",
        acr="urn:eid:high",
        token_id="jti-1",
        token_issued_at=at,
        name="Kari Nordmann",
        birthdate=date(1980, 1, 2),
        national_id_hash="h" * 64,
    )


async def test_retention_follows_docs_identity(client, caller, sessionmaker, db_url):
    deal = await create_deal(client, caller, price=1000, seller=SELLER)
    deal_id = uuid.UUID(deal["id"])
    rows = {
        "failed-old": flow(deal_id, "Failed", 31),
        "open-old": flow(deal_id, "Initiated", 31),
        "failed-new": flow(deal_id, "Failed", 29),
        "signed-old": flow(deal_id, "Completed", 1831),
        "signed-new": flow(deal_id, "Completed", 1829),
    }
    async with sessionmaker() as session, session.begin():
        session.add_all(rows.values())
    job = RetentionJob(sessionmaker, make_settings(db_url, retention_pause_seconds=0))
    await job.run_once()
    async with sessionmaker() as session:
        kept = {f.id: f for f in await session.scalars(select(EidSignature))}
    left = {name for name, row in rows.items() if row.id in kept}
    assert left == {"failed-new", "signed-old", "signed-new"}
    old = kept[rows["signed-old"].id]
    assert (old.name, old.birthdate, old.national_id_hash, old.subject) == (None, None, None, None)
    assert (old.issuer, old.acr, old.token_id) == (
        "https://eid.example.com",
        "urn:eid:high",
        "jti-1",
    )
    assert old.token_issued_at is not None
    assert kept[rows["signed-new"].id].name == "Kari Nordmann"
