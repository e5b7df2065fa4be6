"""What a console's webhook pages share, whether they show every integration's endpoints (the
back office) or one integration's (the developer portal): the words for how an endpoint's
deliveries go, the flash message after an action, and the actions on an endpoint both offer
(disable, enable, recover), declared once by ``Webhooks``.

Each action goes through ``events.service``, the one the API and the ``dealbroker webhooks``
commands call, which records it in the audit trail with the console's actor."""

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Annotated, Any

from babel.numbers import format_percent
from fastapi import APIRouter, Depends
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import Request
from starlette.responses import Response

from dealbroker.core import clock, i18n
from dealbroker.core.db import Session
from dealbroker.core.errors import NotFound
from dealbroker.core.i18n import N_, _, ngettext
from dealbroker.events import service as events
from dealbroker.events import tasks
from dealbroker.events.service import By
from dealbroker.web.console.access import Console
from dealbroker.web.render import not_found

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


@dataclass(frozen=True)
class Webhooks:
    """A console's webhook pages: who may act on an endpoint (``acting``, a route dependency),
    on which endpoints (``owner``: the integration of an endpoint they may act on, else
    ``NotFound``), as whom the audit trail names them (``by``), and what the flash messages'
    ``done`` starts with (``done_prefix``) and adds (``more_done``)."""

    console: Console
    acting: Callable[..., Awaitable[Any]]
    owner: Callable[[AsyncSession, Any, uuid.UUID], Awaitable[uuid.UUID]]
    by: Callable[[Request, Any], By]
    done_prefix: str = ""
    more_done: Mapping[str, str] = field(default_factory=dict)

    def context(self, request: Request) -> dict[str, object]:
        """What every webhook page's templates use: the flash message after an action, the
        words for a disabling reason and a failure rate, and the recovery form's choices."""
        done = request.query_params.get("done", "")
        key = done.removeprefix(self.done_prefix) if done.startswith(self.done_prefix) else ""
        words = {**DONE, **self.more_done}
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

    def back(self, endpoint_id: uuid.UUID, done: str) -> Response:
        """To the endpoint's page, with the flash message of ``done``."""
        return self.console.to(f"/webhooks/{endpoint_id}?done={self.done_prefix}{done}")

    def router(self) -> APIRouter:
        """The console's router with the actions every console's endpoint page offers:
        disable, enable and recover."""
        router = self.console.router()
        acting = Annotated[Any, Depends(self.acting)]

        @router.post("/webhooks/{endpoint_id}/disable")
        @router.post("/webhooks/{endpoint_id}/enable")
        async def switch(
            request: Request, endpoint_id: uuid.UUID, who: acting, session: Session
        ) -> Response:
            """Disable or enable the endpoint, as the path says."""
            on = request.url.path.endswith("/enable")
            try:
                integration_id = await self.owner(session, who, endpoint_id)
                by = self.by(request, who)
                await events.change_enabled(session, integration_id, endpoint_id, on, by)
            except NotFound:
                return not_found(request)
            return self.back(endpoint_id, "enabled" if on else "disabled")

        @router.post("/webhooks/{endpoint_id}/recover")
        async def recover(
            request: Request, endpoint_id: uuid.UUID, who: acting, session: Session
        ) -> Response:
            """Queue again what failed for good since the chosen time and what the endpoint
            never got; with ``waiting``, retry now what waits for its next attempt."""
            form = await self.console.checked_form(request)
            delta, _label = SINCE.get(str(form.get("since", ""))[:5], SINCE[DEFAULT_SINCE])
            try:
                queued = await events.recover(
                    session,
                    await self.owner(session, who, endpoint_id),
                    endpoint_id,
                    clock.now() - delta,
                    waiting=form.get("waiting") == "1",
                    by=self.by(request, who),
                )
            except NotFound:
                return not_found(request)
            return self.back(endpoint_id, f"recovered&queued={queued}")

        return router
