"""Reading the pages' forms, and running one form action.

Plain HTML forms, no JavaScript needed. Every form carries a CSRF token (an HMAC of the page's
capability path) and the deal's version: a post from a stale page, a second tab or a double
click finds another version and changes nothing, with a clear message (the services check the
version, see ``deals.parties.locked``). Each action runs in a savepoint, so a refused action
leaves no trace.
"""

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request
from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response

from dealbroker.core import money
from dealbroker.core.errors import BadRequest, DomainError
from dealbroker.core.validation import holds_nul


async def read_form(request: Request, page: str) -> FormData:
    """The posted form, its CSRF token checked; a bad token is refused before anything else.

    Every action reads its fields from here, so this is where a NUL character (which the
    database cannot store) is refused, whichever field it came in."""
    form = await request.form()
    if not request.app.state.links.form_token_valid(page, str(form.get("csrf", ""))):
        raise BadRequest(
            "This form has expired or did not come from this page. Reload and try again."
        )
    if any(holds_nul(name, str(value)) for name, value in form.multi_items()):
        raise BadRequest(
            "The form holds a character that cannot be saved (a NUL character, U+0000). "
            "Nothing was changed; remove it and try again."
        )
    return form


def field(form: FormData, name: str, max_length: int = 200) -> str | None:
    value = str(form.get(name, "")).strip()
    if len(value) > max_length:
        raise BadRequest(f"{name} is too long (at most {max_length} characters).")
    return value or None


def price(form: FormData, name: str = "price") -> int | None:
    raw = field(form, name, 20)
    if raw is None:
        return None
    try:
        return money.from_string(raw.replace(",", "."))
    except money.MoneyError as exc:
        raise BadRequest(f"The price {raw!r} is not a valid amount: {exc}") from exc


async def act(
    request: Request,
    session: Any,
    page: str,
    action: Callable[[FormData], Awaitable[str | None]],
    render: Callable[[str, int], Awaitable[Response]],
) -> Response:
    """Run one form action: CSRF, then ``action`` in a savepoint (it locks the deal at the
    version the page was made from). Success redirects (303) back with a message, or to the
    redirect URL the action returns; a refusal re-renders the page with the reason."""
    try:
        form = await read_form(request, page)
        async with session.begin_nested():
            outcome = await action(form)
    except DomainError as exc:
        return await render(exc.detail, exc.status)
    if outcome and outcome.startswith(("http://", "https://")):
        return RedirectResponse(outcome, status_code=303)
    return RedirectResponse(
        f"{page}{'&' if '?' in page else '?'}done={outcome or ''}", status_code=303
    )


def checked(form: FormData, name: str) -> bool:
    return form.get(name) == "yes"
