"""What every back office page shares: its rendering (the operator, the CSRF token of their
session, the role names in the request's language) on top of the party pages' ``render.page``."""

from starlette.requests import Request
from starlette.responses import Response

from dealbroker.core.i18n import N_, _
from dealbroker.web import render
from dealbroker.web.backoffice.session import csrf_token

ROLE_NAMES = {
    "support": N_("Support (disputes, deals)"),
    "finance": N_("Finance (payouts, reconciliation, refunds)"),
    "admin": N_("Admin (integrations, webhooks, operators)"),
}


def page(
    request: Request, template: str, context: dict[str, object], status: int = 200
) -> Response:
    """A back office page: ``render.page`` (CSP, private headers, the request's locale) with
    the logged-in operator and the CSRF token every form of the page posts."""
    logged_in = getattr(request.state, "operator", None)
    return render.page(
        request,
        template,
        {
            "operator": logged_in,
            "csrf": csrf_token(request) if logged_in else "",
            "role_names": {role: _(name) for role, name in ROLE_NAMES.items()},
            **context,
        },
        status,
    )
