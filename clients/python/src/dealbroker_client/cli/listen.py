"""``dealbroker-client listen``: follow the events API and print each new event (one JSON line
each), forwarding it to a local URL signed exactly as a webhook delivery is, like
``stripe listen``.

Events come from ``GET /events/v1/events`` walking forward with its ``after`` cursor. The
cursor is saved in a state file after each event, so a restart resumes where the last run
stopped: nothing is lost, and after Ctrl-C or SIGTERM (which let the event at hand finish)
nothing is printed or forwarded twice. A run killed outright may forward its last event again
on restart, with the same ``webhook-id``: deliveries are at least once.

On PostgreSQL an event's place in the list is fixed when it is written but it becomes visible
when its transaction commits, which may be after a later event's. So the cursor trails the
newest event by a few seconds (``SETTLE_SECONDS``) and the events handled since the cursor are
remembered by id (in the state file too): one that commits late is still handled, once.
"""

import argparse
import hashlib
import json
import os
import signal
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from dealbroker_client import _core as core
from dealbroker_client.cli import Credentials, UsageError, _uuid, fetch, note, out
from dealbroker_client.client import DealbrokerClient
from dealbroker_client.errors import APIConnectionError, NotFoundError, RateLimitError, ServerError
from dealbroker_client.models import EventKind
from dealbroker_client.webhooks import signed_headers

# Kinds the events API lists only when asked for by name (not on the cursor's walk).
OPT_IN = frozenset({EventKind.DEAL_MESSAGE.value})
SETTLE_SECONDS = 5.0
PAGE_SIZE = 100
USER_AGENT = "dealbroker-client-listen/1"


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "listen",
        parents=[common],
        help="print new events and forward them to a local URL, signed as webhooks",
        description="Follow the events API: print each new event as a JSON line and, with "
        "--forward-to, POST it there signed as a webhook delivery (Standard Webhooks headers "
        "with the webhook secret). Resumes after the last event handled (the state file); the "
        "first run starts from now. Ctrl-C or SIGTERM stops it after the event at hand.",
    )
    parser.add_argument("--forward-to", metavar="URL", help="the local URL each event is POSTed to")
    parser.add_argument(
        "--events",
        type=_kinds,
        metavar="KIND,...",
        help="only these kinds (comma-separated), e.g. deal.status,payment.status",
    )
    parser.add_argument(
        "--state",
        type=Path,
        metavar="FILE",
        help="where the cursor is kept (default: one file per service and client id under "
        "$XDG_STATE_HOME/dealbroker-client)",
    )
    parser.add_argument(
        "--after", type=_uuid, metavar="EVENT_ID", help="start after this event, not the state"
    )
    parser.add_argument(
        "--interval", type=float, default=1.0, help="seconds between looks for new events (1)"
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=3,
        help="tries more for a forward that failed (no answer, 429 or 5xx), with backoff (3)",
    )
    parser.set_defaults(run=listen)


def _kinds(value: str) -> frozenset[str]:
    kinds = frozenset(k.strip() for k in value.split(",") if k.strip())
    # The events API lists an opt-in kind only when asked for it by name: the cursor walk
    # never meets it, so asking for it here would wait for nothing.
    known = {k.value for k in EventKind if k not in OPT_IN} | {"webhook.test"}
    if kinds & OPT_IN:
        raise argparse.ArgumentTypeError(
            "deal.message is opt-in: the events API lists it only with event=deal.message "
            "(list_events), and listen follows every other kind"
        )
    unknown = kinds - known
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(
            f"unknown kind {', '.join(sorted(unknown)) or value!r}; kinds: {', '.join(sorted(known))}"
        )
    return kinds


# --- the state file ----------------------------------------------------------------------------


def default_state_path(api_url: str, client_id: str) -> Path:
    home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    service = hashlib.sha256(api_url.encode()).hexdigest()[:12]
    return Path(home) / "dealbroker-client" / f"listen-{client_id}-{service}.json"


@dataclass
class State:
    """Where listening stands: the cursor (the last settled event) and the events handled after
    it, by id. Saved after every change (written whole, then renamed into place)."""

    path: Path
    api_url: str
    client_id: str
    cursor: str | None = None
    handled: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path, api_url: str, client_id: str) -> "State | None":
        try:
            saved = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read the state file {path}: {exc}") from exc
        if saved.get("apiUrl") != api_url or saved.get("clientId") != client_id:
            raise UsageError(
                f"the state file {path} is for {saved.get('clientId')} at {saved.get('apiUrl')}"
            )
        return cls(path, api_url, client_id, saved.get("cursor"), list(saved.get("handled", [])))

    def save(self) -> None:
        document = {
            "apiUrl": self.api_url,
            "clientId": self.client_id,
            "cursor": self.cursor,
            "handled": self.handled,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text(json.dumps(document) + "\n")
        os.replace(partial, self.path)


# --- following the events API ------------------------------------------------------------------


@dataclass
class Follower:
    """Reads the events not handled yet, oldest first, each once."""

    client: DealbrokerClient
    state: State
    # The events handled since the cursor, by id: when each was first seen (time.monotonic()).
    seen: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        now = time.monotonic()
        self.seen = {event_id: now for event_id in self.state.handled}

    def _page(self, page: int, after: str | None) -> dict[str, Any]:
        page_body: dict[str, Any] = fetch(
            self.client, core.list_events(page, PAGE_SIZE, None, None, after)
        )
        return page_body

    def start_from_now(self) -> None:
        """The cursor after the newest event (none yet: every event will be new)."""
        newest = fetch(self.client, core.list_events(1, 1, None, None, None))["items"]
        self.state.cursor = newest[0]["id"] if newest else None
        self.state.handled = []
        self.seen = {}
        self.state.save()

    def check_cursor(self, saved: bool) -> None:
        """Fails when the service does not know the cursor: a saved one with a usage error that
        says what to do, a given one (``--after``) with the service's 404."""
        if self.state.cursor is None:
            return
        try:
            fetch(self.client, core.list_events(1, 1, None, None, self.state.cursor))
        except NotFoundError as exc:
            if not saved:
                raise
            raise UsageError(
                f"the service has no event {self.state.cursor}, where {self.state.path} stopped "
                "(events are kept for a limited time): give --after EVENT_ID, or remove the "
                "state file to start from now"
            ) from exc

    def _read(self) -> list[dict[str, Any]]:
        """Every event after the cursor (without one, every event), oldest first."""
        events: list[dict[str, Any]] = []
        page = 1
        while True:
            body = self._page(page, self.state.cursor)
            events.extend(body["items"])
            if page >= body["page"]["totalPages"]:
                break
            page += 1
        if self.state.cursor is None:
            events.reverse()  # newest first without a cursor
        # Pages shift while events arrive: one read may meet an event twice.
        return list({e["id"]: e for e in events}.values())

    def poll(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The events read (oldest first) and, among them, those not handled yet."""
        events = self._read()
        return events, [e for e in events if e["id"] not in self.seen]

    def handled(self, event_id: str) -> None:
        self.seen[event_id] = time.monotonic()
        self.state.handled = list(self.seen)
        self.state.save()

    def settle(self, events: list[dict[str, Any]]) -> None:
        """Move the cursor past the leading events handled long enough ago."""
        limit = time.monotonic() - SETTLE_SECONDS
        settled = 0
        for event in events:
            first_seen = self.seen.get(event["id"])
            if first_seen is None or first_seen > limit:
                break
            settled += 1
        if not settled:
            return
        self.state.cursor = events[settled - 1]["id"]
        self.seen = {e["id"]: self.seen[e["id"]] for e in events[settled:] if e["id"] in self.seen}
        self.state.handled = list(self.seen)
        self.state.save()


# --- forwarding --------------------------------------------------------------------------------


class Stop:
    """Set by Ctrl-C or SIGTERM; the loop finishes the event at hand and returns."""

    def __init__(self) -> None:
        self.requested = False
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._request)

    def _request(self, signum: int, frame: object) -> None:
        self.requested = True

    def sleep(self, seconds: float) -> bool:
        """Wait ``seconds`` or until a stop is requested; whether it was."""
        deadline = time.monotonic() + seconds
        while not self.requested and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(0.1, left))
        return self.requested


def forward(
    local: httpx.Client,
    url: str,
    secrets: list[str],
    event_id: str,
    payload: str,
    retries: int,
    stop: Stop,
) -> str:
    """POST one event to ``url``, signed afresh on each try; the receiver's status code (or the
    error), after at most ``retries`` more tries on no answer, a 429 or a 5xx."""
    outcome = ""
    for attempt in range(retries + 1):
        if attempt and stop.sleep(min(8.0, 0.5 * 2 ** (attempt - 1))):
            return outcome + " (stopping: no more tries)"
        headers = signed_headers(secrets, event_id, payload)
        headers["user-agent"] = USER_AGENT
        try:
            response = local.post(url, content=payload.encode(), headers=headers)
        except httpx.HTTPError as exc:
            outcome = f"error: {type(exc).__name__}"
            continue
        outcome = str(response.status_code)
        if response.status_code < 500 and response.status_code != 429:
            break
    return outcome


def listen(args: argparse.Namespace, creds: Credentials) -> int:
    creds.require_client()
    if args.forward_to:
        creds.require_webhook_secret("listen --forward-to")
        try:
            signed_headers(creds.webhook_secrets, "check", "{}")
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
    if args.interval <= 0 or args.retries < 0:
        raise UsageError("--interval must be above 0 and --retries at least 0")
    assert creds.client_id is not None
    path = args.state or default_state_path(creds.api_url, creds.client_id)
    stop = Stop()
    with creds.client() as client, httpx.Client(timeout=httpx.Timeout(15, connect=5)) as local:
        state = State.load(path, creds.api_url, creds.client_id)
        follower = Follower(client, state or State(path, creds.api_url, creds.client_id))
        if args.after is not None:
            follower.state.cursor, follower.state.handled, follower.seen = args.after, [], {}
            follower.check_cursor(saved=False)
            follower.state.save()
            where = f"after event {args.after}"
        elif state is not None:
            follower.check_cursor(saved=True)
            where = f"after event {state.cursor}" if state.cursor else "from the first event"
        else:
            follower.start_from_now()
            where = "from now"
        target = f"forwarding to {args.forward_to}" if args.forward_to else "printing"
        note(
            f"Ready: {target} the events of {creds.client_id}, {where} (state: {path}; "
            "Ctrl-C to stop)"
        )
        count = _follow(follower, local, args, creds, stop)
    note(f"Stopped ({count} events printed)")
    return 0


def _follow(
    follower: Follower,
    local: httpx.Client,
    args: argparse.Namespace,
    creds: Credentials,
    stop: Stop,
) -> int:
    count = 0
    failing = False  # said once while the events API fails, and once when it answers again
    while not stop.requested:
        try:
            events, fresh = follower.poll()
        except (APIConnectionError, ServerError, RateLimitError) as exc:
            if not failing:
                note(f"warning: the events API failed, trying again: {' '.join(str(exc).split())}")
            failing, events, fresh = True, [], []
        else:
            if failing:
                note("the events API answers again")
            failing = False
        for event in fresh:
            if stop.requested:
                break
            if args.events is None or event["event"] in args.events:
                _handle(event, local, args, creds, stop)
                count += 1
            follower.handled(event["id"])
        follower.settle(events)
        stop.sleep(args.interval)
    return count


def _handle(
    event: dict[str, Any],
    local: httpx.Client,
    args: argparse.Namespace,
    creds: Credentials,
    stop: Stop,
) -> None:
    payload = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    outcome = None
    if args.forward_to:
        outcome = forward(
            local, args.forward_to, creds.webhook_secrets, event["id"], payload, args.retries, stop
        )
    out(payload)
    if outcome is not None:
        at = datetime.now(UTC).strftime("%H:%M:%S")
        note(f"{at}  {event['event']:<20} {event['id']}  [{outcome}]")
