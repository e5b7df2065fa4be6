"""Where the evidence photos' bytes are kept: the database (the default) or an S3-compatible
object store (``DEALBROKER_EVIDENCE_STORAGE``). Both are written in the request's
transaction's lifetime; the photo's row names the store it went to, so a deployment that moves
to S3 still serves the photos kept in the database before."""

import asyncio
import uuid
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core.settings import Settings
from dealbroker.evidence.models import EvidencePhotoData

DATABASE = "database"
S3 = "s3"


class PhotoStore(Protocol):
    name: str

    async def put(
        self, session: AsyncSession, photo_id: uuid.UUID, key: str, data: bytes
    ) -> None: ...

    async def get(self, session: AsyncSession, key: str) -> bytes | None: ...


class DatabaseStore:
    """The photo's bytes in a row of their own, written in the caller's transaction: a refused
    or rolled-back upload leaves nothing behind."""

    name = DATABASE

    async def put(self, session: AsyncSession, photo_id: uuid.UUID, key: str, data: bytes) -> None:
        session.add(EvidencePhotoData(storage_key=key, photo_id=photo_id, data=data))

    async def get(self, session: AsyncSession, key: str) -> bytes | None:
        return await session.scalar(
            select(EvidencePhotoData.data).where(EvidencePhotoData.storage_key == key)
        )


class S3Store:
    """An S3-compatible object store through boto3, whose calls block: each runs on a worker
    thread. The object is written before the photo's row commits; if that transaction then
    fails, the object stays unreferenced (never served: only a row leads to it)."""

    name = S3

    def __init__(self, settings: Settings) -> None:
        import boto3
        from botocore.config import Config

        self.bucket = settings.s3_bucket
        secret = settings.s3_secret_access_key.get_secret_value()
        self._client: Any = boto3.client(
            "s3",
            endpoint_url=settings.s3_endpoint_url or None,
            region_name=settings.s3_region or None,
            aws_access_key_id=settings.s3_access_key_id or None,
            aws_secret_access_key=secret or None,
            config=Config(
                connect_timeout=5,
                read_timeout=30,
                retries={"max_attempts": 3, "mode": "standard"},
                s3={"addressing_style": "path"},
            ),
        )

    async def put(self, session: AsyncSession, photo_id: uuid.UUID, key: str, data: bytes) -> None:
        await asyncio.to_thread(
            self._client.put_object,
            Bucket=self.bucket,
            Key=key,
            Body=data,
            ContentType="image/jpeg",
        )

    async def get(self, session: AsyncSession, key: str) -> bytes | None:
        def read() -> bytes | None:
            try:
                answer = self._client.get_object(Bucket=self.bucket, Key=key)
            except self._client.exceptions.NoSuchKey:
                return None
            body = answer["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()

        return await asyncio.to_thread(read)


_stores: dict[tuple[str, str, str, str], PhotoStore] = {}


def store_named(name: str, settings: Settings) -> PhotoStore:
    """The store called ``name`` (a photo row's ``storage``), set up once per configuration."""
    if name == DATABASE:
        return DatabaseStore()
    key = (name, settings.s3_endpoint_url, settings.s3_bucket, settings.s3_access_key_id)
    if key not in _stores:
        _stores[key] = S3Store(settings)
    return _stores[key]


def configured(settings: Settings) -> PhotoStore:
    """The store new photos go to."""
    return store_named(settings.evidence_storage, settings)
