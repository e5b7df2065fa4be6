"""The ASGI application: routers, error handlers, and the resources it runs on."""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import NoReturn, cast

from fastapi import APIRouter, FastAPI, Request
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from dealbroker import __version__, settlement
from dealbroker.auth import api as auth_api
from dealbroker.auth.lockout import TokenGuard
from dealbroker.auth.token_cache import Listener, TokenCache
from dealbroker.conversations import api as conversations_api
from dealbroker.core import buffered, i18n, ping, ratelimit, startup, tracing
from dealbroker.core.api_docs import install_docs
from dealbroker.core.background import Supervisor
from dealbroker.core.body_limit import BodyLimitMiddleware
from dealbroker.core.concurrency import ConcurrencyLimitMiddleware
from dealbroker.core.db import (
    DatabaseFault,
    create_engine,
    create_probe_engine,
    create_read_engine,
    create_sessionmaker,
    describe_error,
    is_outage,
)
from dealbroker.core.deprecation import DeprecationMiddleware
from dealbroker.core.errors import (
    Unavailable,
    http_problem,
    install_error_handlers,
    problem_body,
    problem_response,
    server_error_problem,
)
from dealbroker.core.fastpath import routes
from dealbroker.core.fastpath.statements import DriverStatements
from dealbroker.core.links import Links
from dealbroker.core.logs import Failures
from dealbroker.core.metrics import instrument_pool, watch_process
from dealbroker.core.metrics_directory import mark_dead
from dealbroker.core.openapi import install_openapi
from dealbroker.core.ratelimit import RateLimiter
from dealbroker.core.request_log import RequestLogMiddleware, loggable_path
from dealbroker.core.request_metrics import RequestMetricsMiddleware
from dealbroker.core.settings import Settings, get_settings
from dealbroker.deals import api as deals_api
from dealbroker.events import api as events_api
from dealbroker.events import endpoints_api, webhook_docs
from dealbroker.evidence import intake
from dealbroker.integrations import api as integrations_api
from dealbroker.integrations import refusals, request_log
from dealbroker.integrations.service import deployment_links
from dealbroker.notifications import service as notifications
from dealbroker.offers import api as offers_api
from dealbroker.parcels import api as parcels_api
from dealbroker.payments import methods
from dealbroker.sandbox import api as sandbox_api
from dealbroker.web import (
    buyer,
    checkout,
    home,
    mailbox,
    sandbox_parcels,
    seller,
    stripe_checkout,
    swish_checkout,
    vipps_checkout,
)
from dealbroker.web import eid as eid_pages
from dealbroker.web.backoffice import pages as back_office
from dealbroker.web.backoffice.money import UPLOAD_PATHS as MONEY_UPLOADS
from dealbroker.web.evidence import UPLOAD_PATHS
from dealbroker.web.portal import pages as portal
from dealbroker.web.render import (
    PageLocaleMiddleware,
    is_page_request,
    not_found,
    server_error,
)
from dealbroker.worker import Runner

MAX_BODY_BYTES = 256 * 1024
DATABASE_DOWN = "The database does not answer; try again shortly."
RETRY_AFTER = "5"
LINKS_RETRY_SECONDS = 1.0  # how often a server started without its database tries again
STATIC = Path(__file__).parent / "web" / "static"
log = logging.getLogger("dealbroker.http")

DESCRIPTION = """\
Brokers second-hand deals between a seller and a buyer for online marketplaces.

Get a token with `POST /oauth2/token` (OAuth 2.0 client credentials), then call the deal
endpoints with `Authorization: Bearer <token>`; the sandbox triggers take the `webhook-secret`
header instead. Errors are RFC 9457 `application/problem+json` (one `Problem` schema). Every POST
but the token's accepts an `Idempotency-Key` header: the same key and body within 24 hours
replays the first answer (marked `Idempotent-Replayed: true`); the same key with another body is
422. No string may hold the NUL character (U+0000). The events the service sends to your
webhook endpoints are described under `webhooks`.
"""


class _App(FastAPI):
    """FastAPI with the request log (the request id, the access line and the security
    headers) wrapped around its whole middleware stack, outside Starlette's own error
    middleware: an unhandled error's 500 carries the headers and the request id, and its error
    line is written with the id."""

    def build_middleware_stack(self) -> ASGIApp:
        stack: ASGIApp = RequestLogMiddleware(super().build_middleware_stack())
        if tracing.enabled():  # around the request log: its lines carry the trace id
            stack = tracing.RequestSpanMiddleware(stack)
        return stack


async def _start(app: FastAPI, settings: Settings, engine: AsyncEngine | None) -> AsyncEngine:
    own_engine = engine or create_engine(
        settings.database_url,
        settings.db_pool_size,
        settings.db_pool_timeout_seconds,
        settings.db_statement_timeout_seconds,
    )
    tracing.instrument_engine(own_engine)
    if engine is None and settings.metrics_enabled:
        instrument_pool(own_engine, "serve")
        watch_process("serve")
    app.state.engine = own_engine
    app.state.sessionmaker = create_sessionmaker(own_engine)
    app.state.read_engine = create_read_engine(own_engine)
    app.state.probe_engine = create_probe_engine(settings.database_url, ping.PROBE_TIMEOUT)
    app.state.read_sessionmaker = (
        None if app.state.read_engine is None else create_sessionmaker(app.state.read_engine)
    )
    # The deal reads and the create's statement, on asyncpg directly (connections of their own
    # on PostgreSQL) with the fast paths on, on the engine otherwise.
    app.state.driver_statements = DriverStatements(
        own_engine,
        settings.db_pool_size,
        settings.db_pool_timeout_seconds,
        fast=settings.fast_paths,
    )
    app.state.driver_statements.answered = app.state.database_answered
    # On PostgreSQL the server processes share each rate limit's budget (core.ratelimit).
    app.state.rate_limiter = RateLimiter(app.state.read_engine)
    app.state.token_guard = TokenGuard(app.state.rate_limiter)
    # What the rate limits refused, per integration, for the back office (integrations.refusals).
    app.state.refusals = refusals.Tally()
    # No token cache on SQLite: the CLI revokes tokens there and cannot tell the server.
    app.state.token_cache = None if settings.is_sqlite else TokenCache()
    if not await _load_links(app, settings):
        # A process started while the database is down serves (503 where the database or the
        # links are needed) rather than failing to start: under ``--workers`` a replacement
        # that failed made uvicorn's supervisor stop every server process.
        log.warning("the database does not answer; serving 503 until it does")
        pending: Links = cast(Links, _LinksPending())
        app.state.links = pending
        notifications.start(
            pending,
            settings.time_zone,
            settings.default_locale,
            settings.support,
            settings.shipping_paid_by,
        )
    i18n.load()  # the catalogs compiled before the first page, not during it
    return own_engine


def _unavailable(request: Request, detail: str, retry_after: int) -> Response:
    body = problem_body(503, "Service Unavailable", "service-unavailable", detail, request.url.path)
    return problem_response(503, body, {"Retry-After": str(retry_after)})


class _LinksPending:
    """The deployment's links before the database has answered once (it holds the sandbox's
    generated link key): whatever needs a link answers 503 with Retry-After, never a 500."""

    def __getattr__(self, name: str) -> NoReturn:
        raise Unavailable(DATABASE_DOWN, headers={"Retry-After": RETRY_AFTER})


async def _load_links(app: FastAPI, settings: Settings) -> bool:
    """Load the deployment's links into ``app.state`` and the messages; False while the
    database does not answer."""
    try:
        async with app.state.sessionmaker() as session, session.begin():
            links = await deployment_links(session, settings)
    except DBAPIError as exc:
        if not is_outage(exc):
            raise
        return False
    except OSError:  # a connection refused before SQLAlchemy wraps anything
        return False
    app.state.links = links
    notifications.start(
        links,
        settings.time_zone,
        settings.default_locale,
        settings.support,
        settings.shipping_paid_by,
    )
    return True


async def _load_links_when_back(app: FastAPI, settings: Settings, stop: asyncio.Event) -> None:
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), LINKS_RETRY_SECONDS)
        if not stop.is_set() and await _load_links(app, settings):
            log.warning("the database answers again")
            return


def _database_down(request: Request) -> Response:
    """The answer while the database does not answer: try again shortly, never a 500."""
    return _unavailable(request, DATABASE_DOWN, int(RETRY_AFTER))


def create_app(settings: Settings | None = None, engine: AsyncEngine | None = None) -> FastAPI:
    """Build the app. With ``engine`` given (tests), the caller owns and disposes of it."""
    settings = settings or get_settings()
    tracing.start("serve")  # in each server process (uvicorn's --workers spawn them)
    settlement.install()  # the provider's answers reach the deals through it
    app = _App(
        title="dealbroker",
        version=__version__,
        telemetry=tracing.FASTAPI_TELEMETRY,
        description=DESCRIPTION,
        lifespan=_lifespan(settings, engine),
        # /docs is served from the package's own copy of Swagger UI (core.api_docs); ReDoc
        # would load from a CDN, so it is off.
        docs_url=None,
        redoc_url=None,
        openapi_tags=OPENAPI_TAGS,
    )
    _add_state(app, settings)
    install_openapi(app)
    app.webhooks.include_router(webhook_docs.router)  # the events we send, in the OpenAPI
    _add_error_handlers(app)
    _add_database_error_handlers(app)
    _add_middleware(app, settings)
    _add_routes(app, settings)
    return app


OPENAPI_TAGS = [
    {"name": "Authentication", "description": "OAuth 2.0 client credentials."},
    {"name": "Deals", "description": "Create, read, list and change deals."},
    {"name": "Offers", "description": "Offer links for buyers."},
    {
        "name": "Conversations",
        "description": "What the seller and each buyer wrote to each other on a deal.",
    },
    {
        "name": "Webhook endpoints",
        "description": "Where events are delivered, and how that went.",
    },
    {
        "name": "Webhook secret",
        "description": "Rotate the secret that signs your webhooks and authenticates "
        "the sandbox triggers.",
    },
    {"name": "Events", "description": "Every event, to catch up after downtime."},
    {
        "name": "Request log",
        "description": "Your API requests of the last days, to see what reached us.",
    },
    {"name": "Sandbox", "description": "Simulate events (sandbox environment only)."},
    {"name": "Health", "description": "Liveness."},
]


def _lifespan(
    settings: Settings, engine: AsyncEngine | None
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """What the process starts before the first request and stops after the last."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own = await _start(app, settings, engine)
        worker = _start_background(app, settings, own)
        startup.freeze()
        try:
            yield
        finally:
            await app.state.background.stop()
            if worker is not None:
                await worker.aclose()
            await app.state.driver_statements.close()
            if engine is None:
                await own.dispose()
            await app.state.probe_engine.dispose()
            if settings.metrics_enabled:
                mark_dead()  # uvicorn's server processes do not run the command's exit hooks

    return lifespan


def _start_background(app: FastAPI, settings: Settings, engine: AsyncEngine) -> Runner | None:
    """Every long-lived task of the process, failures logged, counted and restarted; the
    embedded worker, if this process runs one."""
    background = app.state.background = Supervisor()
    if isinstance(app.state.links, _LinksPending):
        background.start(
            "deployment-links", lambda stop: _load_links_when_back(app, settings, stop)
        )
    # The rate limits' unused claims go back to the budget the processes share.
    if app.state.rate_limiter.engine is not None:
        background.start(
            "rate-limit-sync", lambda stop: ratelimit.keep_in_sync(app.state.rate_limiter, stop)
        )
    sessions = app.state.sessionmaker
    background.start(
        "rate-limit-refusals",
        lambda stop: buffered.keep_flushing(
            app.state.refusals, sessions, stop, refusals.FLUSH_SECONDS
        ),
    )
    background.start(
        "api-request-log",
        lambda stop: buffered.keep_flushing(
            app.state.api_requests, sessions, stop, settings.api_request_log_flush_seconds
        ),
    )
    if app.state.token_cache is not None:
        listener = Listener(app.state.token_cache, app.state.engine)
        background.start("token-cache-listener", listener.run, Listener.STOP_WITHIN)
    if not settings.runs_embedded_worker:
        return None
    # Last: it is stopped last, once the batch in flight is finished.
    worker = Runner(app.state.sessionmaker, settings, engine)
    background.start("worker", worker.run)
    return worker


def _add_state(app: FastAPI, settings: Settings) -> None:
    """What the requests share, made before the first (the database's part is made by the
    lifespan, in ``_start``)."""
    app.state.settings = settings
    app.state.fast_paths = settings.fast_paths  # read by ``core.fastpath.routes``
    # Each integration's requests, written in batches (integrations.request_log).
    app.state.api_requests = request_log.RequestLog()
    # The parties' evidence photos, decoded a bounded number at a time (evidence.intake).
    app.state.photo_decoder = intake.Decoder(
        settings.evidence_concurrent_decodes, settings.evidence_photo_max_pixels
    )


def _add_error_handlers(app: FastAPI) -> None:
    """Errors as problem+json for programs, as pages for people."""
    install_error_handlers(app)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        # A person following a broken or old link gets a page, a program problem+json.
        if exc.status_code in (404, 405) and is_page_request(request):
            return not_found(request)
        return await http_problem(request, exc)

    @app.exception_handler(Exception)
    async def _server_error(request: Request, exc: Exception) -> Response:
        request_id = request.scope.get("state", {}).get("request_id", "")
        log.error("unhandled %s on %s rid=%s", type(exc).__name__, request.method, request_id)
        return server_error(request) if is_page_request(request) else server_error_problem(request)


def _add_database_error_handlers(app: FastAPI) -> None:
    """A database out of reach, too slow or out of free connections: 503, never a 500."""
    # The requests refused while the database is out of reach or too slow, logged as a run
    # (``logs.Failures``): the first, a count a minute, and its end, which the first request (or
    # health probe) that the database answers again reports (``core.db.get_session``,
    # ``DriverStatements``, ``ping``). Not a line per refused request: a server process refuses
    # hundreds a minute.
    outage = app.state.database_failures = Failures(
        log, "requests on the database", "answering 503"
    )

    # Likewise the requests shed because no pooled connection came free in time: under load,
    # or while the database hangs with every connection waiting on it.
    busy = Failures(
        log, "requests waiting for a database connection", "answering 503", logging.WARNING
    )

    def _answered() -> None:
        outage.succeeded()
        busy.succeeded()

    app.state.database_answered = _answered

    def _where(request: Request) -> str:
        return f"{loggable_path(request.url.path)} rid={request.state.request_id}"

    def _refused(request: Request, described: str) -> Response:
        outage.failed(f"{described} on {_where(request)}")
        return _database_down(request)

    @app.exception_handler(DBAPIError)
    async def _database_error(request: Request, exc: DBAPIError) -> Response:
        # Described, never printed: the error's text may hold the request's personal data.
        described = describe_error(exc)
        if is_outage(exc):  # out of reach, or a statement past its timeout: try again shortly
            return _refused(request, described)
        log.error(
            "database error on %s rid=%s: %s",
            loggable_path(request.url.path),
            request.state.request_id,
            described,
        )
        raise DatabaseFault(described) from None  # a bug: the server's 500, without the text

    @app.exception_handler(PoolTimeout)
    async def _pool_full(request: Request, exc: PoolTimeout) -> Response:
        # Every pooled connection stayed busy for DEALBROKER_DB_POOL_TIMEOUT_SECONDS: the
        # process is overloaded, not broken. Shed the request fast; never a 500.
        busy.failed(f"no connection free on {_where(request)}")
        return _unavailable(request, "The service is busy; try again shortly.", 1)

    @app.exception_handler(ConnectionError)
    @app.exception_handler(TimeoutError)
    async def _database_unreachable(request: Request, exc: OSError) -> Response:
        # Opening a new database connection while PostgreSQL is down or restarting fails here
        # (the driver's ConnectionRefusedError), or while it does not answer (its TimeoutError,
        # after ``core.db.CONNECT_TIMEOUT``), before SQLAlchemy wraps anything; so does a
        # statement the server did not answer within its timeout (``core.db.connect_args``):
        # a 503 too.
        return _refused(request, describe_error(exc))


def _add_middleware(app: FastAPI, settings: Settings) -> None:
    """The middleware, innermost first (each added wraps those before it)."""
    app.add_middleware(PageLocaleMiddleware)
    app.add_middleware(DeprecationMiddleware)
    app.add_middleware(
        BodyLimitMiddleware, max_bytes=MAX_BODY_BYTES, larger=UPLOAD_PATHS + MONEY_UPLOADS
    )
    if settings.requests_in_flight_cap:
        # Outside the routes and the body's reading, inside the request log and metrics: a
        # refused request costs next to nothing and is still logged and counted.
        app.add_middleware(
            ConcurrencyLimitMiddleware, max_in_flight=settings.requests_in_flight_cap
        )
    if settings.metrics_enabled:
        app.add_middleware(RequestMetricsMiddleware)
    if settings.api_request_log:
        # Outermost of these, so the duration it records is the one the metrics observe.
        app.add_middleware(request_log.RecordRequests, requests=app.state.api_requests)


def _routers(settings: Settings) -> list[APIRouter]:
    """The routers of the API and of the pages, in the order their routes are matched."""
    # Routes are matched in this order, one after the other. The health checks come first:
    # a load balancer or supervisor calls them most often, and no other route takes their
    # paths; then the deal API.
    routers = [
        ping.router,
        auth_api.router,
        deals_api.router,
        offers_api.router,
        conversations_api.router,
        endpoints_api.router,
        integrations_api.router,
        events_api.router,
    ]
    if settings.is_sandbox:
        # The triggers and the simulated checkout, carrier and mailbox pages exist only in the
        # sandbox: elsewhere their paths are plain 404s. The sandbox pages come before the other
        # pages, whose generic seller action path would otherwise take the carrier's.
        routers += [sandbox_api.router, seller.sandbox_router, mailbox.router]
        if "simulated" in methods.provider_names(settings):
            routers.append(checkout.router)
        if settings.carrier == "simulated":
            routers.append(sandbox_parcels.router)  # where its tracking links lead
    if settings.payment_provider == "stripe":
        # The buyer's checkout with Stripe.js, and Stripe's webhook (neither in the OpenAPI).
        routers.append(stripe_checkout.router)
    if "vipps" in methods.provider_names(settings):
        # The buyer's way to Vipps MobilePay and back, and Vipps's webhook (not in the OpenAPI).
        routers.append(vipps_checkout.router)
    if "swish" in methods.provider_names(settings):
        # The buyer's Swish checkout and Swish's callbacks (neither in the OpenAPI).
        routers.append(swish_checkout.router)
    if settings.swish_payouts:
        # Swish's payout callback (not in the OpenAPI either).
        from dealbroker.web import swish_payout_callback

        routers.append(swish_payout_callback.router)
    if settings.carrier != "none":
        # The carrier's pushed tracking events (not in the OpenAPI either).
        routers.append(parcels_api.router)
    if settings.eid_enabled:
        # The simulated eID's page only in the sandbox (settings refuse it elsewhere).
        if settings.eid_simulated and settings.is_sandbox:
            routers.append(eid_pages.simulated_router)
        routers.append(eid_pages.router)
    return [*routers, home.router, seller.router, buyer.router]


def _add_routes(app: FastAPI, settings: Settings) -> None:
    """The API, the pages, the back office and portal, the API's docs and the static files."""
    for router in _routers(settings):
        routes.include(app, router)
    back_office.install(app)
    portal.install(app)
    install_docs(app)  # after the API: its routes are read rarely, and each is tried in turn
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
