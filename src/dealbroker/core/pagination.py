"""The page object every list answers with, and the ``page``/``pageSize`` query parameters."""

import math
import re
from typing import Annotated, Any, Literal

from fastapi import Depends, Query, Request
from pydantic import BaseModel, Field


class Page(BaseModel):
    """The page object of every list (the interface's four integers), and ``adjusted`` when a
    page parameter could not be used as sent."""

    pageSize: int  # noqa: N815
    pageNumber: int  # noqa: N815
    totalPages: int  # noqa: N815
    totalCount: int  # noqa: N815
    adjusted: list[Literal["page", "pageSize"]] = Field(
        default_factory=list,
        description="Only when a page parameter was not used as sent (below 1, above its "
        "largest, or not an integer): its name. `pageNumber` and `pageSize` are the values "
        "used instead.",
    )


# The largest page number served: a larger one reads as this (an empty page past the last).
MAX_PAGE = 1_000_000
# An integer as a query string writes it: decimal digits, an optional minus sign.
_INTEGER = re.compile(r"-?[0-9]+")
_MAX_DIGITS = len(str(MAX_PAGE))


def nearest(raw: str | None, low: int, high: int, default: int) -> tuple[int, bool]:
    """The value ``raw`` names, clamped into ``low``..``high``; ``default`` when it is absent
    or not an integer. Also whether that is not ``raw`` as sent. Digits past the bound are never
    converted: a thousand-digit number is just larger than ``high``."""
    if raw is None:
        return default, False
    if not _INTEGER.fullmatch(raw):
        return default, True
    negative = raw.startswith("-")
    digits = raw.removeprefix("-").lstrip("0")
    if len(digits) > _MAX_DIGITS:
        return (low if negative else high), True
    number = int(digits or "0") * (-1 if negative else 1)  # at most 7 digits converted
    value = min(max(number, low), high)
    return value, value != number


class PageRequest:
    def __init__(self, number: int, size: int, adjusted: tuple[str, ...] = ()) -> None:
        self.number, self.size, self.adjusted = number, size, adjusted

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size

    def info(self, total: int) -> dict[str, Any]:
        """The interface's page object: these four integers, and ``adjusted`` when a page
        parameter was not used as sent."""
        info: dict[str, Any] = {
            "pageSize": self.size,
            "pageNumber": self.number,
            "totalPages": math.ceil(total / self.size),
            "totalCount": total,
        }
        if self.adjusted:
            info["adjusted"] = list(self.adjusted)
        return info


# The parameters are read as text and never refused: the interface lists 200, 401 and 403 for
# the deal list, no 400, so a page out of range or not a number is answered with the nearest
# page there is (``nearest``), and the page object says which (``core.openapi`` documents it).
# ``async``: FastAPI runs a plain function dependency in a worker thread, which costs more
# than the check itself.
async def _page_request(
    request: Request,
    page: Annotated[str | None, Query(description="Page number, from 1.")] = None,
    pageSize: Annotated[  # noqa: N803 - the interface's parameter name
        str | None, Query(description="Items per page; default 20, at most 100.")
    ] = None,
) -> PageRequest:
    settings = request.app.state.settings
    number, page_adjusted = nearest(page, 1, MAX_PAGE, 1)
    size, size_adjusted = nearest(pageSize, 1, settings.page_size_max, settings.page_size_default)
    adjusted = (("page",) if page_adjusted else ()) + (("pageSize",) if size_adjusted else ())
    return PageRequest(number, size, adjusted)


Paging = Annotated[PageRequest, Depends(_page_request)]


def page_body(paging: PageRequest, total: int, items: list[Any]) -> dict[str, Any]:
    return {"page": paging.info(total), "items": items}
