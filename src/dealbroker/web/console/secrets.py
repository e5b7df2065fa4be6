"""What a console's pages that rotate an integration's secrets share: the overlaps a webhook
secret's rotation offers, and the page that shows a new secret once (on the page that answers
the form itself, never through a redirect, whose target a browser may keep in its history;
with ``Cache-Control: no-store``)."""

from collections.abc import Mapping
from datetime import timedelta

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from dealbroker.core.i18n import N_
from dealbroker.integrations import service as integrations
from dealbroker.web.console.access import Console

# The overlaps a webhook secret's rotation offers, in hours, as the form names them.
OVERLAPS = (
    (0, N_("no time: it stops now")),
    (1, N_("an hour")),
    (24, N_("a day")),
    (168, N_("a week")),
)


def overlaps() -> dict[str, object]:
    """The rotation form's choices, and the one chosen unless the person chooses."""
    default = int(integrations.DEFAULT_WEBHOOK_OVERLAP.total_seconds() // 3600)
    return {"overlaps": OVERLAPS, "default_overlap": default}


def overlap(form: FormData) -> timedelta | None:
    """How long the old webhook secret stays valid, as the form chose it; None: no choice."""
    hours = str(form.get("overlap_hours", ""))[:4]
    if hours.isdigit() and int(hours) in dict(OVERLAPS):
        return timedelta(hours=int(hours))
    return None


def shown_once(
    console: Console, request: Request, template: str, context: Mapping[str, object]
) -> Response:
    """The page that shows new secrets once. No language links: they would open the form's
    address, and the secrets are not shown again."""
    return console.page(request, template, {**context, "languages": []})
