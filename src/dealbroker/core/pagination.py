"""The page object every list answers with, and the ``page``/``pageSize`` query parameters."""

import math
from typing import Annotated, Any

from fastapi import Depends, Query, Request
from pydantic import BaseModel

from dealbroker.core.errors import InvalidInput


class Page(BaseModel):
    """The page object of every list (the interface's four integers)."""

    pageSize: int  # noqa: N815
    pageNumber: int  # noqa: N815
    totalPages: int  # noqa: N815
    totalCount: int  # noqa: N815


class PageRequest:
    def __init__(self, number: int, size: int) -> None:
        self.number, self.size = number, size

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size

    def info(self, total: int) -> dict[str, int]:
        """The interface's page object: exactly these four integers."""
        return {
            "pageSize": self.size,
            "pageNumber": self.number,
            "totalPages": math.ceil(total / self.size),
            "totalCount": total,
        }


# ``async``: FastAPI runs a plain function dependency in a worker thread, which costs more
# than the check itself.
async def _page_request(
    request: Request,
    page: Annotated[int, Query(ge=1, le=1_000_000, description="Page number, from 1.")] = 1,
    pageSize: Annotated[  # noqa: N803 - the interface's parameter name
        int | None, Query(ge=1, description="Items per page; default 20, at most 100.")
    ] = None,
) -> PageRequest:
    settings = request.app.state.settings
    size = settings.page_size_default if pageSize is None else pageSize
    if size > settings.page_size_max:
        raise InvalidInput(
            f"The request does not match the schema: pageSize: must be at most {settings.page_size_max}",
            errors=[{"field": "pageSize", "message": f"must be at most {settings.page_size_max}"}],
        )
    return PageRequest(page, size)


Paging = Annotated[PageRequest, Depends(_page_request)]


def page_body(paging: PageRequest, total: int, items: list[Any]) -> dict[str, Any]:
    return {"page": paging.info(total), "items": items}
