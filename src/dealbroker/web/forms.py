"""Reading the pages' forms, and running one form action.

Plain HTML forms, no JavaScript needed. Every form carries a CSRF token (an HMAC of the page's
capability path) and the deal's version: a post from a stale page, a second tab or a double
click finds another version and changes nothing, with a clear message (the services check the
version, see ``parties.locked``). Each action runs in a savepoint, so a refused action
leaves no trace. A message between the parties is no deal action: its form carries the version
too, but ``parties.messaging`` does not check it (``act(keeps_typed=True)``).
"""

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from fastapi import Request
from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response

from dealbroker.core import money
from dealbroker.core.errors import BadRequest, DomainError, FieldError, IllegalTransition
from dealbroker.core.i18n import _
from dealbroker.core.validation import holds_nul
from dealbroker.web.render import label
from dealbroker.web.render import page as render_page


async def read_form(request: Request, page: str) -> FormData:
    """The posted form, its CSRF token checked; a bad token is refused before anything else.

    Every action reads its fields from here, so this is where a NUL character (which the
    database cannot store) is refused, whichever field it came in."""
    # One file at most: a page's form posts none, or one evidence photo.
    form = await request.form(max_files=1)
    if not request.app.state.links.form_token_valid(page, str(form.get("csrf", ""))):
        raise BadRequest(
            _("This form has expired or did not come from this page. Reload and try again.")
        )
    if any(holds_nul(name, str(value)) for name, value in form.multi_items()):
        raise BadRequest(
            _(
                "The form holds a character that cannot be saved (a NUL character, U+0000). "
                "Nothing was changed; remove it and try again."
            )
        )
    return form


def field(form: FormData, name: str, max_length: int = 200) -> str | None:
    """The text typed in ``name``, trimmed; ``None`` when empty. Longer than ``max_length`` is
    refused next to the field."""
    value = str(form.get(name, "")).strip()
    if len(value) > max_length:
        too_long = _("This is too long (at most %(max)s characters).")
        raise FieldError(name, too_long % {"max": max_length})
    return value or None


def uuid_of(form: FormData, name: str) -> uuid.UUID | None:
    """The id posted in ``name``; None when there is none or it is no id."""
    try:
        return uuid.UUID(str(form.get(name, "")))
    except ValueError:
        return None


@dataclass(frozen=True)
class Kept:
    """What a refused form comes back with: its values as typed, and the reason each refused
    field was refused (by field name)."""

    typed: dict[str, str]
    invalid: dict[str, str]


NOTHING_KEPT = Kept({}, {})
# Fields a page makes itself, never filled back in from what was posted.
# Never written back into a page: the form's own fields, and a personal identity number.
NOT_TYPED = frozenset({"csrf", "version", "confirm", "ssn"})


def _kept(form: FormData, exc: DomainError) -> Kept:
    """The form as typed, and the reason next to the refused field if the refusal is about one
    (``FieldError``); other refusals are the page's banner."""
    typed = {k: str(v) for k, v in form.multi_items() if k not in NOT_TYPED}
    return Kept(typed, {exc.field: exc.detail} if isinstance(exc, FieldError) else {})


def price(form: FormData, locale: str, name: str = "price") -> int | None:
    """The amount typed in ``name``, read as ``locale`` writes numbers (``money.parse``)."""
    raw = field(form, name)
    if raw is None:
        return None
    try:
        return money.parse(raw, locale)
    except money.MoneyError as exc:
        refused = _("The price '%(typed)s' is not a valid amount: %(reason)s.")
        raise FieldError(name, refused % {"typed": raw, "reason": exc}) from exc


@dataclass(frozen=True)
class Confirmation:
    """What to ask before an action that cannot be undone: the question, the button that says
    yes, and a field the answer must carry (e.g. the reason for a dispute). The texts are in
    English, marked ``N_``, and asked in the page's language; ``values`` fill the question's
    placeholders."""

    question: str
    button: str
    field: str | None = None
    field_label: str | None = None
    values: dict[str, str] = dataclass_field(default_factory=dict)

    def asked(self) -> "Confirmation":
        """This confirmation in the page's language."""
        return Confirmation(
            _(self.question) % self.values if self.values else _(self.question),
            _(self.button),
            self.field,
            _(self.field_label) if self.field_label else None,
        )


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
    confirmation: Confirmation | None = None,
    admit: Callable[[], Awaitable[None]] | None = None,
    prepare: Callable[[FormData], Awaitable[None]] | None = None,
    keeps_typed: bool = False,
) -> Response:
    """Run one form action: CSRF, then ``action`` in a savepoint (it locks the deal at the
    version the page was made from). Success redirects (303) back with a message, or to the
    redirect URL the action returns. A refusal re-renders the page: an unusable value
    (``BadRequest``) with the form as typed, to correct it, and the reason next to its field
    when it is about one (``FieldError``), else as the page's banner; any other refusal as the
    banner over the current state. A refused answer to ``confirmation``'s own field (e.g. the
    reason for a dispute) asks again, the reason next to it.

    ``admit`` refuses before the body is read (a photo that could not be kept is refused
    without parsing its upload); ``prepare`` does what takes time with the form read, before
    the savepoint and the deal's lock (a photo's decoding). A refusal's headers go with the
    page (``Retry-After``). ``keeps_typed`` keeps the form as typed whatever the refusal (a
    message refused for the rate or a suspension is not retyped)."""
    form: FormData | None = None
    try:
        if admit is not None:
            await admit()
        form = await read_form(request, page)
        if prepare is not None:
            await prepare(form)
        async with session.begin_nested():
            outcome = await action(form)
    except DomainError as exc:
        if form is None or not (isinstance(exc, BadRequest) or keeps_typed):
            refused = await render(said_on_page(exc), exc.status, NOTHING_KEPT)
            refused.headers.update(exc.headers)
            return refused
        kept = _kept(form, exc)
        if confirmation is not None and confirmation.field in kept.invalid:
            return _confirmation_page(request, page, form, confirmation, kept, exc.status)
        said = exc.detail if isinstance(exc, BadRequest) else said_on_page(exc)
        refused = await render(None if kept.invalid else said, exc.status, kept)
        refused.headers.update(exc.headers)
        return refused
    except NeedsConfirmation as ask:
        assert form is not None  # asked by the action, which runs on a read form
        return _confirmation_page(request, page, form, ask.confirmation)
    if outcome and outcome.startswith(("http://", "https://")):
        return RedirectResponse(outcome, status_code=303)
    return RedirectResponse(
        f"{page}{'&' if '?' in page else '?'}done={outcome or ''}", status_code=303
    )


def said_on_page(exc: DomainError) -> str:
    """What a page says of a refusal, in the page's language. A refusal written for the API (in
    English for integrators, naming raw statuses and triggers) says it in the reader's words
    instead: the lifecycle's own, and those that carry a ``page_detail``."""
    if exc.page_detail is not None:
        return exc.page_detail
    if isinstance(exc, IllegalTransition):
        current = exc.extra.get("currentStatus")
        return _("This cannot be done any more: the deal is now “%(status)s”.") % {
            "status": label(current)
        }
    return exc.detail


def _confirmation_page(
    request: Request,
    page: str,
    form: FormData,
    confirmation: Confirmation,
    kept: Kept = NOTHING_KEPT,
    status: int = 200,
) -> Response:
    """Ask again, without JavaScript: the same form with ``confirm=yes``; nothing changed yet.
    The deal's version travels along, so a confirmation from a stale page is refused too.
    ``kept`` is a refused answer to the confirmation's field, as typed, and why."""
    carried = [(k, str(v)) for k, v in form.multi_items() if k not in ("confirm",)]
    action = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    context = {
        "confirmation": confirmation.asked(),
        "action": action,
        "carried": [(k, v) for k, v in carried if k != confirmation.field],
        "back": page,
        "error": None,
        "typed": kept.typed,
        "invalid": kept.invalid,
    }
    return render_page(request, "confirm.html", context, status)


def checked(form: FormData, name: str) -> bool:
    return form.get(name) == "yes"
