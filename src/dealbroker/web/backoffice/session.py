"""Who may act in the back office, and on what: operators, each with their roles, on every
integration. The console (``web.console``) is the developer portal's too: the session's cookie
is ``dealbroker-operator`` (``__Host-dealbroker-operator`` on https), and the sessions are
``operators.service``'s (over ``core.login``).

Routes declare what they need with ``require_operator(role)`` (``Console.requires``): no valid
session sends a person to the login page; a session without the role gets the 403 page.
"""

import logging
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core.i18n import N_
from dealbroker.operators import models, service
from dealbroker.operators.service import LoggedIn
from dealbroker.web.console.access import Console
from dealbroker.web.console.login import Logins

PREFIX = "/back-office"
ROLE_NAMES = {
    "support": N_("Support (disputes, deals)"),
    "finance": N_("Finance (payouts, reconciliation, refunds)"),
    "admin": N_("Admin (integrations, webhooks, operators)"),
}


def _shows(request: Request) -> dict[str, object]:
    """What every back office page shows of who acts: the logged-in ``operator``."""
    return {"operator": getattr(request.state, "operator", None)}


BACK_OFFICE = Console(
    name="back_office",
    title=N_("Back office"),
    prefix=PREFIX,
    cookie="dealbroker-operator",
    csrf_purpose="back-office-csrf",
    resume=service.resume_session,
    logged_in_as="operator",
    shows=_shows,
    acting=lambda request, operator: operator,
    has_role=lambda operator, role: role in operator.roles,
    role_names=ROLE_NAMES,
    login_heading=N_("Log in to the back office"),
    needs_role=N_(
        "This page needs the role %(role)s, which you do not have. Ask an administrator if you "
        "need it."
    ),
    back_home=N_("Back to the back office"),
)
page = BACK_OFFICE.page


async def _start(
    request: Request, session: AsyncSession, operator: models.Operator, method: str
) -> str:
    settings = request.app.state.settings
    return await service.start_session(
        session, operator, method, settings, request.state.request_id
    )


async def _end(request: Request, session: AsyncSession, logged_in: LoggedIn) -> None:
    await service.end_session(session, logged_in, request.state.request_id)


LOGINS = Logins(
    console=BACK_OFFICE,
    log=logging.getLogger("dealbroker.back_office"),
    link_cookie="dealbroker-link",
    oidc_cookie="dealbroker-oidc",
    oidc_what="login",
    refused=N_("The login did not succeed. Try again, or ask an administrator for a login link."),
    find=service.for_login,
    redeem=service.redeem_login_link,
    start=_start,
    end=_end,
)


require_operator = BACK_OFFICE.requires

Operator = Annotated[LoggedIn, Depends(require_operator())]
Support = Annotated[LoggedIn, Depends(require_operator("support"))]
Finance = Annotated[LoggedIn, Depends(require_operator("finance"))]
Admin = Annotated[LoggedIn, Depends(require_operator("admin"))]
