"""What every developer portal page shares: its rendering (the member, the CSRF token of their
session, their integration, the role names in the request's language) on top of the party
pages' ``render.page``."""

from starlette.requests import Request
from starlette.responses import Response

from dealbroker.core.i18n import N_, _
from dealbroker.web import render
from dealbroker.web.portal.session import csrf_token

ROLE_NAMES = {
    "read-only": N_("Read-only"),
    "developer": N_("Developer"),
    "owner": N_("Owner"),
}


def page(
    request: Request, template: str, context: dict[str, object], status: int = 200
) -> Response:
    """A portal page: ``render.page`` (CSP, private headers such as ``Cache-Control:
    no-store``, the request's locale) with the logged-in ``member``, the ``csrf`` token every
    form of the page posts, and ``integration`` (``name``, ``client_id``, ``sandbox``: whether
    this deployment is the sandbox) of the member's own integration."""
    member = getattr(request.state, "member", None)
    person = getattr(request.state, "person", None)
    integration = None
    if member is not None:
        integration = {
            "name": member.integration_name,
            "client_id": member.client_id,
            "sandbox": request.app.state.settings.is_sandbox,
        }
    return render.page(
        request,
        template,
        {
            "member": member,
            "person": person,
            "integration": integration,
            "csrf": csrf_token(request) if person is not None else "",
            "role_names": {role: _(name) for role, name in ROLE_NAMES.items()},
            **context,
        },
        status,
    )
