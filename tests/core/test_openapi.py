"""The OpenAPI document describes every endpoint, its codes and bodies truthfully."""

from collections.abc import Iterator
from http import HTTPStatus

import pytest

from dealbroker.core.errors import PROBLEM_TYPES, TYPE_BASE, title_for

EXPECTED = {
    ("post", "/oauth2/token"): {"200", "400", "401"},
    # The interface lists 201, 401, 403, 405 ("Invalid input"); 413 and 422 are ours.
    ("post", "/deals/v1/deals"): {"201", "401", "403", "405", "413", "422"},
    # The interface lists 200, 401, 403: page parameters are read, never refused.
    ("get", "/deals/v1/deals"): {"200", "401", "403"},
    ("get", "/deals/v1/deals/{dealId}"): {"200", "400", "401", "403", "404"},
    ("get", "/deals/v1/lifecycle"): {"200", "304", "401", "403"},
    ("get", "/deals/v1/deals/{dealId}/offers"): {"200", "400", "401", "403", "404"},
    ("get", "/deals/v1/deals/{dealId}/conversations"): {"200", "400", "401", "403", "404"},
    ("post", "/deals/v1/deals/{dealId}/status"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "409",
        "413",
        "415",
        "422",
    },
    ("post", "/deals/v1/deals/{dealId}/shipment-events"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "409",
        "413",
        "415",
        "422",
    },
    ("post", "/deals/{dealId}/status"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "409",
        "413",
        "415",
        "422",
    },
    ("post", "/deals/v1/deals/{dealId}/offer"): {
        "201",
        "400",
        "401",
        "403",
        "404",
        "405",
        "413",
        "422",
    },
    ("get", "/integrations/v1/requests"): {"200", "400", "401", "403", "429"},
    ("get", "/integrations/v1/webhook-endpoints"): {"200", "401", "403"},
    ("post", "/integrations/v1/webhook-endpoints"): {
        "201",
        "400",
        "401",
        "403",
        "409",
        "413",
        "415",
        "422",
    },
    ("get", "/integrations/v1/webhook-endpoints/{endpointId}"): {"200", "400", "401", "403", "404"},
    ("patch", "/integrations/v1/webhook-endpoints/{endpointId}"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "413",
        "415",
        "422",
    },
    ("delete", "/integrations/v1/webhook-endpoints/{endpointId}"): {
        "204",
        "400",
        "401",
        "403",
        "404",
    },
    ("post", "/integrations/v1/webhook-endpoints/{endpointId}/enable"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "422",
    },
    ("post", "/integrations/v1/webhook-endpoints/{endpointId}/disable"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "422",
    },
    ("post", "/integrations/v1/webhook-endpoints/{endpointId}/test"): {
        "202",
        "400",
        "401",
        "403",
        "404",
        "409",
        "422",
    },
    ("get", "/integrations/v1/webhook-endpoints/{endpointId}/attempts"): {
        "200",
        "400",
        "401",
        "403",
        "404",
    },
    ("post", "/integrations/v1/webhook-endpoints/{endpointId}/recover"): {
        "202",
        "400",
        "401",
        "403",
        "404",
        "413",
        "415",
        "422",
    },
    ("post", "/integrations/v1/events/{eventId}/resend"): {
        "202",
        "400",
        "401",
        "403",
        "404",
        "413",
        "415",
        "422",
    },
    ("post", "/integrations/v1/webhook-secret/rotate"): {
        "200",
        "400",
        "401",
        "403",
        "413",
        "415",
        "422",
    },
    ("get", "/events/v1/events"): {"200", "400", "401", "403", "404"},
    ("get", "/events/v1/events/{eventId}"): {"200", "400", "401", "403", "404"},
    ("post", "/webhooks/v1/signatureStatus"): {
        "200",
        "400",
        "401",
        "403",
        "405",
        "422",
    },
    ("post", "/webhooks/v1/dealOffer"): {
        "200",
        "204",
        "400",
        "401",
        "403",
        "405",
        "422",
    },
    ("post", "/webhooks/v1/dealOfferApproved"): {
        "200",
        "400",
        "401",
        "403",
        "405",
        "409",
        "422",
    },
    ("post", "/webhooks/v1/dealOfferDenied"): {
        "200",
        "400",
        "401",
        "403",
        "405",
        "409",
        "422",
    },
    ("post", "/webhooks/v1/paymentStatus"): {
        "200",
        "400",
        "401",
        "403",
        "405",
        "409",
        "422",
    },
    ("post", "/webhooks/v1/dealStatus"): {
        "200",
        "400",
        "401",
        "403",
        "405",
        "409",
        "422",
    },
    ("post", "/webhooks/v1/parcelEvent"): {
        "200",
        "400",
        "401",
        "403",
        "405",
        "409",
        "422",
    },
    ("post", "/sandbox/v1/clock/advance"): {"200", "400", "401", "403", "405", "415", "422"},
    ("post", "/sandbox/v1/deals/{dealId}/clock/advance"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "405",
        "415",
        "422",
    },
    ("get", "/sandbox/v1/deals/{dealId}/clock"): {"200", "400", "401", "403", "404"},
    ("get", "/sandbox/v1/scenarios"): {"200", "401", "403"},
    ("post", "/sandbox/v1/scenarios"): {"200", "400", "401", "403", "404", "405", "409", "415"},
    ("get", "/ping"): {"200", "503"},
    ("get", "/healthz"): {"200"},
    ("get", "/.well-known/oauth-authorization-server"): {"200"},
    ("get", "/readyz"): {"200", "503"},
}
# Every operation an integration's credential opens (and the token endpoint) may also answer 429,
# its rate limit; the probes and the discovery document count towards none.
UNLIMITED = {
    ("get", "/ping"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/.well-known/oauth-authorization-server"),
}
EXPECTED = {op: codes if op in UNLIMITED else codes | {"429"} for op, codes in EXPECTED.items()}


@pytest.fixture
async def spec(client):
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    return response.json()


async def test_every_operation_and_code_is_documented(spec):
    documented = {
        (method, path): set(op["responses"])
        for path, item in spec["paths"].items()
        for method, op in item.items()
    }
    assert documented == EXPECTED


async def test_no_framework_default_422(spec):
    """FastAPI documents 422 for validation by default; we answer 405 or 400 instead."""
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if "422" in op["responses"]:
                assert op["responses"]["422"]["description"] == "Idempotency key reused", (
                    method,
                    path,
                )


async def test_errors_are_problem_json_with_examples(spec):
    for path, item in spec["paths"].items():
        for method, op in item.items():
            for code, response in op["responses"].items():
                if code.startswith(("4", "5")) and path != "/oauth2/token":
                    content = response["content"]["application/problem+json"]
                    assert content["example"]["status"] == int(code), (method, path, code)


async def test_every_error_references_the_one_problem_schema(spec):
    """One Problem schema, so a generated client has one error type, not one per operation."""
    for path, item in spec["paths"].items():
        for method, op in item.items():
            for code, response in op["responses"].items():
                if code.startswith(("4", "5")) and path != "/oauth2/token":
                    assert set(response["content"]) == {"application/problem+json"}
                    schema = response["content"]["application/problem+json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Problem"}, (method, path)
    problem = spec["components"]["schemas"]["Problem"]
    assert set(problem["required"]) == {"type", "title", "status", "detail"}


STATUS_PHRASES = {status.phrase for status in HTTPStatus}


async def test_error_examples_carry_the_types_and_titles_the_service_sends(spec):
    for path, item in spec["paths"].items():
        for method, op in item.items():
            for code, response in op["responses"].items():
                if code.startswith(("4", "5")) and path != "/oauth2/token":
                    example = response["content"]["application/problem+json"]["example"]
                    type_ = example["type"].removeprefix(TYPE_BASE)
                    assert type_ in PROBLEM_TYPES, (method, path, code)
                    assert title_for(type_, int(code)) == example["title"], (method, path, code)
                    # A title that names a status names this one: never a 400 "Conflict".
                    if example["title"] in STATUS_PHRASES:
                        assert example["title"] == HTTPStatus(int(code)).phrase, (path, code)


async def test_example_types_match_real_answers(client, caller):
    """The examples' types are the ones a real error carries."""
    malformed = await client.post(
        "/sandbox/v1/clock/advance",
        content=b"{",
        headers={"webhook-secret": caller.webhook_secret, "content-type": "application/json"},
    )
    invalid = await client.post(
        "/deals/v1/deals", json={"packageType": "Huge"}, headers=caller.headers
    )
    unauthorized = await client.get("/deals/v1/deals")
    for response, operation, code in (
        (malformed, ("/sandbox/v1/clock/advance", "post"), "400"),
        (invalid, ("/deals/v1/deals", "post"), "405"),
        (unauthorized, ("/deals/v1/deals", "get"), "401"),
    ):
        assert response.status_code == int(code), response.text
        spec = (await client.get("/openapi.json")).json()
        documented = spec["paths"][operation[0]][operation[1]]["responses"][code]
        example = documented["content"]["application/problem+json"]["example"]
        assert response.json()["type"] == example["type"]
        assert response.json()["title"] == example["title"]


async def test_one_page_schema(spec):
    schemas = spec["components"]["schemas"]
    assert "PageInfo" not in schemas
    for name in ("DealPage", "OfferPage", "EventPage", "AttemptPage"):
        assert schemas[name]["properties"]["page"] == {"$ref": "#/components/schemas/Page"}


async def test_misspelled_sandbox_aliases_are_served_but_not_documented(spec, client):
    assert not [p for p in spec["paths"] if p.startswith("/webooks/")]
    assert "/webhooks/v1/dealStatus" in spec["paths"]
    response = await client.post("/webooks/v1/dealStatus", json={})
    assert response.status_code == 401  # served: it asks for the webhook-secret


async def test_idempotency_key_on_every_post_but_the_token(spec):
    parameters = spec["components"]["parameters"]
    assert parameters["IdempotencyKey"]["name"] == "Idempotency-Key"
    for path, item in spec["paths"].items():
        for method, op in item.items():
            refs = [p.get("$ref") for p in op.get("parameters", [])]
            # Not the token (RFC 6749) nor a sandbox scenario (several transactions).
            expected = method == "post" and path not in ("/oauth2/token", "/sandbox/v1/scenarios")
            assert ("#/components/parameters/IdempotencyKey" in refs) == expected, (method, path)
            if expected:
                success = [r for c, r in op["responses"].items() if c.startswith("2")]
                assert all("Idempotent-Replayed" in r["headers"] for r in success), path


async def test_security_schemes(spec):
    schemes = spec["components"]["securitySchemes"]
    assert schemes["WebhookSecret"] == {
        "type": "apiKey",
        "in": "header",
        "name": "webhook-secret",
        "description": schemes["WebhookSecret"]["description"],
    }
    assert schemes["ClientSecretBasic"]["scheme"] == "basic"
    assert spec["paths"]["/oauth2/token"]["post"]["security"] == [{"ClientSecretBasic": []}, {}]
    for path, item in spec["paths"].items():
        for op in item.values():
            if path.startswith(("/webhooks/", "/sandbox/")):
                assert op["security"] == [{"WebhookSecret": []}], path
                assert "webhook-secret" not in {p.get("name") for p in op.get("parameters", [])}
            elif path.startswith(("/deals/", "/integrations/", "/events/")):
                assert list(op["security"][0]) == ["OAuth2ClientCredentials"], path
            elif path != "/oauth2/token":
                # The probes and the discovery document say they take no credential.
                assert op["security"] == [], path
    for item in spec["webhooks"].values():
        assert item["post"]["security"] == []  # a receiver checks the signature headers


async def test_servers_name_this_deployment(spec):
    assert spec["servers"] == [{"url": "http://testserver", "description": "This deployment"}]


async def test_idempotency_key_has_no_fixed_example(spec):
    """An example key copied into every request makes each after the first a reuse (422)."""
    parameter = spec["components"]["parameters"]["IdempotencyKey"]
    for node in (parameter, parameter["schema"]):
        assert "example" not in node
        assert "examples" not in node


async def test_the_events_are_documented_as_webhooks(spec):
    """The interface's six, the carrier's ``deal.shipment``, the opt-in ``deal.message``, and
    the ``webhook.test`` that "send a test event" queues."""
    webhooks = spec["webhooks"]
    assert set(webhooks) == {
        "deal.status",
        "signature.status",
        "deal.offer",
        "deal.offerApproved",
        "deal.offerDenied",
        "payment.status",
        "deal.shipment",
        "deal.message",
        "webhook.test",
    }
    schemas = spec["components"]["schemas"]
    for kind, item in webhooks.items():
        operation = item["post"]
        headers = {p["name"] for p in operation["parameters"] if p["in"] == "header"}
        assert headers == {"webhook-id", "webhook-timestamp", "webhook-signature"}
        ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        envelope = schemas[ref.rsplit("/", 1)[1]]
        assert envelope["properties"]["event"]["const"] == kind
        assert {"id", "event", "api_version", "created", "data"} <= set(envelope["required"])
    data = schemas["PaymentStatusData"]["properties"]
    assert data["status"] == {"$ref": "#/components/schemas/PaymentStatus"}
    shipment = schemas["DealShipmentData"]["properties"]
    assert shipment["type"]["enum"] == [
        "booked",
        "picked_up",
        "in_transit",
        "ready_for_pickup",
        "delivered",
        "returned",
        "lost",
        "damaged",
    ]
    test = schemas["WebhookTestEvent"]
    assert "deal_sequence" not in test["examples"][0]  # about no deal
    message = webhooks["deal.message"]["post"]
    assert "opt-in" in message["description"].lower()
    assert "text" not in schemas["DealMessageData"]["properties"]  # the words stay in the API
    assert set(schemas["DealMessageData"]["required"]) >= {"dealId", "messageId", "from"}
    assert set(schemas["WebhookTestData"]["required"]) == {"endpointId", "message"}
    assert (
        "/integrations/v1/webhook-endpoints/{endpointId}/test"
        in (webhooks["webhook.test"]["post"]["description"])
    )
    assert "/integrations/v1/webhook-endpoints/{endpointId}/test" in spec["paths"]


async def test_webhooks_document_only_what_a_receiver_answers(spec):
    for kind, item in spec["webhooks"].items():
        assert set(item["post"]["responses"]) == {"200", "410"}, kind


async def test_every_ref_resolves(spec):
    """A reference to a schema the document dropped fails code generators (openapi-typescript
    refused the webhooks' leftover 422 pointing at the removed ``HTTPValidationError``)."""

    def refs(node: object) -> Iterator[str]:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                yield node["$ref"]
            for value in node.values():
                yield from refs(value)
        elif isinstance(node, list):
            for value in node:
                yield from refs(value)

    for ref in set(refs(spec)):
        assert ref.startswith("#/"), ref
        target: object = spec
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            assert isinstance(target, dict), ref
            assert part in target, ref
            target = target[part]


async def test_stated_limits(spec):
    """Limits the server enforces are in the document, so generated input respects them."""
    list_deals = spec["paths"]["/deals/v1/deals"]["get"]
    page_size = next(p for p in list_deals["parameters"] if p["name"] == "pageSize")
    assert page_size["schema"]["anyOf"][0]["maximum"] == 100
    assert page_size["schema"]["default"] == 20
    schemas = spec["components"]["schemas"]
    price = schemas["DealCreate"]["properties"]["price"]["anyOf"][0]
    assert (price["minimum"], price["maximum"], price["multipleOf"]) == (0, 10_000_000, 0.01)
    url = schemas["EndpointCreate"]["properties"]["url"]
    assert url["pattern"].startswith("^https?://")
    since = schemas["RecoverRequest"]["properties"]["since"]
    assert (since["minimum"], since["type"]) == (0, "integer")


async def test_allow_lists_every_method_of_the_path(client, caller):
    response = await client.request("PUT", "/deals/v1/deals", headers=caller.headers)
    assert response.status_code == 405
    assert set(response.headers["allow"].split(", ")) >= {"GET", "POST"}
    response = await client.request(
        "PUT", "/integrations/v1/webhook-endpoints/3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10"
    )
    assert set(response.headers["allow"].split(", ")) >= {"GET", "PATCH", "DELETE"}


async def test_integers_take_whole_floats(client, caller):
    response = await client.post(
        "/integrations/v1/webhook-secret/rotate",
        json={"overlapSeconds": 60.0},
        headers=caller.headers,
    )
    assert response.status_code == 200, response.text
    refused = await client.post(
        "/integrations/v1/webhook-secret/rotate",
        json={"overlapSeconds": 60.5},
        headers=caller.headers,
    )
    assert refused.status_code == 400


async def test_docs_are_served_offline(client):
    """/docs loads Swagger UI from the service itself, never a CDN, under a tight CSP."""
    page = await client.get("/docs")
    assert page.status_code == 200
    html = page.text
    assert "/docs/assets/swagger-ui-bundle.js" in html
    assert "/docs/assets/swagger-ui.css" in html
    assert "//" not in html.split("<body>")[1]  # no absolute URL: nothing from elsewhere
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "script-src 'self' 'sha256-" in policy
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"):
        response = await client.get(f"/docs/assets/{asset}")
        assert response.status_code == 200, asset
    assert (await client.get("/redoc")).status_code == 404


def _examples(spec: dict) -> Iterator[tuple[str, dict, object]]:
    """Every example in the document with the schema it illustrates: the schemas' own (and
    their properties'), the parameters' and headers', and the request and response bodies'."""

    def schema_examples(where: str, schema: dict) -> Iterator[tuple[str, dict, object]]:
        for i, example in enumerate(schema.get("examples", [])):
            yield f"{where} examples[{i}]", schema, example
        if "example" in schema:
            yield f"{where} example", schema, schema["example"]
        for name, prop in schema.get("properties", {}).items():
            yield from schema_examples(f"{where}.{name}", prop)

    def with_schema(where: str, node: dict) -> Iterator[tuple[str, dict, object]]:
        schema = node.get("schema")
        if schema is None:
            return
        yield from schema_examples(f"{where} schema", schema)
        if "example" in node:
            yield f"{where} example", schema, node["example"]
        for name, example in node.get("examples", {}).items():
            yield f"{where} examples.{name}", schema, example["value"]

    def operation_examples(where: str, op: dict) -> Iterator[tuple[str, dict, object]]:
        for parameter in op.get("parameters", []):
            if "$ref" not in parameter:
                yield from with_schema(f"{where} parameter {parameter['name']}", parameter)
        for media, content in op.get("requestBody", {}).get("content", {}).items():
            yield from with_schema(f"{where} request {media}", content)
        for code, response in op.get("responses", {}).items():
            for media, content in response.get("content", {}).items():
                yield from with_schema(f"{where} {code} {media}", content)
            for name, header in response.get("headers", {}).items():
                if "$ref" not in header:
                    yield from with_schema(f"{where} {code} header {name}", header)

    for name, schema in spec["components"]["schemas"].items():
        yield from schema_examples(f"schema {name}", schema)
    for kind in ("parameters", "headers"):
        for name, node in spec["components"].get(kind, {}).items():
            yield from with_schema(f"{kind} {name}", node)
    for section in ("paths", "webhooks"):
        for path, item in spec.get(section, {}).items():
            for method, op in item.items():
                yield from operation_examples(f"{method} {path}", op)


def _absolute_refs(node: object) -> object:
    """The document with its ``#/...`` references made absolute (``urn:openapi#/...``), so that
    a schema taken out of it still resolves them against the whole document."""
    if isinstance(node, dict):
        return {
            k: f"urn:openapi{v}" if k == "$ref" and isinstance(v, str) else _absolute_refs(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_absolute_refs(v) for v in node]
    return node


async def test_every_example_is_valid_against_its_schema(spec):
    """A code generator, a mock server or a fuzzer takes the examples as true: each one is
    checked against its schema (formats too), references resolved within the document."""
    import jsonschema
    import referencing
    from referencing.jsonschema import DRAFT202012

    absolute = _absolute_refs(spec)
    document = referencing.Resource.from_contents(absolute, default_specification=DRAFT202012)
    registry = referencing.Registry().with_resource("urn:openapi", document)
    checked, invalid = 0, []
    for where, schema, example in _examples(absolute):  # type: ignore[arg-type]
        validator = jsonschema.Draft202012Validator(
            schema,
            registry=registry,
            format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
        )
        checked += 1
        invalid += [f"{where}: {error.message}" for error in validator.iter_errors(example)]
    assert checked > 60, checked
    assert invalid == []
