"""The integration's members (owners): add one, change a role, remove one, through the same
``portal.service`` functions as the CLI (audited in the change's transaction). The last owner
is never removed nor demoted. Every member id in a path is looked up within the owner's own
integration: another integration's member is not found."""

import uuid

from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import HTMLResponse, Response

from dealbroker.core.db import Session
from dealbroker.core.errors import Conflict, DomainError, NotFound
from dealbroker.core.i18n import _
from dealbroker.portal import service
from dealbroker.portal.models import ROLES
from dealbroker.web.portal.session import PORTAL, LoggedInMember, Owner, page
from dealbroker.web.render import not_found

router = PORTAL.router()


async def _context(session: AsyncSession, member: LoggedInMember) -> dict[str, object]:
    return {"members": await service.members(session, member.integration_id), "roles": ROLES}


async def _refused(
    request: Request, session: AsyncSession, member: LoggedInMember, error: str
) -> Response:
    context = {**await _context(session, member), "error": error}
    return page(request, "portal_members.html", context, 400)


def _done(code: str) -> Response:
    return PORTAL.to(f"/members?done={code}")


@router.get("/members", response_class=HTMLResponse)
async def members(request: Request, member: Owner, session: Session) -> Response:
    """The integration's members and their roles, and the forms that change them."""
    return page(request, "portal_members.html", await _context(session, member))


@router.post("/members")
async def members_add(request: Request, member: Owner, session: Session) -> Response:
    form = await PORTAL.checked_form(request)
    email = str(form.get("email", "")).strip()[: service.MAX_EMAIL + 1]
    role = str(form.get("role", ""))[:20]
    try:
        async with session.begin_nested():
            await service.add(
                session, member.integration_id, email, role, member.actor, request.state.request_id
            )
    except Conflict:
        error = _("This e-mail address is a member already.")
        return await _refused(request, session, member, error)
    except DomainError:
        error = _("Give a valid e-mail address and a role.")
        return await _refused(request, session, member, error)
    return _done("member-added")


@router.post("/members/{member_id}/role")
async def members_role(
    request: Request, member_id: uuid.UUID, member: Owner, session: Session
) -> Response:
    form = await PORTAL.checked_form(request)
    role = str(form.get("role", ""))[:20]
    try:
        async with session.begin_nested():
            await service.set_role(
                session,
                member.integration_id,
                member_id,
                role,
                member.actor,
                request.state.request_id,
            )
    except service.LastOwner:
        error = _("The integration's last owner stays an owner: make someone else owner first.")
        return await _refused(request, session, member, error)
    except NotFound:
        return not_found(request)
    except DomainError:
        return await _refused(request, session, member, _("Choose a role."))
    return _done("member-changed")


@router.post("/members/{member_id}/remove")
async def members_remove(
    request: Request, member_id: uuid.UUID, member: Owner, session: Session
) -> Response:
    try:
        async with session.begin_nested():
            await service.remove(
                session, member.integration_id, member_id, member.actor, request.state.request_id
            )
    except service.LastOwner:
        error = _("The integration's last owner cannot be removed: make someone else owner first.")
        return await _refused(request, session, member, error)
    except NotFound:
        return not_found(request)
    return _done("member-removed")
