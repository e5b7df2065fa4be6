"""The lifecycle table: every status reachable, final statuses final, actors respected."""

import pytest

from dealbroker.deals import lifecycle
from dealbroker.deals.lifecycle import FINAL_STATUSES, Actor, DealStatus, Trigger


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
    for dispute in (DealStatus.PICKUP_DENIED, DealStatus.SHIPPING_REVIEW_DENIED):
        assert lifecycle.allowed_targets(dispute, Actor.OPERATOR) == [
            DealStatus.COMPLETED,
            DealStatus.REFUNDED,
        ]
        assert lifecycle.allowed_targets(dispute, Actor.BUYER) == []
