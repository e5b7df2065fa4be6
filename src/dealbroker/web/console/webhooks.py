"""What a console's webhook pages share, whether they show every integration's endpoints (the
back office) or one integration's (the developer portal): the words for how an endpoint's
deliveries go, the flash message after an action, and the recovery's form and action.

Each action goes through ``events.service``, the one the API and the ``dealbroker webhooks``
commands call, which records it in the audit trail with the console's actor."""

import uuid
from collections.abc import Mapping
from datetime import timedelta

from babel.numbers import format_percent
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from dealbroker.core import clock, i18n
from dealbroker.core.i18n import N_, _, ngettext
from dealbroker.events import service as events
from dealbroker.events import tasks
from dealbroker.events.service import By
from dealbroker.web.console.access import Console

# How far back a recovery reaches, as the form offers it; the default is the service's.
SINCE = {
    "1": (timedelta(days=1), N_("the last day")),
    "3": (timedelta(days=3), N_("the last 3 days")),
    "7": (timedelta(days=7), N_("the last 7 days")),
    "30": (timedelta(days=30), N_("the last 30 days")),
}
DEFAULT_SINCE = str(events.RECOVER_WINDOW.days)
# Why an endpoint is disabled, in the page's language (another reason is shown as stored).
REASONS = {
    events.DISABLED_BY_INTEGRATION: N_("disabled by the integration"),
    events.DISABLED_BY_OPERATOR: N_("disabled by an operator"),
    tasks.GONE: N_("the endpoint answered 410 Gone"),
    tasks.FAILING: N_("every delivery failed for 5 days"),
}
# The flash message after an action, by the ``done`` its redirect names (``recovered``: with
# how many deliveries were queued).
DONE = {
    "disabled": N_("The endpoint is disabled: its deliveries wait until it is enabled."),
    "enabled": N_("The endpoint is enabled: the deliveries waiting for it go out now."),
    "resent": N_("The event is queued for this endpoint again."),
}


def context(
    request: Request, done_prefix: str = "", more_done: Mapping[str, str] | None = None
) -> dict[str, object]:
    """What every webhook page's templates use: the flash message after an action (its
    ``done`` is ``done_prefix`` and a key of ``DONE`` or ``more_done``), the words for a
    disabling reason and a failure rate, and the recovery form's choices."""
    done = request.query_params.get("done", "")
    key = done.removeprefix(done_prefix) if done.startswith(done_prefix) else ""
    words = {**DONE, **(more_done or {})}
    message = _(words[key]) if key in words else None
    if key == "recovered":
        queued = request.query_params.get("queued", "")
        count = int(queued) if queued.isdigit() and len(queued) < 10 else 0
        message = ngettext(
            "%(num)d delivery is queued: the worker sends it now.",
            "%(num)d deliveries are queued: the worker sends them now.",
            count,
        ) % {"num": count}
    return {
        "done": message,
        "reason": lambda text: _(REASONS[text]) if text in REASONS else text,
        "percent": lambda share: format_percent(share / 100, locale=i18n.current()),
        "window_hours": int(events.FAILURE_WINDOW.total_seconds() // 3600),
        "recover_days": events.RECOVER_WINDOW.days,
        # A backlog whose earliest attempt is past is due: since then it waits for a worker, or
        # for the endpoint to be enabled.
        "now": clock.now(),
        "since_choices": [(key, _(label)) for key, (_delta, label) in SINCE.items()],
        "since": DEFAULT_SINCE,
    }


def enabling(request: Request) -> bool:
    """Whether the endpoint's switch posted to is ``/enable`` (else ``/disable``)."""
    return request.url.path.endswith("/enable")


def back(console: Console, endpoint_id: uuid.UUID, done: str) -> Response:
    """To the endpoint's page, with the flash message of ``done``."""
    return console.to(f"/webhooks/{endpoint_id}?done={done}")


async def recover(
    session: AsyncSession,
    form: FormData,
    integration_id: uuid.UUID,
    endpoint_id: uuid.UUID,
    by: By,
) -> int:
    """Queue again what failed for good since the form's chosen time and what the endpoint
    never got; with ``waiting``, retry now what waits for its next attempt. How many
    deliveries were queued."""
    delta, _label = SINCE.get(str(form.get("since", ""))[:5], SINCE[DEFAULT_SINCE])
    return await events.recover(
        session,
        integration_id,
        endpoint_id,
        clock.now() - delta,
        waiting=form.get("waiting") == "1",
        by=by,
    )
