"""Reading the pages' forms, and running one form action.

Plain HTML forms, no JavaScript needed. Every form carries a CSRF token (an HMAC of the page's
capability path) and the deal's version: a post from a stale page, a second tab or a double
click finds another version and changes nothing, with a clear message (the services check the
version, see ``deals.parties.locked``). Each action runs in a savepoint, so a refused action
leaves no trace.
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response

from dealbroker.core import money
from dealbroker.core.errors import BadRequest, DomainError
from dealbroker.core.i18n import _
from dealbroker.core.validation import holds_nul
from dealbroker.web.render import page as render_page


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


class FieldRefused(BadRequest):
    """One field of a form holds a value that cannot be used: the page comes back with the
    reason next to that field and the form as it was typed."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(detail)
        self.field = name


@dataclass(frozen=True)
class Kept:
    """What a refused form comes back with: its values as typed, and the reason each refused
    field was refused (by field name)."""

    typed: dict[str, str]
    invalid: dict[str, str]


NOTHING_KEPT = Kept({}, {})


def price(form: FormData, locale: str, name: str = "price") -> int | None:
    """The amount typed in ``name``, read as ``locale`` writes numbers (``money.parse``)."""
    raw = field(form, name)
    if raw is None:
        return None
    try:
        return money.parse(raw, locale)
    except money.MoneyError as exc:
        refused = _("The price '%(typed)s' is not a valid amount: %(reason)s.")
        raise FieldRefused(name, refused % {"typed": raw, "reason": exc}) from exc


@dataclass(frozen=True)
class Confirmation:
    """What to ask before an action that cannot be undone: the question, the button that says
    yes, and a field the answer must carry (e.g. the reason for a dispute)."""

    question: str
    button: str
    field: str | None = None
    field_label: str | None = None


class NeedsConfirmation(Exception):
    def __init__(self, confirmation: Confirmation) -> None:
        self.confirmation = confirmation


def confirmed(form: FormData, confirmation: Confirmation | None) -> None:
    """Raise ``NeedsConfirmation`` unless the form says yes (a second, deliberate post)."""
    if confirmation is not None and form.get("confirm") != "yes":
        raise NeedsConfirmation(confirmation)


async def act(
    request: Request,
    session: Any,
    page: str,
    action: Callable[[FormData], Awaitable[str | None]],
    render: Callable[[str | None, int, Kept], Awaitable[Response]],
) -> Response:
    """Run one form action: CSRF, then ``action`` in a savepoint (it locks the deal at the
    version the page was made from). Success redirects (303) back with a message, or to the
    redirect URL the action returns; a refusal re-renders the page with the reason, and an
    unusable value (``BadRequest``) with the form as typed, to correct it."""
    form: FormData | None = None
    try:
        form = await read_form(request, page)
        async with session.begin_nested():
            outcome = await action(form)
    except DomainError as exc:
        typed = {k: str(v) for k, v in form.multi_items()} if form is not None else {}
        if isinstance(exc, FieldRefused):
            return await render(None, exc.status, Kept(typed, {exc.field: exc.detail}))
        if isinstance(exc, BadRequest) and form is not None:
            return await render(exc.detail, exc.status, Kept(typed, {}))
        return await render(exc.detail, exc.status, NOTHING_KEPT)
    except NeedsConfirmation as ask:
        assert form is not None  # asked by the action, which runs on a read form
        return _confirmation_page(request, page, form, ask.confirmation)
    if outcome and outcome.startswith(("http://", "https://")):
        return RedirectResponse(outcome, status_code=303)
    return RedirectResponse(
        f"{page}{'&' if '?' in page else '?'}done={outcome or ''}", status_code=303
    )


def _confirmation_page(
    request: Request, page: str, form: FormData, confirmation: Confirmation
) -> Response:
    """Ask again, without JavaScript: the same form with ``confirm=yes``; nothing changed yet.
    The deal's version travels along, so a confirmation from a stale page is refused too."""
    carried = [(k, str(v)) for k, v in form.multi_items() if k not in ("confirm",)]
    action = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    context = {
        "confirmation": confirmation,
        "action": action,
        "carried": [(k, v) for k, v in carried if k != confirmation.field],
        "back": page,
        "error": None,
    }
    return render_page(request, "confirm.html", context)


def checked(form: FormData, name: str) -> bool:
    return form.get(name) == "yes"
