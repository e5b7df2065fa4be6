"""The OpenAPI document, corrected to say what the service really answers.

FastAPI documents a 422 "Validation Error" on every operation with parameters, and a plain
``application/json`` body next to each declared error. This service answers schema violations
with 400 or 405 problem+json instead, so those defaults are removed.
"""

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from dealbroker.core.errors import PROBLEM_JSON


def install_openapi(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        spec = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
            tags=app.openapi_tags,
        )
        for item in spec.get("paths", {}).values():
            for operation in item.values():
                responses = operation.get("responses", {})
                if responses.get("422", {}).get("description") == "Validation Error":
                    del responses["422"]
                for response in responses.values():
                    content = response.get("content", {})
                    if PROBLEM_JSON in content:
                        content.pop("application/json", None)
        schemas = spec.get("components", {}).get("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
