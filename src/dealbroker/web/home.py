"""The service's front page: people reach their deals by links, so it says where to find them."""

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, Response

from dealbroker.web.render import page

router = APIRouter(include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
async def home(request: Request) -> Response:
    return page(request, "home.html", {})


@router.get("/conditions", response_class=HTMLResponse)
async def conditions(request: Request) -> Response:
    """The service's conditions, which both parties agree to when they sign a deal."""
    settings = request.app.state.settings
    context = {"fee_percent": settings.fee_percent, "fee_fixed": settings.fee_fixed}
    return page(request, "conditions.html", context)
