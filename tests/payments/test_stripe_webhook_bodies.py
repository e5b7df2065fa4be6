"""Stripe's webhook given correctly signed hostile bodies: what cannot be read is a 400, a
well-formed event we do not use an ignored 200, and nothing is ever a 500 (which Stripe would
retry for days). The bodies go over loopback to a real ``dealbroker serve`` with the Stripe
provider, on each backend; one deal's payment has a PaymentIntent, so that events naming it
reach every field the handler reads."""

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from dealbroker.payments import service as payments
from dealbroker.payments.models import Payment
from tests.lifecycle_helpers import SETTINGS, new_deal
from tests.payments.emulator import signature
from tests.processes import Server

pytestmark = pytest.mark.server

INTENT = "pi_hostile_bodies"
AMOUNT = 450_000
HANDLED = [
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "payment_intent.canceled",
    "payment_intent.processing",
    "payment_intent.requires_action",
    "refund.failed",
    "refund.updated",
]


@pytest.fixture
def webhook(stripe_server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stripe_server.base, timeout=30) as client:
        yield client


@pytest.fixture
async def intent(sessionmaker, stripe_settings) -> Payment:  # type: ignore[no-untyped-def]
    """A Created payment whose PaymentIntent the events name (``INTENT``, made unique)."""
    deal = await new_deal(sessionmaker)
    await deal.to_signed()
    payment, _ = await deal.step(lambda s, d: payments.start(s, d, SETTINGS))
    intent_id = f"{INTENT}_{uuid.uuid4().hex[:8]}"
    await deal.step(
        lambda s, d: payments.record_stripe_intent(s, payment.id, "cus_hostile", intent_id)
    )
    async with sessionmaker() as session:
        return (await session.scalars(select(Payment).where(Payment.id == payment.id))).one()


def post(client: httpx.Client, body: bytes | str) -> httpx.Response:
    raw = body.encode() if isinstance(body, str) else body
    return client.post(
        "/payments/v1/stripe/webhook",
        content=raw,
        headers={"Stripe-Signature": signature(raw), "Content-Type": "application/json"},
    )


def event(kind: str, obj: Any, **envelope: Any) -> str:
    return json.dumps(
        {
            "id": f"evt_{uuid.uuid4().hex[:16]}",
            "object": "event",
            "type": kind,
            "created": int(time.time()),
            "data": {"object": obj},
            **envelope,
        }
    )


def intent_object(intent_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": intent_id,
        "object": "payment_intent",
        "amount": AMOUNT,
        "currency": "nok",
        "status": "processing",
        "metadata": {"payment_id": "x"},
        **fields,
    }


def test_a_deeply_nested_body_is_refused_with_400(webhook):
    deep = 100_000
    for body in [
        "[" * deep + "]" * deep,
        '{"a":' * 40_000 + "1" + "}" * 40_000,  # as deep as fits under the body limit
        # Deep where a field we do not even read is: the whole body is bounded first.
        '{"id": "evt_1", "type": "payment_intent.succeeded", "data": {"object": {"id": "pi_x", '
        '"metadata": ' + "[" * 5000 + "]" * 5000 + "}}}",
    ]:
        answer = post(webhook, body)
        assert answer.status_code == 400, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
    # The same brackets inside a string are text, not nesting: a well-formed event.
    unused = event("customer.created", {"id": "cus_1", "note": "[" * 5000})
    assert post(webhook, unused).status_code == 200
    # Deeper than the body limit lets through: refused by it before anything is read.
    too_large = post(webhook, "[" * 200_000 + "]" * 200_000)
    assert too_large.status_code == 413, too_large.text


async def test_each_field_read_of_the_wrong_type_is_a_400_and_changes_nothing(
    webhook, intent, sessionmaker
):
    pi = intent.stripe_payment_intent_id
    wrong = [
        # the envelope
        "null",
        "[]",
        '"evt"',
        "17",
        "{}",
        "not json",
        json.dumps({"id": "evt_1", "type": "payment_intent.succeeded"}),
        event("payment_intent.succeeded", intent_object(pi), id=17),
        event("payment_intent.succeeded", intent_object(pi), id=""),
        event("payment_intent.succeeded", intent_object(pi), id="evt_\u0000"),
        event("payment_intent.succeeded", intent_object(pi), id="e" * 256),
        event("payment_intent.succeeded", intent_object(pi), id=["evt_1"]),
        event("payment_intent.succeeded", intent_object(pi), type=None),
        event("payment_intent.succeeded", intent_object(pi), type={"a": 1}),
        event("payment_intent.succeeded", intent_object(pi), data=[intent_object(pi)]),
        event("payment_intent.succeeded", intent_object(pi), data="x"),
        event("payment_intent.succeeded", [intent_object(pi)]),
        event("payment_intent.succeeded", None),
        event("customer.created", [1, 2]),  # even an event we do not use needs an object
        # the PaymentIntent's fields
        event("payment_intent.succeeded", intent_object(pi, id=None)),
        event("payment_intent.succeeded", intent_object(pi, id=[pi])),
        event("payment_intent.succeeded", intent_object(pi, id={"id": pi})),
        event("payment_intent.succeeded", intent_object(pi, amount=str(AMOUNT))),
        event("payment_intent.succeeded", intent_object(pi, amount=float(AMOUNT))),
        event("payment_intent.succeeded", intent_object(pi, amount=True)),
        event("payment_intent.succeeded", intent_object(pi, amount=None)),
        event("payment_intent.succeeded", intent_object(pi, amount=[AMOUNT])),
        event("payment_intent.processing", intent_object(pi, currency=578)),
        event("payment_intent.processing", intent_object(pi, currency=None)),
        event("payment_intent.processing", intent_object(pi, currency=["nok"])),
        event("payment_intent.payment_failed", intent_object(pi, currency="n\u0000k")),
        # the Refund's fields
        event("refund.failed", {"id": 5, "payment_intent": pi}),
        event("refund.failed", {"id": "re_1", "payment_intent": {"id": pi}}),
        event("refund.updated", {"id": "re_1", "status": ["failed"]}),
        event("refund.updated", {"id": "re_1", "status": "failed", "failure_reason": 3}),
    ]
    # A lone surrogate, escaped, is valid JSON but no text we can store or compare.
    wrong.append(event("payment_intent.succeeded", intent_object(pi)).replace(pi, "\\ud800"))
    wrong.append(b'{"id": "evt_\xff\xfe", "type": "x", "data": {"object": {}}}')  # not UTF-8
    wrong.append(
        event("payment_intent.succeeded", intent_object(pi)).replace(
            str(AMOUNT), "1" + "0" * 5000
        )  # a number Python refuses to convert
    )
    for body in wrong:
        answer = post(webhook, body)
        assert answer.status_code == 400, (body[:200], answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
    async with sessionmaker() as session:
        unchanged = await session.get(Payment, intent.id, populate_existing=True)
    assert unchanged is not None
    assert unchanged.status == "Created"


async def test_well_formed_events_we_do_not_apply_are_acknowledged(webhook, intent, sessionmaker):
    pi = intent.stripe_payment_intent_id
    # A type we do not use, with any object and metadata of any type: ignored.
    for body in [
        event("customer.created", {"id": 1, "metadata": [1, {"a": None}]}),
        event("charge.succeeded", {"amount": "450000"}),
        event("payment_intent.created", {"id": [pi], "amount": "x"}),
    ]:
        answer = post(webhook, body)
        assert (answer.status_code, answer.json()["outcome"]) == (200, "ignored"), answer.text
    # Metadata is not read: whatever its type, the event is applied by what is read.
    other_amount = post(
        webhook, event("payment_intent.succeeded", intent_object(pi, amount=1, metadata=[]))
    )
    assert other_amount.json()["outcome"] == "unmatched"  # not the payment's amount: logged
    unknown = post(webhook, event("payment_intent.succeeded", intent_object("pi_not_ours")))
    assert unknown.json()["outcome"] == "unmatched"
    under_way = post(
        webhook, event("payment_intent.processing", intent_object(pi, metadata="not an object"))
    )
    assert (under_way.status_code, under_way.json()["outcome"]) == (200, "applied")
    async with sessionmaker() as session:
        now = await session.get(Payment, intent.id, populate_existing=True)
    assert now is not None
    assert now.status == "Processing"


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from(["", "\x00", "\ud800", "nok", "450000", "e" * 300]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
FIELDS = [
    ("id",),
    ("type",),
    ("data",),
    ("data", "object"),
    ("data", "object", "id"),
    ("data", "object", "amount"),
    ("data", "object", "currency"),
    ("data", "object", "metadata"),
    ("data", "object", "status"),
    ("data", "object", "payment_intent"),
    ("data", "object", "failure_reason"),
]


def _set(event: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    target: Any = event
    for key in path[:-1]:
        if not isinstance(target.get(key), dict):
            return event
        target = target[key]
    target[path[-1]] = value
    return event


def test_any_shape_of_a_signed_event_is_answered_200_or_400(webhook, intent):
    """Property: an event of a type we handle (or not), naming our PaymentIntent, with any
    JSON value at any field we read (one or two at a time), is never answered a 5xx."""
    pi = intent.stripe_payment_intent_id

    @settings(
        max_examples=120,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        database=None,
    )
    @given(
        kind=st.sampled_from([*HANDLED, "customer.created"]),
        changes=st.lists(st.tuples(st.sampled_from(FIELDS), JSON), min_size=1, max_size=2),
    )
    def check(kind: str, changes: list[tuple[tuple[str, ...], Any]]) -> None:
        body = json.loads(event(kind, intent_object(pi, payment_intent=pi)))
        for path, value in changes:
            body = _set(body, path, value)
        answer = post(webhook, json.dumps(body))
        assert answer.status_code in (200, 400), (body, answer.text)

    check()
