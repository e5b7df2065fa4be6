"""Deprecated operations: ``deprecated: true`` in the document, and ``Deprecation`` (RFC 9745),
``Sunset`` (RFC 8594) and ``Link`` headers on every answer, errors included
(``core/deprecation.py``; the policy is docs/versioning.md)."""

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx
import pytest
from fastapi import FastAPI, HTTPException

from dealbroker.core.deprecation import DeprecationMiddleware, deprecated
from dealbroker.core.request_log import RequestLogMiddleware

SINCE = datetime(2026, 12, 1, tzinfo=UTC)
SUNSET = datetime(2027, 6, 1, tzinfo=UTC)


def marked_app() -> FastAPI:
    app = FastAPI()

    @app.get("/old/{n}", **deprecated(SINCE, SUNSET, successor="/new/{n}"))
    async def old(n: int) -> dict[str, int]:
        if n == 0:
            raise HTTPException(404, "none")
        return {"n": n}

    @app.get("/new/{n}")
    async def new(n: int) -> dict[str, int]:
        return {"n": n}

    @app.get("/dated", **deprecated(SINCE))
    async def dated() -> dict[str, str]:
        return {}

    app.add_middleware(DeprecationMiddleware)
    return app


async def call(app: FastAPI, path: str) -> httpx.Response:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as client:
        return await client.get(path)


async def test_a_deprecated_operation_says_so_on_every_answer() -> None:
    app = marked_app()
    for path, status in (("/old/1", 200), ("/old/0", 404), ("/old/x", 422)):
        response = await call(app, path)
        assert response.status_code == status, path
        assert response.headers["deprecation"] == f"@{int(SINCE.timestamp())}", path
        assert response.headers["deprecation"] == "@1796083200"
        assert parsedate_to_datetime(response.headers["sunset"]) == SUNSET
        assert response.headers["sunset"] == "Tue, 01 Jun 2027 00:00:00 GMT"
        links = response.headers.get_list("link")
        assert '</docs>; rel="deprecation"; type="text/html"' in links
        assert '</new/{n}>; rel="successor-version"' in links


async def test_no_sunset_until_one_is_decided() -> None:
    response = await call(marked_app(), "/dated")
    assert response.headers["deprecation"] == "@1796083200"
    assert "sunset" not in response.headers


async def test_other_operations_carry_none() -> None:
    for path in ("/new/1", "/nowhere"):
        response = await call(marked_app(), path)
        assert "deprecation" not in response.headers, path
        assert "sunset" not in response.headers, path
        assert "link" not in response.headers, path


async def test_an_app_with_no_marked_route_answers_untouched_until_one_is_added() -> None:
    app = FastAPI()

    @app.get("/new/{n}")
    async def new(n: int) -> dict[str, int]:
        return {"n": n}

    app.add_middleware(DeprecationMiddleware)
    assert "deprecation" not in (await call(app, "/new/1")).headers
    # Added once the app serves: its routes' count changed, so they are looked at again.
    app.get("/old", **deprecated(SINCE))(new)
    assert (await call(app, "/old?n=1")).headers["deprecation"] == "@1796083200"
    assert "deprecation" not in (await call(app, "/new/1")).headers


async def test_the_document_marks_it() -> None:
    spec = marked_app().openapi()
    old = spec["paths"]["/old/{n}"]["get"]
    assert old["deprecated"] is True
    assert old["x-deprecation"] == {
        "since": "2026-12-01T00:00:00Z",
        "sunset": "2027-06-01T00:00:00Z",
        "successor": "/new/{n}",
        "explained": "/docs",
    }
    assert "deprecated" not in spec["paths"]["/new/{n}"]["get"]


def test_dates_must_be_aware_and_in_order() -> None:
    with pytest.raises(ValueError, match="timezone"):
        deprecated(datetime(2026, 12, 1))  # noqa: DTZ001
    with pytest.raises(ValueError, match="after"):
        deprecated(SUNSET, SINCE)


async def test_wrapped_like_the_service_a_handler_cannot_duplicate_them() -> None:
    app = FastAPI()

    @app.get("/old", **deprecated(SINCE))
    async def old() -> object:
        from starlette.responses import JSONResponse

        return JSONResponse({}, headers={"Deprecation": "true"})

    app.add_middleware(DeprecationMiddleware)
    response = await call(RequestLogMiddleware(app), "/old")  # type: ignore[arg-type]
    assert response.headers.get_list("deprecation") == ["@1796083200"]


async def test_nothing_the_interface_names_is_deprecated(spec) -> None:
    """The interface is the contract: its paths, the alias /deals/{dealId}/status and the
    misspelled /webooks/v1/... included, live as long as v1 (docs/versioning.md). Nothing in
    v1 is deprecated today."""
    for path, item in spec["paths"].items():
        for method, op in item.items():
            assert not op.get("deprecated"), (method, path)
            assert "x-deprecation" not in op, (method, path)


async def test_the_served_aliases_carry_no_deprecation(client, caller) -> None:
    for path in ("/deals/00000000-0000-0000-0000-000000000000/status", "/webooks/v1/dealStatus"):
        response = await client.post(path, json={}, headers=caller.headers)
        assert response.status_code in (400, 401, 404, 405), response.text
        assert "deprecation" not in response.headers, path


@pytest.fixture
async def spec(client):
    return (await client.get("/openapi.json")).json()
