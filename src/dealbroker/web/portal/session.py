"""Who may act in the developer portal, and on what: the members of one integration, each with
a role, on that integration only. The console (``web.console``) is the back office's too: the
session's cookie is ``dealbroker-portal`` (``__Host-dealbroker-portal`` on https), and the
sessions are ``portal.service``'s (over ``core.login``).

Routes declare what they need with ``require_member(role)`` (``Console.requires``; a role is
at least the one named: owner ⊇ developer ⊇ read-only): no valid session sends a person to the
login page; a person who has not chosen an integration yet to the choice; a member
without the role gets the 403 page. Every page shows the member's own integration only: the
routes take no integration from the URL, it is the session's.
"""

import logging
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core import i18n
from dealbroker.core.i18n import N_
from dealbroker.portal import service
from dealbroker.portal.service import LoggedInMember, Person
from dealbroker.web.console.access import Console
from dealbroker.web.console.login import Logins

__all__ = [
    "PREFIX",
    "PORTAL",
    "ChoiceRequired",
    "Developer",
    "LoggedInMember",
    "LoggedInPerson",
    "Owner",
    "ReadOnly",
    "page",
    "require_member",
]

PREFIX = "/portal"
ROLE_NAMES = {
    "read-only": N_("Read-only"),
    "developer": N_("Developer"),
    "owner": N_("Owner"),
}


class ChoiceRequired(Exception):
    """A logged-in person who has not chosen which of their integrations to act in."""


def _shows(request: Request) -> dict[str, object]:
    """What every portal page shows of who acts: the logged-in ``person``, as which
    ``member``, and ``integration`` (``name``, ``client_id``, ``sandbox``: whether this
    deployment is the sandbox), the member's own."""
    member = getattr(request.state, "member", None)
    integration = None
    if member is not None:
        integration = {
            "name": member.integration_name,
            "client_id": member.client_id,
            "sandbox": request.app.state.settings.is_sandbox,
        }
    person = getattr(request.state, "person", None)
    return {"member": member, "person": person, "integration": integration}


def _member(request: Request, person: Person) -> LoggedInMember:
    """As which member the person acts: the one they chose (``ChoiceRequired`` until they
    have)."""
    if person.member is None:
        raise ChoiceRequired()
    request.state.member = person.member
    return person.member


PORTAL = Console(
    name="portal",
    title=N_("Developer portal"),
    prefix=PREFIX,
    cookie="dealbroker-portal",
    csrf_purpose="portal-csrf",
    resume=service.resume_session,
    logged_in_as="person",
    shows=_shows,
    acting=_member,
    has_role=lambda member, role: member.at_least(role),
    role_names=ROLE_NAMES,
    login_heading=N_("Log in to the developer portal"),
    needs_role=N_(
        "This page needs the role %(role)s in your integration. Ask one of its owners if you "
        "need it."
    ),
    back_home=N_("Back to the developer portal"),
)
page = PORTAL.page


async def _start(request: Request, session: AsyncSession, email_key: str, method: str) -> str:
    settings = request.app.state.settings
    return await service.start_session(
        session, email_key, method, settings, i18n.current(), request.state.request_id
    )


async def _end(request: Request, session: AsyncSession, person: Person) -> None:
    await service.end_session(session, person, request.state.request_id)


LOGINS = Logins(
    console=PORTAL,
    log=logging.getLogger("dealbroker.portal"),
    link_cookie="dealbroker-portal-link",
    oidc_cookie="dealbroker-portal-oidc",
    oidc_what="portal login",
    refused=N_("The login did not succeed. Try again, or ask for a login link by e-mail."),
    find=service.for_login,
    redeem=service.redeem_login_link,
    start=_start,
    end=_end,
)


require_member = PORTAL.requires

# The logged-in person, whether or not they have chosen an integration (the choice's page).
LoggedInPerson = Annotated[Person, Depends(PORTAL.anyone)]
ReadOnly = Annotated[LoggedInMember, Depends(require_member("read-only"))]
Developer = Annotated[LoggedInMember, Depends(require_member("developer"))]
Owner = Annotated[LoggedInMember, Depends(require_member("owner"))]
