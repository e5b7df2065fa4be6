"""What an integration may do to a deal through the API right now: a deal's ``allowedActions``.

Derived from the same rules the endpoints enforce, so an action listed is accepted and one not
listed is refused: the status change asks the lifecycle table for the API's actor
(``api_actor``), the offer link asks ``takes_offers`` (as ``offers.service.link_refusal``
does), and both need a token with ``deals:write``. It is a snapshot: a concurrent change (a
buyer paying, a timer) can still win.
"""

from collections.abc import Callable, Collection
from functools import cache

from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import lifecycle
from dealbroker.deals.lifecycle import OFFER_STATUSES, Actor
from dealbroker.deals.models import DealFields

WRITE_SCOPE = "deals:write"


def api_actor(settings: Settings) -> Actor:
    """Who an integration is in the lifecycle table: in the sandbox it may fire every
    transition, to test its flows; elsewhere only its own (a cancel before payment)."""
    return Actor.SANDBOX if settings.is_sandbox else Actor.INTEGRATION


@cache
def _targets(status: DealStatus, actor: Actor) -> tuple[str, ...]:
    return tuple(s.value for s in lifecycle.allowed_targets(status, actor))


def _nothing() -> dict[str, object]:
    """The body of ``AllowedActions`` for a caller without ``deals:write``."""
    return {"changeStatus": [], "createOfferLink": False}


def allowed_actions(deal: DealFields, scopes: Collection[str], actor: Actor) -> dict[str, object]:
    """The body of ``AllowedActions`` for ``deal``, for a caller with ``scopes``."""
    if WRITE_SCOPE not in scopes:
        return _nothing()
    return {
        "changeStatus": list(_targets(DealStatus(deal.status), actor)),
        # link_refusal(deal) is None exactly when the deal takes offers (a seller with an
        # e-mail is part of that rule); asked directly, no refusal is built for each deal.
        "createOfferLink": takes_offers(deal),
    }


def for_caller(scopes: Collection[str], actor: Actor) -> Callable[[DealFields], dict[str, object]]:
    """``allowed_actions`` for one caller, for every deal of one answer (a list page). A deal's
    actions are a function of its status and whether it takes offers alone, so each such pair
    is worked out once per answer and its body shared by the deals that have it (a page of 20
    holds a few). The bodies are the answer's, never to
    be changed."""
    if WRITE_SCOPE not in scopes:
        nothing = _nothing()
        return lambda deal: nothing
    known: dict[tuple[DealStatus, bool], dict[str, object]] = {}

    def allowed(deal: DealFields) -> dict[str, object]:
        key = (deal.status, takes_offers(deal))
        body = known.get(key)
        if body is None:
            body = known[key] = allowed_actions(deal, scopes, actor)
        return body

    return allowed


def takes_offers(deal: DealFields) -> bool:
    """Offers are taken in ``Draft`` or ``Ad``, with a seller, until one has been approved."""
    return (
        deal.status in OFFER_STATUSES  # a ``DealStatus``, equal to its value (``StrEnum``)
        and bool(deal.seller and deal.seller.get("email"))
        and deal.buyer_user_id is None
    )
