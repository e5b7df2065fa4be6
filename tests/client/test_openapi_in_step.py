"""The client stays in step with the service's ``/openapi.json``: every operation of the
document has a method in both clients (or a reason here why not), sent to the operation's path;
every field a model declares exists in the corresponding schema with a compatible type, and
every field the schema requires is declared. Answers may only widen (the client accepts all the
service may send); requests may only narrow (the client sends nothing the service would
refuse)."""

import inspect
import re
import types
import typing
import uuid
from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Any

import httpx
import pytest
from dealbroker_client import AsyncDealbrokerClient, DealbrokerClient
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
    m.DealMessageEvent,
    m.OtherEvent,
)
ANSWERS: dict[type[BaseModel], str] = {
    m.Deal: "DealOut",
    m.Seller: "SellerOut",
    m.Shipment: "ShipmentOut",
    m.DealPage: "DealPage",
    m.PageInfo: "Page",
    m.OfferLink: "OfferLinkOut",
    m.EventPage: "EventPage",
    m.TriggerResult: "TriggerResult",
    m.ClockAdvanced: "ClockAdvanced",
    m.DealClockAdvanced: "DealClockAdvanced",
    m.DealClock: "DealClock",
    m.DealClockTimer: "DealClockTimer",
    m.WebhookSecretRotated: "WebhookSecretRotated",
    m.Token: "TokenResponse",
    **{event: "EventOut" for event in EVENTS},
    m.DealStatusData: "DealStatusData",
    m.SignatureStatusData: "SignatureStatusData",
    m.DealOfferData: "DealOfferData",
    m.OfferDecisionData: "OfferDecisionData",
    m.PaymentStatusData: "PaymentStatusData",
    m.DealShipmentData: "DealShipmentData",
    m.DealMessageData: "DealMessageData",
    m.Conversation: "ConversationOut",
    m.ConversationMessage: "MessageOut",
    m.ConversationPage: "ConversationPage",
    m.Offer: "OfferOut",
    m.OfferPage: "OfferPage",
    m.Lifecycle: "LifecycleOut",
    m.StatusInfo: "StatusInfo",
    m.Transition: "TransitionInfo",
    m.DeadlineInfo: "DeadlineInfo",
    m.ActorInfo: "ActorInfo",
    m.EffectInfo: "EffectInfo",
    m.WebhookEndpoint: "EndpointOut",
    m.WebhookEndpointList: "EndpointList",
    m.DeliveryAttempt: "AttemptOut",
    m.DeliveryAttemptPage: "AttemptPage",
    m.WebhookTestSent: "TestEventOut",
    m.Queued: "Queued",
    m.Scenario: "ScenarioInfo",
    m.ScenarioList: "ScenarioList",
    m.ScenarioResult: "ScenarioResult",
    m.Pong: "Pong",
    m.ApiRequest: "ApiRequestOut",
    m.ApiRequestPage: "ApiRequestPage",
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
    m.ParcelEventTrigger: "ParcelEventTrigger",
    m.WebhookEndpointCreate: "EndpointCreate",
    m.WebhookEndpointUpdate: "EndpointUpdate",
    m.RecoverRequest: "RecoverRequest",
    m.ResendRequest: "ResendRequest",
    m.ScenarioRun: "ScenarioRun",
}
# Answers the client reads as an enum where the schema says only "string", on purpose: the
# interface lists the payment statuses, and an event's kind picks its class.
NARROWED = {
    ("DealOut", "paymentStatus"),
    ("ScenarioResult", "paymentStatus"),
    *(("EventOut", "event") for _ in EVENTS),
}


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


SOME = uuid.uuid4()
# Each operation of the document (its operationId): the client method that performs it, and
# the call that method sends.
OPERATIONS: dict[str, tuple[str, core.Call[Any]]] = {
    "issue_token": ("access_token", core.token(None)),
    "create_deal": ("create_deal", core.create_deal({}, None)),
    "list_deals": ("list_deals", core.list_deals(None, None)),
    "get_deal": ("get_deal", core.get_deal(SOME)),
    "change_deal_status": ("change_status", core.change_status(SOME, "Cancelled", None)),
    "report_shipment_event": (
        "report_shipment_event",
        core.report_shipment_event(SOME, core.shipment_event("delivered", "Posten", "1", 0), None),
    ),
    "get_lifecycle": ("get_lifecycle", core.get_lifecycle()),
    "create_offer_link": ("create_offer_link", core.create_offer_link(SOME, {}, None)),
    "list_deal_offers": ("list_offers", core.list_offers(SOME, None, None)),
    "list_deal_conversations": (
        "list_conversations",
        core.list_conversations(SOME, None, None),
    ),
    "list_webhook_endpoints": ("list_webhook_endpoints", core.list_webhook_endpoints()),
    "create_webhook_endpoint": (
        "create_webhook_endpoint",
        core.create_webhook_endpoint({"url": "https://example.com"}, None),
    ),
    "get_webhook_endpoint": ("get_webhook_endpoint", core.get_webhook_endpoint(SOME)),
    "update_webhook_endpoint": ("update_webhook_endpoint", core.update_webhook_endpoint(SOME, {})),
    "delete_webhook_endpoint": ("delete_webhook_endpoint", core.delete_webhook_endpoint(SOME)),
    "enable_webhook_endpoint": (
        "enable_webhook_endpoint",
        core.switch_webhook_endpoint(SOME, True, None),
    ),
    "disable_webhook_endpoint": (
        "disable_webhook_endpoint",
        core.switch_webhook_endpoint(SOME, False, None),
    ),
    "test_webhook_endpoint": ("test_webhook_endpoint", core.test_webhook_endpoint(SOME, None)),
    "list_delivery_attempts": (
        "list_delivery_attempts",
        core.list_delivery_attempts(SOME, None, None),
    ),
    "recover_webhook_endpoint": (
        "recover_webhook_endpoint",
        core.recover_webhook_endpoint(SOME, 0, None),
    ),
    "resend_event": ("resend_event", core.resend_event(SOME, None, None)),
    "rotate_webhook_secret": ("rotate_webhook_secret", core.rotate_webhook_secret(None, None)),
    "list_requests": ("list_requests", core.list_requests(None, None, None, None)),
    "list_events": ("list_events", core.list_events(None, None, None, None, None)),
    "get_event": ("get_event", core.get_event(SOME)),
    "sandbox_signatureStatus": (
        "trigger_signature_status",
        core.trigger("signatureStatus", {}, None),
    ),
    "sandbox_dealOffer": ("trigger_deal_offer", core.trigger_deal_offer({}, None)),
    "sandbox_dealOfferApproved": (
        "trigger_deal_offer_approved",
        core.trigger("dealOfferApproved", {}, None),
    ),
    "sandbox_dealOfferDenied": (
        "trigger_deal_offer_denied",
        core.trigger("dealOfferDenied", {}, None),
    ),
    "sandbox_paymentStatus": ("trigger_payment_status", core.trigger("paymentStatus", {}, None)),
    "sandbox_dealStatus": ("trigger_deal_status", core.trigger("dealStatus", {}, None)),
    "sandbox_parcelEvent": (
        "trigger_parcel_event",
        core.trigger("parcelEvent", {"deal_id": uuid.uuid4(), "type": "picked_up"}, None),
    ),
    "sandbox_advance_clock": ("advance_clock", core.advance_clock(1, None)),
    "sandbox_advance_deal_clock": (
        "advance_deal_clock",
        core.advance_deal_clock(uuid.uuid4(), 1, None),
    ),
    "sandbox_get_deal_clock": ("get_deal_clock", core.get_deal_clock(uuid.uuid4())),
    "sandbox_list_scenarios": ("list_scenarios", core.list_scenarios()),
    "sandbox_run_scenario": ("run_scenario", core.run_scenario("carrier-completed", None, None)),
    "ping": ("ping", core.ping()),
}
# Operations the client leaves out on purpose, and why.
LEFT_OUT = {
    "change_deal_status_alias": "the deprecated path of change_deal_status",
    "oauth_authorization_server_metadata": "discovery for generic OAuth clients; this one knows "
    "its token endpoint",
    "healthz": "the process's liveness, for the platform's probes",
    "readyz": "the database's readiness, for the platform's probes",
}


def _operations(spec: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        operation["operationId"]: (method.upper(), path)
        for path, methods in spec["paths"].items()
        for method, operation in methods.items()
    }


def test_every_operation_has_a_method_in_both_clients(spec):
    operations = _operations(spec)
    missing = set(operations) - set(OPERATIONS) - set(LEFT_OUT)
    assert not missing, f"operations without a client method: {sorted(missing)}"
    assert not (set(OPERATIONS) | set(LEFT_OUT)) - set(operations), "no longer in the document"
    for operation, (name, _) in OPERATIONS.items():
        sync, async_ = getattr(DealbrokerClient, name, None), getattr(AsyncDealbrokerClient, name)
        assert sync is not None, (operation, name)
        assert not inspect.iscoroutinefunction(sync), (operation, name)
        assert inspect.iscoroutinefunction(async_), (operation, name)


def test_each_method_sends_its_operation(spec):
    operations = _operations(spec)
    for operation, (name, call) in OPERATIONS.items():
        method, template = operations[operation]
        pattern = "^" + re.sub(r"\\{\w+\\}", "[^/]+", re.escape(template)) + "$"
        assert (call.method, bool(re.match(pattern, call.path))) == (method, True), (name, call)
        security = spec["paths"][template][method.lower()].get("security")
        schemes = {next(iter(s), None) for s in security or [{}]}
        auth = {"bearer": "OAuth2ClientCredentials", "webhook-secret": "WebhookSecret"}
        expected = {"client": "ClientSecretBasic", "none": None}.get(call.auth, auth.get(call.auth))
        assert expected in schemes, (name, call.auth, schemes)
