"""The lifecycle table: every status reachable, final statuses final, actors respected."""

import pytest

from dealbroker.core.statuses import DealStatus
from dealbroker.deals import lifecycle
from dealbroker.deals.lifecycle import FINAL_STATUSES, Actor, Trigger


def test_every_status_is_reachable_from_draft():
    seen, frontier = {DealStatus.DRAFT}, [DealStatus.DRAFT]
    while frontier:
        status = frontier.pop()
        for target in lifecycle.allowed_targets(status, Actor.SANDBOX):
            if target not in seen:
                seen.add(target)
                frontier.append(target)
    assert seen == set(DealStatus)


@pytest.mark.parametrize("status", sorted(FINAL_STATUSES))
def test_final_statuses_have_no_way_out(status):
    assert lifecycle.allowed_targets(status, Actor.SANDBOX) == []


def test_integration_may_only_cancel_before_payment():
    for status in DealStatus:
        targets = lifecycle.allowed_targets(status, Actor.INTEGRATION)
        if status in (DealStatus.DRAFT, DealStatus.AD, DealStatus.SIGNED):
            assert targets == [DealStatus.CANCELLED]
        else:
            assert targets == []


def test_payment_routes_by_shipping_type():
    paid = lifecycle.transition_for(DealStatus.SIGNED, Trigger.PAID_FOR_PICKUP, Actor.PROVIDER)
    assert paid is not None
    assert paid.target is DealStatus.PICKUP_PENDING
    assert lifecycle.transition_for(DealStatus.AD, Trigger.PAID_FOR_PICKUP, Actor.PROVIDER) is None


def test_buyer_cannot_fire_timer_transitions():
    assert (
        lifecycle.transition_for(
            DealStatus.SHIPPING_ARRIVED, Trigger.REVIEW_PERIOD_ENDED, Actor.BUYER
        )
        is None
    )
    timer = lifecycle.transition_for(
        DealStatus.SHIPPING_ARRIVED, Trigger.REVIEW_PERIOD_ENDED, Actor.TIMER
    )
    assert timer is not None
    assert timer.target is DealStatus.COMPLETED


def test_disputes_resolve_only_by_operator():
    """The operator decides; the parties' own steps in a dispute belong to a return then refund
    the operator decided (the buyer sends the item back, the seller confirms its receipt)."""
    for dispute in (DealStatus.PICKUP_DENIED, DealStatus.SHIPPING_REVIEW_DENIED):
        assert lifecycle.allowed_targets(dispute, Actor.OPERATOR) == [
            DealStatus.COMPLETED,
            DealStatus.REFUNDED,
            dispute,  # return then refund: the deal stays in dispute while the item goes back
        ]
        assert lifecycle.allowed_targets(dispute, Actor.BUYER) == [dispute]
        seller = [
            t.trigger
            for t in lifecycle.TRANSITIONS
            if dispute in t.sources and Actor.SELLER in t.actors
        ]
        assert seller == [Trigger.RETURN_RECEIVED]
        for trigger in (Trigger.DISPUTE_RELEASED, Trigger.DISPUTE_REFUNDED):
            for actor in (Actor.BUYER, Actor.SELLER, Actor.TIMER, Actor.INTEGRATION):
                assert lifecycle.transition_for(dispute, trigger, actor) is None


def test_the_return_steps_are_never_the_sandbox_status_endpoints():
    """Every return step needs a return under way (a guard in deals.flows), so the sandbox's
    status endpoint, which moves to a status, never takes one: a dispute's way to Refunded or
    Completed there is the operator's plain decision."""
    returns = {
        Trigger.RETURN_REQUESTED,
        Trigger.RETURN_SENT,
        Trigger.RETURN_RECEIVED,
        Trigger.RETURN_CONFIRM_EXPIRED,
        Trigger.RETURN_NOT_SENT,
    }
    for transition in lifecycle.TRANSITIONS:
        if transition.trigger in returns:
            assert Actor.SANDBOX not in transition.actors
    for dispute in lifecycle.DISPUTES:
        to_refunded = lifecycle.transition_to(dispute, DealStatus.REFUNDED, Actor.SANDBOX)
        assert to_refunded is not None
        assert to_refunded.trigger is Trigger.DISPUTE_REFUNDED
