"""Webhook endpoints, delivery with retries, and the events API."""

import contextlib
import json
import uuid
from datetime import timedelta

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import select, update
from standardwebhooks.webhooks import Webhook

from dealbroker import worker as worker_module
from dealbroker.core import clock
from dealbroker.core.settings import Settings
from dealbroker.events import tasks
from dealbroker.events.models import Delivery, WebhookEndpoint
from dealbroker.events.schemas import WebhookTestEvent
from dealbroker.events.tasks import RETRY_DELAYS, DeliveryJob
from tests.conftest import create_deal, row_counts
from tests.events.delivery import ENDPOINTS, drain, register
from tests.receiver import start_receiver


class TestEndpointsApi:
    async def test_create_get_list_update_delete(self, client, caller, receiver):
        created = await register(
            client, caller, receiver.url, events=["deal.status"], description="main"
        )
        assert set(created) == {
            "id",
            "url",
            "events",
            "description",
            "enabled",
            "disabledReason",
            "failingSince",
            "createdAt",
            "updatedAt",
        }
        assert created["url"] == receiver.url
        assert created["events"] == ["deal.status"]
        assert created["enabled"] is True
        path = f"{ENDPOINTS}/{created['id']}"
        assert (await client.get(path, headers=caller.headers)).json() == created
        assert (await client.get(ENDPOINTS, headers=caller.headers)).json() == {"items": [created]}
        patched = await client.patch(
            path, json={"events": None, "description": "all"}, headers=caller.headers
        )
        assert patched.status_code == 200
        assert patched.json()["events"] is None
        assert patched.json()["description"] == "all"
        assert (await client.delete(path, headers=caller.headers)).status_code == 204
        assert (await client.get(path, headers=caller.headers)).status_code == 404

    async def test_enable_and_disable(self, client, caller, receiver):
        endpoint = await register(client, caller, receiver.url)
        path = f"{ENDPOINTS}/{endpoint['id']}"
        disabled = (await client.post(f"{path}/disable", headers=caller.headers)).json()
        assert disabled["enabled"] is False
        assert disabled["disabledReason"] == "disabled by the integration"
        enabled = (await client.post(f"{path}/enable", headers=caller.headers)).json()
        assert enabled["enabled"] is True
        assert enabled["disabledReason"] is None

    @pytest.mark.parametrize(
        "body",
        [
            {"url": "ftp://example.com/hook"},
            {"url": "not a url"},
            {"url": "https://example.com/hook", "events": ["deal.unknown"]},
            {"url": "https://example.com/hook", "events": []},
            {"url": "https://example.com/hook", "secret": "mine"},
            {},
        ],
    )
    async def test_invalid_endpoint_is_400(self, client, caller, sessionmaker, body):
        counts = await row_counts(sessionmaker)
        response = await client.post(ENDPOINTS, json=body, headers=caller.headers)
        assert response.status_code == 400
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["errors"]
        assert await row_counts(sessionmaker) == counts

    async def test_another_integrations_endpoint_is_404(self, client, caller, other, receiver):
        endpoint = await register(client, caller, receiver.url)
        path = f"{ENDPOINTS}/{endpoint['id']}"
        assert (await client.get(path, headers=other.headers)).status_code == 404
        assert (await client.delete(path, headers=other.headers)).status_code == 404
        assert (await client.post(f"{path}/test", headers=other.headers)).status_code == 404
        assert (await client.get(ENDPOINTS, headers=other.headers)).json() == {"items": []}

    async def test_reads_need_read_scope_and_writes_need_write_scope(self, client, caller):
        assert (await client.get(ENDPOINTS)).status_code == 401
        assert (
            await client.post(ENDPOINTS, json={"url": "https://example.com"})
        ).status_code == 401


class TestDelivery:
    async def test_status_change_is_delivered_signed(self, client, caller, receiver, worker):
        await register(client, caller, receiver.url)
        deal = await create_deal(client, caller)
        await client.post(
            f"/deals/v1/deals/{deal['id']}/status",
            json={"status": "Cancelled"},
            headers=caller.headers,
        )
        assert await drain(worker) == 2  # created (Draft) and Cancelled
        bodies = [json.loads(r.body) for r in receiver.requests]
        # One batch is sent concurrently: arrival order is not guaranteed (nor promised).
        assert sorted((b["event"], b["data"]["status"]) for b in bodies) == [
            ("deal.status", "Cancelled"),
            ("deal.status", "Draft"),
        ]
        for request, body in zip(receiver.requests, bodies, strict=True):
            assert Webhook(caller.webhook_secret).verify(request.body, request.headers) == body
            assert request.headers["webhook-id"] == body["id"]
            # Answers are read raw, never decoded: an uncompressed one is asked for.
            assert request.headers["accept-encoding"] == "identity"
            # The interface's envelope, plus our deal_sequence (docs/webhooks.md).
            assert set(body) == {"id", "event", "api_version", "created", "data", "deal_sequence"}
            assert set(body["data"]) == {"dealId", "status", "statusDate"}
        numbered = sorted(bodies, key=lambda b: b["deal_sequence"])
        assert [(b["deal_sequence"], b["data"]["status"]) for b in numbered] == [
            (1, "Draft"),
            (2, "Cancelled"),
        ]

    async def test_subscriptions_filter_kinds(self, client, caller, receiver, worker):
        await register(client, caller, receiver.url, events=["payment.status"])
        await create_deal(client, caller)
        assert await drain(worker) == 0
        assert receiver.requests == []

    async def test_a_rolled_back_change_emits_nothing(
        self, client, caller, receiver, worker, sessionmaker
    ):
        await register(client, caller, receiver.url)
        deal = await create_deal(client, caller)
        await drain(worker)
        illegal = await client.post(
            f"/deals/v1/deals/{deal['id']}/status",
            json={"status": "Completed"},
            headers=caller.headers,
        )
        assert illegal.status_code == 409
        assert await drain(worker) == 0
        assert len(receiver.requests) == 1

    async def test_retries_follow_the_schedule_then_succeed(
        self, client, caller, receiver, worker, sessionmaker, frozen_clock
    ):
        caller_token = await _fresh_token(client, caller)
        await register(client, caller_token, receiver.url)
        receiver.answer(500, times=3)
        await create_deal(client, caller_token)
        start = frozen_clock[0]
        assert await drain(worker) == 1  # first attempt fails: 500
        for n, delay in enumerate(RETRY_DELAYS[:3], start=1):
            frozen_clock[0] += delay - timedelta(milliseconds=1)
            assert await drain(worker) == 0, f"retry {n} came early"
            frozen_clock[0] += timedelta(milliseconds=1)
            assert await drain(worker) == 1, f"retry {n} did not come"
        assert [r.headers["webhook-id"] for r in receiver.requests] == [
            receiver.requests[0].headers["webhook-id"]
        ] * 4
        assert frozen_clock[0] - start == sum(RETRY_DELAYS[:3], timedelta())
        async with sessionmaker() as session:
            delivery = await session.scalar(select(Delivery))
        assert delivery.status == "succeeded"
        assert delivery.attempts == 4
        attempts = (
            await client.get(
                f"{ENDPOINTS}/{(await _endpoint_id(client, caller_token))}/attempts",
                headers=caller_token.headers,
            )
        ).json()
        assert attempts["page"]["totalCount"] == 4
        assert [a["statusCode"] for a in attempts["items"]] == [200, 500, 500, 500]
        assert [a["success"] for a in attempts["items"]] == [True, False, False, False]
        assert all(a["latencyMs"] >= 0 for a in attempts["items"])

    async def test_jitter_stays_within_ten_percent(self):
        now = clock.now()
        for attempts, delay in enumerate(RETRY_DELAYS, start=1):
            latest = tasks.next_attempt(attempts, now, None, lambda: 1.0)
            assert latest == now + delay * 1.1
            assert tasks.next_attempt(attempts, now, None, lambda: 0.0) == now + delay
        assert tasks.next_attempt(len(RETRY_DELAYS) + 1, now, None, lambda: 0.0) is None

    async def test_retry_after_slows_down(self):
        now = clock.now()
        assert tasks.next_attempt(1, now, timedelta(minutes=10), lambda: 0.0) == now + timedelta(
            minutes=10
        )
        assert (
            tasks.next_attempt(1, now, timedelta(seconds=1), lambda: 0.0) == now + RETRY_DELAYS[0]
        )

    async def test_gives_up_after_the_schedule(
        self, client, caller, receiver, worker, sessionmaker, frozen_clock
    ):
        caller_token = await _fresh_token(client, caller)
        await register(client, caller_token, receiver.url)
        receiver.answer(503, times=100)
        await create_deal(client, caller_token)
        await drain(worker)
        for delay in RETRY_DELAYS:
            frozen_clock[0] += delay
            assert await drain(worker) == 1
        frozen_clock[0] += timedelta(days=30)
        assert await drain(worker) == 0
        assert len(receiver.requests) == len(RETRY_DELAYS) + 1
        async with sessionmaker() as session:
            delivery = await session.scalar(select(Delivery))
            endpoint = await session.scalar(select(WebhookEndpoint))
        assert delivery.status == "failed"
        assert delivery.last_status_code == 503
        # About three days of failures: not yet the five that disable an endpoint.
        assert endpoint.enabled is True
        assert endpoint.failing_since is not None
        # The integration recovers what failed since a given time, with the same webhook-id.
        receiver.script.clear()
        caller_token = await _fresh_token(client, caller)
        recovered = await client.post(
            f"{ENDPOINTS}/{endpoint.id}/recover",
            json={"since": clock.to_millis(frozen_clock[0] - timedelta(days=40))},
            headers=caller_token.headers,
        )
        assert recovered.status_code == 202
        assert recovered.json() == {"queued": 1}
        assert await drain(worker) == 1
        assert (
            receiver.requests[-1].headers["webhook-id"]
            == receiver.requests[0].headers["webhook-id"]
        )
        async with sessionmaker() as session:
            assert (await session.scalar(select(Delivery))).status == "succeeded"

    async def test_endpoint_failing_for_five_days_is_disabled_and_can_recover(
        self, client, caller, receiver, worker, sessionmaker, frozen_clock
    ):
        caller_token = await _fresh_token(client, caller)
        endpoint = await register(client, caller_token, receiver.url)
        receiver.answer(500, times=1000)
        start = frozen_clock[0]
        for day in range(6):
            frozen_clock[0] = start + timedelta(days=day)
            caller_token = await _fresh_token(client, caller)
            await create_deal(client, caller_token)
            await drain(worker)
        async with sessionmaker() as session:
            stored = await session.get(WebhookEndpoint, uuid.UUID(endpoint["id"]))
        assert stored.enabled is False
        assert "5 days" in stored.disabled_reason
        # Events go on being recorded while it is disabled, and wait.
        await create_deal(client, caller_token)
        assert await drain(worker) == 0
        receiver.script.clear()  # the receiver is healthy again
        seen_before = len(receiver.requests)
        path = f"{ENDPOINTS}/{endpoint['id']}"
        enabled = await client.post(f"{path}/enable", headers=caller_token.headers)
        assert enabled.json()["failingSince"] is None
        # Recovery queues what it never got while disabled (one event); the rest were waiting.
        recovered = await client.post(
            f"{path}/recover", json={"since": clock.to_millis(start)}, headers=caller_token.headers
        )
        assert recovered.json() == {"queued": 1}
        # Waiting deliveries resume on their schedule: within a day every event has arrived.
        frozen_clock[0] += timedelta(days=1)
        await drain(worker)
        caller_token = await _fresh_token(client, caller)
        events = (
            await client.get("/events/v1/events?pageSize=100", headers=caller_token.headers)
        ).json()
        assert events["page"]["totalCount"] == 7
        delivered = {r.headers["webhook-id"] for r in receiver.requests[seen_before:]}
        assert delivered == {e["id"] for e in events["items"]}

    async def test_410_disables_the_endpoint(self, client, caller, receiver, worker, sessionmaker):
        endpoint = await register(client, caller, receiver.url)
        receiver.answer(410)
        await create_deal(client, caller)
        await drain(worker)
        got = (await client.get(f"{ENDPOINTS}/{endpoint['id']}", headers=caller.headers)).json()
        assert got["enabled"] is False
        assert "410" in got["disabledReason"]
        async with sessionmaker() as session:
            assert (await session.scalar(select(Delivery))).status == "failed"

    async def test_attempts_and_deliveries_are_counted_by_outcome(
        self, client, caller, receiver, worker, frozen_clock
    ):
        def seen() -> dict[str, float]:
            return {
                name: REGISTRY.get_sample_value(metric, {"outcome": outcome}) or 0.0
                for name, metric, outcome in [
                    ("ok", "dealbroker_webhook_attempt_duration_seconds_count", "success"),
                    ("error", "dealbroker_webhook_attempt_duration_seconds_count", "http_error"),
                    ("retrying", "dealbroker_webhook_deliveries_total", "retrying"),
                    ("failed", "dealbroker_webhook_deliveries_total", "failed"),
                    ("succeeded", "dealbroker_webhook_deliveries_total", "succeeded"),
                ]
            }

        before = seen()
        await register(client, caller, receiver.url)
        receiver.answer(500)
        await create_deal(client, caller)
        await drain(worker)
        frozen_clock[0] += RETRY_DELAYS[0]
        await drain(worker)
        receiver.answer(410)
        await create_deal(client, caller)
        await drain(worker)
        after = seen()
        assert {k: after[k] - before[k] for k in after} == {
            "ok": 1,
            "error": 2,  # the 500 and the 410
            "retrying": 1,
            "failed": 1,
            "succeeded": 1,
        }

    async def test_redirects_are_failures_and_not_followed(self, client, caller, receiver, worker):
        await register(client, caller, receiver.url)
        receiver.answer(302, {"Location": receiver.url + "/elsewhere"})
        await create_deal(client, caller)
        await drain(worker)
        assert [r.path for r in receiver.requests] == ["/hook"]

    async def test_response_excerpt_is_bounded(
        self, client, caller, receiver, worker, loopback_is_public
    ):
        endpoint = await register(client, caller, receiver.url)
        receiver.answer(500, body=b"x" * 100_000)
        await create_deal(client, caller)
        await drain(worker)
        attempt = (
            await client.get(f"{ENDPOINTS}/{endpoint['id']}/attempts", headers=caller.headers)
        ).json()["items"][0]
        assert len(attempt["responseExcerpt"]) == 20 * 1024

    async def test_unreachable_endpoint_is_an_attempt_with_an_error(self, client, caller, worker):
        endpoint = await register(client, caller, "http://127.0.0.1:9/hook")
        await create_deal(client, caller)
        await drain(worker)
        attempt = (
            await client.get(f"{ENDPOINTS}/{endpoint['id']}/attempts", headers=caller.headers)
        ).json()["items"][0]
        assert attempt["success"] is False
        assert attempt["statusCode"] is None
        assert attempt["error"]

    async def test_a_slow_receiver_is_cut_off_within_half_the_lease(
        self, client, caller, receiver, sessionmaker
    ):
        """A batch must be recorded before its lease ends, or another worker would send it again."""
        short = DeliveryJob(sessionmaker, allow_private=True, lease=timedelta(seconds=2))
        try:
            assert short.send_timeout == 1
            endpoint = await register(client, caller, receiver.url)
            receiver.delay = 1.5
            await create_deal(client, caller)
            assert await short.run_once() == 1
        finally:
            receiver.delay = 0
            await short.aclose()
        attempt = (
            await client.get(f"{ENDPOINTS}/{endpoint['id']}/attempts", headers=caller.headers)
        ).json()["items"][0]
        assert attempt["error"] == "timed out after 1 s", attempt
        assert DeliveryJob(sessionmaker, allow_private=True).send_timeout == 15

    async def test_test_event_goes_to_one_endpoint(self, client, caller, receiver, worker):
        endpoint = await register(client, caller, receiver.url)
        other = start_receiver()
        try:
            await register(client, caller, other.url)
            response = await client.post(
                f"{ENDPOINTS}/{endpoint['id']}/test", headers=caller.headers
            )
            assert response.status_code == 202
            await drain(worker)
            assert [json.loads(r.body)["event"] for r in receiver.requests] == ["webhook.test"]
            assert json.loads(receiver.requests[0].body)["id"] == response.json()["eventId"]
            assert other.requests == []
            # What arrives is what the OpenAPI document's ``webhooks`` declares for the kind.
            sent = WebhookTestEvent.model_validate_json(receiver.requests[0].body)
            assert sent.data.endpointId == uuid.UUID(endpoint["id"])
            assert sent.deal_sequence is None
            documented = WebhookTestEvent.model_json_schema()["examples"][0]
            assert set(json.loads(receiver.requests[0].body)) == set(documented)
            assert set(documented["data"]) == set(sent.data.model_dump())
        finally:
            other.close()

    async def test_resend_uses_the_same_webhook_id(self, client, caller, receiver, worker):
        await register(client, caller, receiver.url)
        await create_deal(client, caller)
        await drain(worker)
        event_id = receiver.requests[0].headers["webhook-id"]
        response = await client.post(
            f"/integrations/v1/events/{event_id}/resend", headers=caller.headers
        )
        assert response.status_code == 202
        assert response.json() == {"queued": 1}
        await drain(worker)
        assert [r.headers["webhook-id"] for r in receiver.requests] == [event_id, event_id]
        assert receiver.requests[0].body == receiver.requests[1].body
        unknown = await client.post(
            f"/integrations/v1/events/{uuid.uuid4()}/resend", headers=caller.headers
        )
        assert unknown.status_code == 404


class TestEventsApi:
    async def test_list_filter_and_get(self, client, caller, other):
        first = await create_deal(client, caller)
        second = await create_deal(client, caller)
        await client.post(
            f"/deals/v1/deals/{first['id']}/status",
            json={"status": "Cancelled"},
            headers=caller.headers,
        )
        await create_deal(client, other)
        listed = (await client.get("/events/v1/events", headers=caller.headers)).json()
        assert listed["page"] == {"pageSize": 20, "pageNumber": 1, "totalPages": 1, "totalCount": 3}
        assert [(e["data"]["dealId"], e["data"]["status"]) for e in listed["items"]] == [
            (first["id"], "Cancelled"),
            (second["id"], "Draft"),
            (first["id"], "Draft"),
        ]
        by_deal = (
            await client.get(f"/events/v1/events?dealId={first['id']}", headers=caller.headers)
        ).json()
        assert [e["data"]["status"] for e in by_deal["items"]] == ["Cancelled", "Draft"]
        by_kind = (
            await client.get("/events/v1/events?event=payment.status", headers=caller.headers)
        ).json()
        assert by_kind["items"] == []
        one = await client.get(
            f"/events/v1/events/{listed['items'][0]['id']}", headers=caller.headers
        )
        assert one.json() == listed["items"][0]
        assert (
            await client.get(f"/events/v1/events/{listed['items'][0]['id']}", headers=other.headers)
        ).status_code == 404

    async def test_after_cursor_walks_forward(self, client, caller):
        for _ in range(5):
            await create_deal(client, caller)
        newest_first = (await client.get("/events/v1/events", headers=caller.headers)).json()[
            "items"
        ]
        oldest = newest_first[-1]["id"]
        after = (
            await client.get(f"/events/v1/events?after={oldest}&pageSize=2", headers=caller.headers)
        ).json()
        assert [e["id"] for e in after["items"]] == [e["id"] for e in newest_first[::-1][1:3]]
        assert after["page"]["totalCount"] == 4
        assert (
            await client.get(f"/events/v1/events?after={uuid.uuid4()}", headers=caller.headers)
        ).status_code == 404

    @pytest.mark.parametrize("query", ["event=deal.nope", "dealId=nope", "after=1"])
    async def test_bad_filters_are_400(self, client, caller, query):
        response = await client.get(f"/events/v1/events?{query}", headers=caller.headers)
        assert response.status_code == 400
        assert response.headers["content-type"] == "application/problem+json"

    async def test_page_parameters_are_read_as_the_nearest_valid_page(self, client, caller):
        response = await client.get("/events/v1/events?page=0&pageSize=101", headers=caller.headers)
        assert response.status_code == 200, response.text
        page = response.json()["page"]
        assert (page["pageNumber"], page["pageSize"], page["adjusted"]) == (
            1,
            100,
            ["page", "pageSize"],
        )


class TestProductionRefusesPrivateDestinations:
    @pytest.fixture
    async def prod_client(self, db_url, engine):
        import httpx

        from dealbroker.app import create_app
        from tests.conftest import BASE_URL, make_settings

        application = create_app(
            make_settings(db_url, environment="production", secret_key="k" * 40), engine
        )
        async with application.router.lifespan_context(application):
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=application), base_url=BASE_URL
            ) as c:
                yield c

    @pytest.mark.parametrize(
        "url",
        [
            "http://127.0.0.1/hook",
            "http://10.0.0.5/hook",
            "http://169.254.169.254/latest/meta-data",
            "http://[::1]/hook",
            "http://localhost/hook",
        ],
    )
    async def test_registration_is_refused(self, prod_client, sessionmaker, url):
        from tests.conftest import make_caller

        prod_caller = await make_caller(prod_client, sessionmaker)
        response = await prod_client.post(ENDPOINTS, json={"url": url}, headers=prod_caller.headers)
        assert response.status_code == 400
        assert "refused" in response.json()["detail"]

    async def test_sending_is_refused_even_if_registered(self, sessionmaker, receiver):
        """An endpoint that slipped in (e.g. registered in the sandbox, or DNS changed) is still
        not dialled: the check runs on the address at send time."""
        from dealbroker.core.settings import Settings
        from dealbroker.events import service as events
        from dealbroker.events.envelope import EventKind
        from dealbroker.integrations import service as integrations

        async with sessionmaker() as session, session.begin():
            created = await integrations.create(session, "Prod")
            sandbox = Settings(database_url="sqlite://", environment="sandbox")
            await events.create_endpoint(
                session,
                created.integration.id,
                sandbox,
                url=receiver.url,
                event_kinds=None,
                description=None,
                enabled=True,
            )
            await events.emit(session, created.integration.id, EventKind.DEAL_STATUS, {"x": 1})
        production_worker = DeliveryJob(sessionmaker, allow_private=False)
        try:
            assert await production_worker.run_once() == 1
        finally:
            await production_worker.aclose()
        assert receiver.requests == []
        async with sessionmaker() as session:
            delivery = await session.scalar(select(Delivery))
        assert delivery.last_error.startswith("refused")


class TestHostedSandbox:
    """A sandbox that others can reach must not be a read-back proxy into its own network: with
    ``sandbox_private_webhooks`` off it refuses loopback and private destinations as production
    does, and no sandbox keeps the answer of a destination that is not public."""

    @pytest.fixture
    def hosted(self, db_url):
        from tests.conftest import make_settings

        return make_settings(db_url, sandbox_private_webhooks=False)

    @pytest.fixture
    async def hosted_client(self, hosted, engine):
        import httpx

        from dealbroker.app import create_app
        from tests.conftest import BASE_URL

        application = create_app(hosted, engine)
        async with application.router.lifespan_context(application):
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=application), base_url=BASE_URL
            ) as c:
                yield c

    def test_a_local_sandbox_allows_them_and_production_never(self, db_url):
        from tests.conftest import make_settings

        assert make_settings(db_url).private_webhooks_allowed
        production = make_settings(
            db_url, environment="production", secret_key="k" * 40, sandbox_private_webhooks=True
        )
        assert not production.private_webhooks_allowed

    @pytest.mark.parametrize(
        "url",
        [
            "http://127.0.0.1:8000/oauth2/token",
            "http://10.0.0.5/hook",
            "http://169.254.169.254/latest/meta-data",
            "http://[::1]/hook",
            "http://localhost/hook",
        ],
    )
    async def test_registration_is_refused(self, hosted_client, sessionmaker, url):
        from tests.conftest import make_caller

        hosted_caller = await make_caller(hosted_client, sessionmaker)
        counts = await row_counts(sessionmaker)
        response = await hosted_client.post(
            ENDPOINTS, json={"url": url}, headers=hosted_caller.headers
        )
        assert response.status_code == 400
        assert "refused" in response.json()["detail"]
        assert await row_counts(sessionmaker) == counts

    async def test_delivery_is_refused_at_dial_time(
        self, client, caller, sessionmaker, receiver, hosted
    ):
        # Registered while private addresses were allowed (or DNS changed since): still not dialled.
        endpoint = await register(client, caller, receiver.url)
        await create_deal(client, caller)
        job = DeliveryJob.from_settings(sessionmaker, hosted)
        try:
            assert await drain(job) == 1
        finally:
            await job.aclose()
        assert receiver.requests == []
        attempt = (
            await client.get(f"{ENDPOINTS}/{endpoint['id']}/attempts", headers=caller.headers)
        ).json()["items"][0]
        assert attempt["error"].startswith("refused"), attempt
        assert attempt["responseExcerpt"] is None

    async def test_a_private_destinations_answer_is_not_kept(
        self, client, caller, sessionmaker, receiver
    ):
        from tests.conftest import make_settings

        endpoint = await register(client, caller, receiver.url)
        receiver.answer(500, body=b'{"access_token": "internal"}')
        await create_deal(client, caller)
        job = DeliveryJob.from_settings(sessionmaker, make_settings("sqlite://"))
        try:
            assert await drain(job) == 1
        finally:
            await job.aclose()
        assert len(receiver.requests) == 1  # delivered
        attempt = (
            await client.get(f"{ENDPOINTS}/{endpoint['id']}/attempts", headers=caller.headers)
        ).json()["items"][0]
        assert attempt["statusCode"] == 500
        assert attempt["latencyMs"] >= 0
        assert attempt["responseExcerpt"] is None


@contextlib.asynccontextmanager
async def app_client(settings, engine):
    """An in-process client of an app with ``settings`` (its environment) on the test database."""
    import httpx

    from dealbroker.app import create_app
    from tests.conftest import BASE_URL

    application = create_app(settings, engine)
    async with application.router.lifespan_context(application):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=application), base_url=BASE_URL
        ) as c:
            yield c


class TestHostsThatDoNotResolve:
    """The sandbox registers a URL whose host does not resolve (yet), like our docs'
    market.example.com; production refuses it. Whatever the environment registered, the address
    dialled is vetted when the webhook is sent."""

    DOCS_URL = "https://market.example.com/webhooks/dealbroker"

    @pytest.fixture
    async def dns(self, monkeypatch):
        """The names the resolver knows (name -> addresses); every other name does not resolve,
        and no query leaves the machine."""
        from tests.events.delivery import fake_resolver

        names: dict[str, list[str]] = {}
        fake_resolver(monkeypatch, lambda host: names.get(host, []))
        return names

    @pytest.mark.parametrize("private", [True, False], ids=["local", "hosted"])
    async def test_the_sandbox_registers_it(self, db_url, engine, sessionmaker, dns, private):
        from tests.conftest import make_caller, make_settings

        sandbox = make_settings(db_url, sandbox_private_webhooks=private)
        async with app_client(sandbox, engine) as c:
            caller = await make_caller(c, sessionmaker)
            created = await register(c, caller, self.DOCS_URL)
            assert created["url"] == self.DOCS_URL
            moved = await c.patch(
                f"{ENDPOINTS}/{created['id']}",
                json={"url": "https://hooks.market.example.com/dealbroker"},
                headers=caller.headers,
            )
            assert moved.status_code == 200, moved.text
            # Only the resolution is waived: a name that resolves is judged as always.
            dns["intranet.example"] = ["10.0.0.5"]
            inside = await c.post(
                ENDPOINTS, json={"url": "http://intranet.example/hook"}, headers=caller.headers
            )
            assert inside.status_code == (201 if private else 400), inside.text

    async def test_production_refuses_it(self, db_url, engine, sessionmaker, dns):
        from tests.conftest import make_caller, make_settings

        production = make_settings(db_url, environment="production", secret_key="k" * 40)
        async with app_client(production, engine) as c:
            caller = await make_caller(c, sessionmaker)
            counts = await row_counts(sessionmaker)
            response = await c.post(ENDPOINTS, json={"url": self.DOCS_URL}, headers=caller.headers)
            assert response.status_code == 400
            problem = response.json()
            assert problem["detail"].startswith(
                "Webhook URL refused: refusing to send: 'market.example.com' does not resolve to public addresses only"
            )
            assert problem["errors"][0]["field"] == "url"
            assert await row_counts(sessionmaker) == counts

    async def test_a_local_sandbox_delivers_once_it_resolves(
        self, client, caller, sessionmaker, receiver, dns
    ):
        port = receiver.server.server_address[1]
        endpoint = await register(client, caller, f"http://later.example:{port}/hook")
        dns["later.example"] = ["127.0.0.1"]
        await create_deal(client, caller)
        job = DeliveryJob.from_settings(sessionmaker, Settings(database_url="sqlite://"))
        try:
            assert await drain(job) == 1
        finally:
            await job.aclose()
        assert len(receiver.requests) == 1
        request = receiver.requests[0]
        assert Webhook(caller.webhook_secret).verify(request.body, request.headers)
        attempt = (
            await client.get(f"{ENDPOINTS}/{endpoint['id']}/attempts", headers=caller.headers)
        ).json()["items"][0]
        assert (attempt["success"], attempt["statusCode"]) == (True, 200)

    async def test_a_hosted_sandbox_vets_it_at_dial_time(
        self, db_url, engine, sessionmaker, receiver, dns
    ):
        from tests.conftest import make_caller, make_settings

        hosted = make_settings(db_url, sandbox_private_webhooks=False)
        port = receiver.server.server_address[1]
        async with app_client(hosted, engine) as c:
            caller = await make_caller(c, sessionmaker)
            endpoint = await register(c, caller, f"http://later.example:{port}/hook")
            await create_deal(c, caller)
            # Not resolving is retried as a network error; resolving inside is refused.
            for answer, error in (
                (
                    [],
                    "ConnectError: could not send: 'later.example' does not resolve to public addresses only",
                ),
                (
                    ["127.0.0.1"],
                    "refused: refusing to send: 'later.example' does not resolve to public addresses only",
                ),
            ):
                dns["later.example"] = answer
                async with sessionmaker() as session, session.begin():
                    await session.execute(
                        update(Delivery).values(next_attempt_at=clock.now() - timedelta(seconds=1))
                    )
                job = DeliveryJob.from_settings(sessionmaker, hosted)
                try:
                    assert await job.run_once() == 1
                finally:
                    await job.aclose()
                attempts = (
                    await c.get(f"{ENDPOINTS}/{endpoint['id']}/attempts", headers=caller.headers)
                ).json()["items"]
                assert attempts[0]["error"].startswith(error), attempts[0]
        assert receiver.requests == []


async def _fresh_token(client, caller):
    """A token issued at the current (frozen) time, for tests that move the clock."""
    from dataclasses import replace

    response = await client.post(
        "/oauth2/token",
        data={"grant_type": "client_credentials"},
        auth=(caller.client_id, caller.client_secret),
    )
    return replace(caller, token=response.json()["access_token"])


async def _endpoint_id(client, caller) -> str:
    return (await client.get(ENDPOINTS, headers=caller.headers)).json()["items"][0]["id"]


async def test_expired_idempotency_keys_are_purged(client, caller, sessionmaker, frozen_clock):
    from dealbroker.core.idempotency import IdempotencyKey, purge_expired

    fresh = await _fresh_token(client, caller)
    await client.post(
        "/deals/v1/deals", json={}, headers={**fresh.headers, "Idempotency-Key": "old"}
    )
    frozen_clock[0] += timedelta(hours=25)
    fresh = await _fresh_token(client, caller)
    await client.post(
        "/deals/v1/deals", json={}, headers={**fresh.headers, "Idempotency-Key": "new"}
    )
    async with sessionmaker() as session, session.begin():
        assert await purge_expired(session, frozen_clock[0], 100) == 1
    async with sessionmaker() as session:
        assert list(await session.scalars(select(IdempotencyKey.key))) == ["new"]


async def test_a_dropped_listen_connection_is_reopened(engine, sessionmaker, monkeypatch):
    import asyncio

    from sqlalchemy import text

    if engine.dialect.name != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    monkeypatch.setattr(worker_module, "LISTEN_RETRY_SECONDS", 0.2)
    listening = text(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN%'"
    )

    async def listeners() -> list[int]:
        async with engine.connect() as conn:
            return list((await conn.execute(listening)).scalars())

    async def until(predicate) -> list[int]:  # type: ignore[no-untyped-def]
        for _ in range(100):
            pids = await listeners()
            if predicate(pids):
                return pids
            await asyncio.sleep(0.05)
        raise AssertionError("the LISTEN connection did not come (back)")

    settings = Settings(database_url="sqlite://", worker_poll_seconds=0.05)
    worker = worker_module.Runner(sessionmaker, settings, engine)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        (first,) = await until(lambda pids: len(pids) == 1)
        async with engine.connect() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
        (second,) = await until(lambda pids: len(pids) == 1 and pids[0] != first)
        assert second != first
    finally:
        stop.set()
        await running
        await worker.aclose()
