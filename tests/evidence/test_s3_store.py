"""The S3-compatible photo store against a real S3 server process on loopback (moto's
standalone ``moto_server``, started here, spoken to over HTTP by boto3): a photo put is the one
read back, a missing key is none, and the pages serve a photo kept there."""

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest

from dealbroker.core.settings import Settings
from dealbroker.evidence import storage
from tests.processes import free_port

BUCKET = "dealbroker-evidence"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    port = free_port()
    server = Path(sys.executable).parent / "moto_server"
    process = subprocess.Popen(
        [str(server), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.1)
        boto3.client(
            "s3",
            endpoint_url=url,
            region_name="eu-north-1",
            aws_access_key_id="test-key",
            aws_secret_access_key="test-secret",
        ).create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "eu-north-1"}
        )
        yield url
    finally:
        process.terminate()
        process.wait(10)


def s3_settings(endpoint: str, **extra: object) -> Settings:
    values: dict[str, object] = {
        "evidence_storage": "s3",
        "s3_endpoint_url": endpoint,
        "s3_bucket": BUCKET,
        "s3_region": "eu-north-1",
        "s3_access_key_id": "test-key",
        "s3_secret_access_key": "test-secret",
        **extra,
    }
    return Settings(**values)  # type: ignore[arg-type]


async def test_a_photo_put_is_read_back_and_a_missing_key_is_none(s3_endpoint):
    store = storage.configured(s3_settings(s3_endpoint))
    assert store.name == "s3"
    key = f"evidence/{uuid.uuid4()}/{uuid.uuid4()}.jpg"
    data = os.urandom(200_000)
    await store.put(None, uuid.uuid4(), key, data)  # type: ignore[arg-type]
    assert await store.get(None, key) == data  # type: ignore[arg-type]
    assert await store.get(None, key + "-missing") is None  # type: ignore[arg-type]
    # It is really on the server: read with a client of its own.
    raw = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name="eu-north-1",
        aws_access_key_id="test-key",
        aws_secret_access_key="test-secret",
    ).get_object(Bucket=BUCKET, Key=key)
    assert raw["Body"].read() == data
    assert raw["ContentType"] == "image/jpeg"


async def test_pages_keep_and_serve_photos_in_the_object_store(
    s3_endpoint, db_url, engine, sessionmaker
):
    from dealbroker.app import create_app
    from dealbroker.evidence.models import EvidencePhoto, EvidencePhotoData
    from tests.conftest import make_caller, make_settings
    from tests.evidence import hostile
    from tests.web.evidence import disputed, photo_ids, upload

    settings = make_settings(
        db_url,
        evidence_storage="s3",
        s3_endpoint_url=s3_endpoint,
        s3_bucket=BUCKET,
        s3_region="eu-north-1",
        s3_access_key_id="test-key",
        s3_secret_access_key="test-secret",
    )
    app = create_app(settings, engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            caller = await make_caller(client, sessionmaker)
            _deal, seller, buyer = await disputed(client, caller)
            assert (await upload(client, buyer, hostile.jpeg_with_gps())).status_code == 303
            (photo,) = photo_ids((await client.get(seller)).text)
            served = await client.get(f"{seller}/evidence/{photo}")
            assert served.status_code == 200
            assert served.headers["content-type"] == "image/jpeg"
    async with sessionmaker() as session:
        row = await session.get(EvidencePhoto, uuid.UUID(photo))
        assert row is not None
        assert row.storage == "s3"
        assert await session.get(EvidencePhotoData, row.storage_key) is None  # not in the db
    stored = await storage.configured(settings).get(None, row.storage_key)  # type: ignore[arg-type]
    assert stored == served.content


def test_production_with_s3_needs_every_setting(s3_endpoint):
    from dealbroker.core.settings import InvalidSettings, get_settings

    production = {
        "DEALBROKER_ENVIRONMENT": "production",
        "DEALBROKER_SECRET_KEY": "x" * 40,
        "DEALBROKER_SUPPORT_EMAIL": "support@example.com",
        "DEALBROKER_EVIDENCE_STORAGE": "s3",
        "DEALBROKER_S3_BUCKET": BUCKET,
        "DEALBROKER_S3_ENDPOINT_URL": s3_endpoint,
    }
    saved = dict(os.environ)
    try:
        os.environ.update(production)
        get_settings.cache_clear()
        with pytest.raises(InvalidSettings) as refused:
            get_settings()
        message = str(refused.value)
        assert "DEALBROKER_S3_REGION" in message
        assert "DEALBROKER_S3_SECRET_ACCESS_KEY" in message
        assert "\n" not in message
    finally:
        os.environ.clear()
        os.environ.update(saved)
        get_settings.cache_clear()
