"""The OpenAPI document describes every endpoint, its codes and bodies truthfully."""

import pytest

EXPECTED = {
    ("post", "/oauth2/token"): {"200", "400", "401"},
    ("post", "/deals/v1/deals"): {"201", "400", "401", "403", "405", "413", "415", "422"},
    ("get", "/deals/v1/deals"): {"200", "400", "401", "403"},
    ("get", "/deals/v1/deals/{dealId}"): {"200", "400", "401", "403", "404"},
    ("get", "/deals/v1/lifecycle"): {"200", "304", "401", "403"},
    ("get", "/deals/v1/deals/{dealId}/offers"): {"200", "400", "401", "403", "404"},
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
        "415",
        "422",
    },
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
    },
    ("post", "/integrations/v1/webhook-endpoints/{endpointId}/disable"): {
        "200",
        "400",
        "401",
        "403",
        "404",
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
        "404",
        "405",
        "415",
        "422",
    },
    ("post", "/webooks/v1/signatureStatus"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "405",
        "415",
        "422",
    },
    ("post", "/webhooks/v1/dealOffer"): {
        "200",
        "204",
        "400",
        "401",
        "403",
        "404",
        "405",
        "415",
        "422",
    },
    ("post", "/webooks/v1/dealOffer"): {
        "200",
        "204",
        "400",
        "401",
        "403",
        "404",
        "405",
        "415",
        "422",
    },
    ("post", "/webhooks/v1/dealOfferApproved"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "405",
        "409",
        "415",
        "422",
    },
    ("post", "/webooks/v1/dealOfferApproved"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "405",
        "409",
        "415",
        "422",
    },
    ("post", "/webhooks/v1/dealOfferDenied"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "405",
        "409",
        "415",
        "422",
    },
    ("post", "/webooks/v1/dealOfferDenied"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "405",
        "409",
        "415",
        "422",
    },
    ("post", "/webhooks/v1/paymentStatus"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "405",
        "409",
        "415",
        "422",
    },
    ("post", "/webooks/v1/paymentStatus"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "405",
        "409",
        "415",
        "422",
    },
    ("post", "/webhooks/v1/dealStatus"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "405",
        "409",
        "415",
        "422",
    },
    ("post", "/webooks/v1/dealStatus"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "405",
        "409",
        "415",
        "422",
    },
    ("post", "/sandbox/v1/clock/advance"): {"200", "400", "401", "403", "405", "415", "422"},
    ("get", "/sandbox/v1/scenarios"): {"200", "401", "403"},
    ("post", "/sandbox/v1/scenarios"): {"200", "400", "401", "403", "404", "405", "409", "415"},
    ("get", "/ping"): {"200", "503"},
    ("get", "/healthz"): {"200"},
    ("get", "/.well-known/oauth-authorization-server"): {"200"},
    ("get", "/readyz"): {"200", "503"},
}


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


async def test_request_bodies_have_examples(spec):
    schemas = spec["components"]["schemas"]
    for name in ("DealCreate", "OfferLinkCreate", "StatusChange"):
        assert schemas[name]["examples"], name
        assert schemas[name]["additionalProperties"] is False


async def test_bearer_security_is_declared(spec):
    scheme = spec["components"]["securitySchemes"]["OAuth2ClientCredentials"]
    assert scheme["flows"]["clientCredentials"]["tokenUrl"] == "/oauth2/token"
    assert spec["paths"]["/deals/v1/deals"]["get"]["security"] == [
        {"OAuth2ClientCredentials": ["deals:read"]}
    ]


async def test_added_responses_are_documented_with_examples(spec):
    """The lifecycle, allowedActions and the offer list: schema and examples in the document."""
    schemas = spec["components"]["schemas"]
    assert "allowedActions" in schemas["DealOut"]["required"]
    assert schemas["DealOut"]["examples"][0]["allowedActions"] == {
        "changeStatus": ["Cancelled"],
        "createOfferLink": True,
    }
    assert schemas["AllowedActions"]["examples"]
    assert set(schemas["AllowedActions"]["properties"]) == {"changeStatus", "createOfferLink"}
    assert schemas["LifecycleOut"]["examples"]
    assert "from" in schemas["TransitionInfo"]["properties"]
    lifecycle = spec["paths"]["/deals/v1/lifecycle"]["get"]
    assert lifecycle["security"] == [{"OAuth2ClientCredentials": ["deals:read"]}]
    assert lifecycle["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/LifecycleOut"
    }
    assert schemas["OfferPage"]["examples"][0]["items"][0]["offerLinkId"]
    assert schemas["OfferOut"]["examples"]
    offers = spec["paths"]["/deals/v1/deals/{dealId}/offers"]["get"]
    assert offers["security"] == [{"OAuth2ClientCredentials": ["deals:read"]}]
    assert {p["name"] for p in offers["parameters"]} == {"dealId", "page", "pageSize"}
