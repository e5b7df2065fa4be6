"""The client's models stay in step with the service's ``/openapi.json``: every field a model
declares exists in the corresponding schema with a compatible type, and every field the schema
requires is declared. Answers may only widen (the client accepts all the service may send);
requests may only narrow (the client sends nothing the service would refuse)."""

import types
import typing
import uuid
from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Any

import httpx
import pytest
from dealbroker_client import _core as core
from dealbroker_client import models as m
from pydantic import BaseModel

from tests.client.conftest import Credentials

EVENTS = (
    m.DealStatusEvent,
    m.SignatureStatusEvent,
    m.DealOfferEvent,
    m.DealOfferApprovedEvent,
    m.DealOfferDeniedEvent,
    m.PaymentStatusEvent,
    m.DealShipmentEvent,
    m.OtherEvent,
)
ANSWERS: dict[type[BaseModel], str] = {
    m.Deal: "DealOut",
    m.Seller: "SellerOut",
    m.DealPage: "DealPage",
    m.PageInfo: "Page",
    m.OfferLink: "OfferLinkOut",
    m.EventPage: "EventPage",
    m.TriggerResult: "TriggerResult",
    m.ClockAdvanced: "ClockAdvanced",
    m.WebhookSecretRotated: "WebhookSecretRotated",
    m.Token: "TokenResponse",
    **{event: "EventOut" for event in EVENTS},
}
REQUESTS: dict[type[BaseModel], str] = {
    m.DealCreate: "DealCreate",
    m.SellerIn: "Seller",
    m.OfferLinkCreate: "OfferLinkCreate",
    m.OfferBuyer: "OfferBuyer",
    m.StatusChange: "StatusChange",
    m.ShipmentEventIn: "ShipmentEventIn",
    m.SignatureStatusTrigger: "SignatureStatusTrigger",
    m.DealOfferTrigger: "DealOfferTrigger",
    m.OfferDecisionTrigger: "OfferDecisionTrigger",
    m.PaymentStatusTrigger: "PaymentStatusTrigger",
    m.DealStatusTrigger: "DealStatusTrigger",
}
# Answers the client reads as an enum where the schema says only "string", on purpose: the
# interface lists the payment statuses, and an event's kind picks its class.
NARROWED = {("DealOut", "paymentStatus"), *(("EventOut", "event") for _ in EVENTS)}


@pytest.fixture(scope="module")
def spec(creds: Credentials) -> dict[str, Any]:
    return httpx.get(f"{creds.base}/openapi.json").json()


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    return spec["components"]["schemas"][ref.rsplit("/", 1)[1]] if ref else schema


def _server_kinds(spec: dict[str, Any], schema: dict[str, Any]) -> tuple[set[str], set[str]]:
    """The JSON types a schema allows, and its enum values (empty: any value)."""
    schema = _resolve(spec, schema)
    if "anyOf" in schema:
        kinds: set[str] = set()
        enum: set[str] = set()
        for option in schema["anyOf"]:
            k, e = _server_kinds(spec, option)
            kinds |= k
            enum |= e
        return kinds, enum
    kind = schema.get("type", "object")
    return {kind}, {str(v) for v in schema.get("enum", [])}


def _client_kinds(annotation: Any) -> tuple[set[str], set[str]]:
    """The JSON types a model field reads or writes, and its enum values (empty: any)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _client_kinds(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        kinds: set[str] = set()
        enum: set[str] = set()
        for option in typing.get_args(annotation):
            k, e = _client_kinds(option)
            kinds |= k
            enum |= e
        return kinds, enum
    if origin is typing.Literal:
        return {"string"}, {str(v) for v in typing.get_args(annotation)}
    if origin is list:
        return {"array"}, set()
    if origin is dict:
        return {"object"}, set()
    if annotation is type(None):
        return {"null"}, set()
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return {"string"}, {str(v.value) for v in annotation}
    simple = {
        str: "string",
        uuid.UUID: "string",
        datetime: "string",
        Decimal: "string",
        bool: "boolean",
        int: "integer",
        float: "number",
    }
    if annotation in simple:
        return {simple[annotation]}, set()
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {"object"}, set()
    raise AssertionError(f"no JSON type known for {annotation!r}")


def _widen(kinds: set[str]) -> set[str]:
    return kinds | {"integer"} if "number" in kinds else kinds


def _fields(model: type[BaseModel]) -> dict[str, tuple[Any, bool]]:
    return {
        (f.alias or name): (f.annotation, f.is_required()) for name, f in model.model_fields.items()
    }


@pytest.mark.parametrize("model", list(ANSWERS), ids=lambda c: c.__name__)
def test_answer_models_read_all_the_service_sends(spec, model):
    name = ANSWERS[model]
    schema = spec["components"]["schemas"][name]
    properties, required = schema["properties"], set(schema.get("required", []))
    fields = _fields(model)
    assert required <= set(fields), f"{model.__name__} lacks {required - set(fields)}"
    for field, (annotation, is_required) in fields.items():
        assert field in properties, f"{model.__name__}.{field} is not in {name}"
        assert not is_required or field in required, f"{model.__name__}.{field} may be absent"
        server, server_enum = _server_kinds(spec, properties[field])
        client, client_enum = _client_kinds(annotation)
        assert server <= _widen(client), f"{model.__name__}.{field}: {server} vs {client}"
        if client_enum and (name, field) not in NARROWED:
            assert server_enum, f"{model.__name__}.{field} narrows a plain string"
            assert server_enum <= client_enum, f"{model.__name__}.{field}"


@pytest.mark.parametrize("model", list(REQUESTS), ids=lambda c: c.__name__)
def test_request_models_send_only_what_the_service_takes(spec, model):
    name = REQUESTS[model]
    schema = spec["components"]["schemas"][name]
    properties, required = schema["properties"], set(schema.get("required", []))
    fields = _fields(model)
    assert schema.get("additionalProperties") is not True
    for field in required:
        assert fields.get(field, (None, False))[1], f"{model.__name__} must require {field}"
    for field, (annotation, _) in fields.items():
        assert field in properties, f"{model.__name__}.{field} is not in {name}"
        server, server_enum = _server_kinds(spec, properties[field])
        client, client_enum = _client_kinds(annotation)
        assert client <= _widen(server), f"{model.__name__}.{field}: {client} vs {server}"
        if server_enum:
            assert client_enum, f"{model.__name__}.{field} sends any string"
            assert client_enum <= server_enum, f"{model.__name__}.{field}"


def test_every_path_the_client_calls_is_served(spec):
    some = uuid.uuid4()
    calls = [
        core.token(None),
        core.list_deals(None, None),
        core.get_deal(some),
        core.create_deal({}, None),
        core.change_status(some, "Cancelled", None),
        core.report_shipment_event(some, core.shipment_event("delivered", "Posten", "1", 0), None),
        core.create_offer_link(some, {}, None),
        core.list_events(None, None, None, None, None),
        core.get_event(some),
        core.rotate_webhook_secret(None, None),
        core.trigger_deal_offer({}, None),
        core.advance_clock(1, None),
        *(core.trigger(name, {}, None) for name in core.TRIGGERS if name != "dealOffer"),
    ]
    for call in calls:
        path = call.path.replace(str(some), "{dealId}")
        if path.startswith("/events/v1/events/"):
            path = "/events/v1/events/{eventId}"
        assert call.method.lower() in spec["paths"].get(path, {}), f"{call.method} {path}"
