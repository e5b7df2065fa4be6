"""``dealbroker listen --forward-to URL``: follow an integration's events API and forward each
new event to a local URL, signed exactly as a webhook delivery is, like ``stripe listen``.

It speaks to a running server over HTTP with the integration's client credentials, so it works
against any deployment. Events come from ``GET /events/v1/events`` (walking forward with the
``after`` cursor); each is POSTed with the same body and the same Standard Webhooks headers the
delivery worker sends (``events.signing``), so the local receiver verifies it with its usual
code. While a webhook secret rotation's overlap lasts, each event is signed with the old and the
new secret, as deliveries are: secrets read from the database are read again before each batch of
events, so a rotation made while ``listen`` runs takes effect at once.

A look that finds no new event is not listed in the integration's request log (``GET
/events/v1/events`` answered with no event), so an idle ``listen`` leaves no trace there.

On PostgreSQL an event's place in the list is fixed when it is written, but it becomes visible
when its transaction commits, which may be after a later event's. So the cursor trails the
newest event by a few seconds (``SETTLE_SECONDS``) and events are forwarded once by id: one that
commits late is still forwarded, once.
"""

import asyncio
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

import httpx
import orjson
import typer
from sqlalchemy.exc import SQLAlchemyError

from dealbroker.core.errors import DomainError
from dealbroker.events.signing import signed_headers

SETTLE_SECONDS = 5.0
PAGE_SIZE = 100
USER_AGENT = "dealbroker-listen/1"


class ListenError(Exception):
    """The events API cannot be followed (refused credentials, an unknown cursor)."""


@dataclass
class Config:
    forward_to: str
    api_url: str
    client_id: str
    client_secret: str
    # The secrets each event is signed with now (the current one first).
    signing_secrets: Callable[[], Awaitable[list[str]]]
    after: str | None
    since_ms: int | None
    interval: float
    retries: int


@dataclass
class _Token:
    value: str | None = None
    expires_at: float = 0.0


@dataclass
class Follower:
    """Reads the events not forwarded yet, oldest first, each once."""

    api: httpx.AsyncClient
    config: Config
    cursor: str | None = None
    # Without a cursor: forward the events created from this time (ms) on.
    floor_ms: int = 0
    # Events read since the cursor, by id: when each was first seen (time.monotonic()).
    seen: dict[str, float] = field(default_factory=dict)
    token: _Token = field(default_factory=_Token)

    async def _token(self, renew: bool = False) -> str:
        if not renew and self.token.value and time.monotonic() < self.token.expires_at:
            return self.token.value
        response = await self.api.post(
            "/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(self.config.client_id, self.config.client_secret),
        )
        if response.status_code != 200:
            raise ListenError(f"the token request was refused: {response.text}")
        body = response.json()
        lifetime = float(body["expires_in"])
        token: str = body["access_token"]
        self.token = _Token(token, time.monotonic() + lifetime - min(60.0, lifetime / 10))
        return token

    async def _page(self, **params: Any) -> tuple[list[dict[str, Any]], int]:
        params = {k: v for k, v in params.items() if v is not None}
        for renew in (False, True):
            headers = {"Authorization": f"Bearer {await self._token(renew)}"}
            response = await self.api.get("/events/v1/events", params=params, headers=headers)
            if response.status_code != 401:
                break
        if response.status_code == 404 and "after" in params:
            raise ListenError(f"no event {params['after']} (the --after cursor)")
        if response.status_code != 200:
            raise ListenError(f"the events API answered {response.status_code}: {response.text}")
        body = orjson.loads(response.content)
        return body["items"], body["page"]["totalPages"]

    async def start(self) -> None:
        """Place the cursor: after ``--after``, from ``--since``, or after the newest event."""
        if self.config.after is not None:
            await self._page(after=self.config.after, pageSize=1)  # an unknown id fails here
            self.cursor = self.config.after
        elif self.config.since_ms is not None:
            self.floor_ms = self.config.since_ms
        else:
            newest, _ = await self._page(pageSize=1)
            if newest:
                self.cursor = newest[0]["id"]
            else:
                self.floor_ms = 0

    async def _read(self) -> list[dict[str, Any]]:
        """Every event after the cursor (or from the floor), oldest first."""
        events: list[dict[str, Any]] = []
        below: str | None = None  # the newest event from before the floor
        page, pages = 1, 1
        while page <= pages:
            if self.cursor is not None:
                items, pages = await self._page(after=self.cursor, page=page, pageSize=PAGE_SIZE)
                events.extend(items)
            else:
                # Newest first, down to the floor.
                items, pages = await self._page(page=page, pageSize=PAGE_SIZE)
                recent = [e for e in items if e["created"] >= self.floor_ms]
                events.extend(recent)
                if len(recent) < len(items):
                    below = items[len(recent)]["id"]
                    break
            page += 1
        if self.cursor is None:
            events.reverse()
            # Walk forward from there: each later look asks only for what is new, and finds
            # nothing while nothing happens (such a look is not in the request log), rather
            # than reading the events from before --since again every time.
            self.cursor = below
        # Pages shift while new events arrive: one read may meet an event twice.
        unique = {e["id"]: e for e in events}
        return list(unique.values())

    async def poll(self) -> list[dict[str, Any]]:
        """The events not handed out before, oldest first; moves the cursor past those that
        have settled."""
        events = await self._read()
        now = time.monotonic()
        fresh = [e for e in events if e["id"] not in self.seen]
        for event in fresh:
            self.seen[event["id"]] = now
        settled = 0
        for event in events:
            if self.seen[event["id"]] > now - SETTLE_SECONDS:
                break
            settled += 1
        if settled:
            self.cursor = events[settled - 1]["id"]
            self.seen = {e["id"]: self.seen[e["id"]] for e in events[settled:]}
        return fresh


async def forward(
    local: httpx.AsyncClient,
    config: Config,
    secrets: list[str],
    event: dict[str, Any],
    stop: asyncio.Event,
) -> str:
    """POST one event to the local URL, signed as a delivery; its status code (or the error),
    after at most ``retries`` more tries on a connection error, a 429 or a 5xx."""
    payload = orjson.dumps(event).decode()  # byte for byte the stored envelope
    outcome = ""
    for attempt in range(config.retries + 1):
        if attempt:
            try:
                await asyncio.wait_for(stop.wait(), min(8.0, 0.5 * 2 ** (attempt - 1)))
                return outcome  # stopping: no more tries
            except TimeoutError:
                pass
        headers = signed_headers(secrets, event["id"], datetime.now(UTC), payload)
        try:
            response = await local.post(config.forward_to, content=payload, headers=headers)
        except httpx.HTTPError as exc:
            outcome = f"error: {type(exc).__name__}"
            continue
        outcome = str(response.status_code)
        if response.status_code < 500 and response.status_code != 429:
            break
    return outcome


def _line(event: dict[str, Any], outcome: str) -> str:
    at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{at}  {event['event']:<20} {event['id']}  [{outcome}]"


async def run(config: Config, stop: asyncio.Event) -> int:
    """Follow and forward until ``stop`` is set; the number of events forwarded."""
    count = 0
    async with (
        httpx.AsyncClient(
            base_url=config.api_url, timeout=15, headers={"User-Agent": USER_AGENT}
        ) as api,
        httpx.AsyncClient(timeout=httpx.Timeout(15, connect=5), follow_redirects=False) as local,
    ):
        follower = Follower(api, config)
        await follower.start()
        typer.echo(
            f"Ready: forwarding events of {config.client_id} to {config.forward_to} "
            "(Ctrl-C to stop)",
            err=True,
        )
        while not stop.is_set():
            try:
                events = await follower.poll()
            except httpx.HTTPError as exc:
                typer.echo(f"warning: the events API is unreachable: {exc!r}", err=True)
                events = []
            secrets = await config.signing_secrets() if events else []
            for event in events:
                if stop.is_set():
                    break
                typer.echo(_line(event, await forward(local, config, secrets, event, stop)))
                count += 1
            try:
                await asyncio.wait_for(stop.wait(), config.interval)
            except TimeoutError:
                pass
    return count


class _DatabaseSecrets:
    """The integration's signing secrets read from the configured database, as the other
    commands read integrations (for an operator on the server's machine): read again at each
    call, so that a rotation made while ``listen`` runs is followed."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.engine: Any = None

    async def __call__(self) -> list[str]:
        from dealbroker.core import clock
        from dealbroker.core.db import create_engine, create_sessionmaker
        from dealbroker.core.settings import get_settings
        from dealbroker.integrations import service as integrations

        if self.engine is None:
            self.engine = create_engine(get_settings().database_url, pool_size=1)
        async with create_sessionmaker(self.engine)() as session, session.begin():
            found = await integrations.get_by_client_id(session, self.client_id)
            return integrations.webhook_signing_secrets(
                found.webhook_secret,
                found.previous_webhook_secret,
                found.previous_webhook_secret_expires_at,
                clock.now(),
            )

    async def aclose(self) -> None:
        if self.engine is not None:
            await self.engine.dispose()


def _refuse_missing_database() -> None:
    """The secrets are to be read from the database: where there is none (a SQLite file that
    does not exist, say outside the server's directory), say so instead of creating it."""
    from dealbroker.core.migrate import missing_file
    from dealbroker.core.settings import get_settings

    missing = missing_file(get_settings().database_url)
    if missing is not None:
        typer.echo(
            "error: give --webhook-secret (or DEALBROKER_WEBHOOK_SECRET); it could not be read "
            f"from the database: no database at {missing}",
            err=True,
        )
        raise typer.Exit(2)


def _given(secrets: list[str]) -> Callable[[], Awaitable[list[str]]]:
    flat = [part for secret in secrets for part in secret.split()]

    async def read() -> list[str]:
        return flat

    return read


def listen(
    forward_to: Annotated[
        str, typer.Option("--forward-to", help="The local URL each event is POSTed to.")
    ],
    client_id: Annotated[
        str, typer.Option("--client-id", envvar="DEALBROKER_CLIENT_ID", help="Client id.")
    ],
    client_secret: Annotated[
        str,
        typer.Option("--client-secret", envvar="DEALBROKER_CLIENT_SECRET", help="Client secret."),
    ],
    api_url: Annotated[
        str,
        typer.Option(envvar="DEALBROKER_API_URL", help="The dealbroker server to follow."),
    ] = "http://127.0.0.1:8000",
    webhook_secret: Annotated[
        list[str] | None,
        typer.Option(
            envvar="DEALBROKER_WEBHOOK_SECRET",
            help="Signs the forwarded events (repeat it, or separate by spaces, to sign with "
            "both secrets of a rotation); default: read from the database by client id.",
        ),
    ] = None,
    after: Annotated[
        uuid.UUID | None, typer.Option(help="Replay the events after this event id first.")
    ] = None,
    since: Annotated[
        datetime | None, typer.Option(help="Replay the events created since this time (UTC).")
    ] = None,
    interval: Annotated[
        float, typer.Option(min=0.05, max=60, help="Seconds between looks for new events.")
    ] = 1.0,
    retries: Annotated[
        int, typer.Option(min=0, max=10, help="Tries more per event on 429, 5xx or no answer.")
    ] = 3,
) -> None:
    """Forward the integration's new events to a local URL, signed as webhooks, one line each
    (time, kind, id, the receiver's status). Starts from now unless --after or --since."""
    if after is not None and since is not None:
        typer.echo("error: give --after or --since, not both", err=True)
        raise typer.Exit(2)
    since_ms = None
    if since is not None:
        moment = since if since.tzinfo else since.replace(tzinfo=UTC)
        since_ms = int(moment.timestamp() * 1000)
    if not webhook_secret:
        _refuse_missing_database()
    database = _DatabaseSecrets(client_id)
    config = Config(
        forward_to=forward_to,
        api_url=api_url.rstrip("/"),
        client_id=client_id,
        client_secret=client_secret,
        signing_secrets=_given(webhook_secret) if webhook_secret else database,
        after=None if after is None else str(after),
        since_ms=since_ms,
        interval=interval,
        retries=retries,
    )

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await config.signing_secrets()  # unreadable secrets stop it before it starts
            return await run(config, stop)
        finally:
            await database.aclose()

    try:
        count = asyncio.run(main())
    except SQLAlchemyError as exc:
        typer.echo(
            "error: give --webhook-secret (or DEALBROKER_WEBHOOK_SECRET); it could not be read "
            f"from the database: {type(exc).__name__}",
            err=True,
        )
        raise typer.Exit(2) from exc
    except DomainError as exc:  # no integration with that client id in the database
        typer.echo(f"error: {exc.detail}", err=True)
        raise typer.Exit(1) from exc
    except ListenError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    except httpx.HTTPError as exc:
        typer.echo(f"error: {config.api_url} is unreachable: {exc!r}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"stopped after {count} events", err=True)
