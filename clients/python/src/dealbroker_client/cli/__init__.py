"""``dealbroker-client``: the integration API from a terminal, with only a base URL and the
integration's credentials (no database, no server package).

    dealbroker-client deals list [--page N]        dealbroker-client deals get ID
    dealbroker-client events [--after ID]          dealbroker-client clock advance SECONDS [--deal ID]
    dealbroker-client clock show --deal ID
    dealbroker-client trigger EVENT|SCENARIO       dealbroker-client listen --forward-to URL

Credentials come from options or from ``DEALBROKER_API_URL``, ``DEALBROKER_CLIENT_ID``,
``DEALBROKER_CLIENT_SECRET`` and ``DEALBROKER_WEBHOOK_SECRET`` (the sandbox's commands and the
signatures of forwarded events need it); a secret is never printed. Every request goes through
``DealbrokerClient`` (tokens, retries, typed errors); what the API answers is printed as the
JSON it sent. An error is one line on stderr (the problem's status, title, detail and request
id) and exit status 1; a wrong command line is exit status 2.
"""

import argparse
import json
import os
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from typing import Any, get_args

from pydantic import ValidationError

from dealbroker_client import _core as core
from dealbroker_client import models as m
from dealbroker_client.client import DealbrokerClient
from dealbroker_client.errors import APIConnectionError, APIError

DEFAULT_API_URL = "http://127.0.0.1:8000"
ENVIRONMENT = {
    "api_url": "DEALBROKER_API_URL",
    "client_id": "DEALBROKER_CLIENT_ID",
    "client_secret": "DEALBROKER_CLIENT_SECRET",
    "webhook_secret": "DEALBROKER_WEBHOOK_SECRET",
}
# The sandbox triggers by event kind, with the options each takes besides --deal.
TRIGGERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "signature.status": ("signatureStatus", ("status", "signature_type")),
    "deal.offer": ("dealOffer", ()),
    "deal.offerApproved": ("dealOfferApproved", ()),
    "deal.offerDenied": ("dealOfferDenied", ()),
    "payment.status": ("paymentStatus", ("status",)),
    "deal.status": ("dealStatus", ("status",)),
}
SCENARIOS: tuple[str, ...] = get_args(m.ScenarioName)
# CLI timeouts are shorter than a program's: a person is waiting.
RETRY = core.RetryPolicy(max_retries=2, backoff=0.5, max_backoff=2.0, max_retry_after=10.0)


class UsageError(Exception):
    """The command line cannot be acted on (a missing credential, an option that does not fit)."""


class Credentials:
    """The base URL and secrets of one run, from the options or the environment."""

    def __init__(self, args: argparse.Namespace) -> None:
        def given(name: str) -> str | None:
            value = getattr(args, name, None)
            return value if value else os.environ.get(ENVIRONMENT[name]) or None

        self.api_url = (given("api_url") or DEFAULT_API_URL).rstrip("/")
        self.client_id = given("client_id")
        self.client_secret = given("client_secret")
        # Space-separated (or the option repeated): both secrets of a rotation, current first.
        options = getattr(args, "webhook_secret", None) or []
        raw = " ".join(options) or os.environ.get(ENVIRONMENT["webhook_secret"], "")
        self.webhook_secrets = raw.split()

    def require_client(self) -> None:
        for name, value in (("client_id", self.client_id), ("client_secret", self.client_secret)):
            if not value:
                option = "--" + name.replace("_", "-")
                raise UsageError(f"no {option}: give it or set {ENVIRONMENT[name]}")

    def require_webhook_secret(self, why: str) -> None:
        if not self.webhook_secrets:
            raise UsageError(
                f"{why} needs the webhook secret: give --webhook-secret or set "
                f"{ENVIRONMENT['webhook_secret']}"
            )

    def client(self) -> DealbrokerClient:
        return DealbrokerClient(
            self.api_url,
            self.client_id,
            self.client_secret,
            webhook_secret=self.webhook_secrets[0] if self.webhook_secrets else None,
            timeout=15.0,
            retry=RETRY,
        )


def fetch(client: DealbrokerClient, call: core.Call[Any]) -> Any:
    """Send one of the client's calls and return the service's JSON as it came."""
    return client.send(replace(call, parse=core.raw_json))


def out(line: str) -> None:
    """A line of data on stdout, at once (a pipe reads it as it comes)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def emit(document: Any) -> None:
    """A document of the API on stdout, as JSON."""
    out(json.dumps(document, indent=2, ensure_ascii=False))


def note(line: str) -> None:
    """A line for the person at the terminal (stderr, so stdout stays data)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


# --- deals, events, clock --------------------------------------------------------------------


def deals_list(args: argparse.Namespace, creds: Credentials) -> int:
    creds.require_client()
    with creds.client() as client:
        emit(fetch(client, core.list_deals(args.page, args.page_size)))
    return 0


def deals_get(args: argparse.Namespace, creds: Credentials) -> int:
    creds.require_client()
    with creds.client() as client:
        emit(fetch(client, core.get_deal(args.deal_id)))
    return 0


def events(args: argparse.Namespace, creds: Credentials) -> int:
    creds.require_client()
    with creds.client() as client:
        page = fetch(
            client, core.list_events(args.page, args.limit, args.event, args.deal, args.after)
        )
    emit(page)
    if args.after is not None and page["items"]:
        note(f"next: --after {page['items'][-1]['id']}")
    return 0


def clock_advance(args: argparse.Namespace, creds: Credentials) -> int:
    """The integration's whole sandbox clock, or with ``--deal`` that deal's own clock only."""
    creds.require_webhook_secret("clock advance")
    with creds.client() as client:
        if args.deal is None:
            emit(fetch(client, core.advance_clock(args.seconds, None)))
        else:
            emit(fetch(client, core.advance_deal_clock(args.deal, args.seconds, None)))
    return 0


def clock_show(args: argparse.Namespace, creds: Credentials) -> int:
    """A deal's sandbox clock: its offsets, its time and its pending deadlines."""
    creds.require_webhook_secret("clock show")
    with creds.client() as client:
        emit(fetch(client, core.get_deal_clock(args.deal)))
    return 0


# --- trigger -----------------------------------------------------------------------------------


def trigger(args: argparse.Namespace, creds: Credentials) -> int:
    creds.require_webhook_secret("trigger")
    name: str = args.name
    paths = {path: kind for kind, (path, _) in TRIGGERS.items()}
    kind = paths.get(name, name)
    given = {"status": args.status, "signature_type": args.signature_type}
    if name in SCENARIOS:
        if any(given.values()):
            raise UsageError("a scenario takes no --status or --signature-type")
        call: core.Call[Any] = core.run_scenario(name, args.deal, None)  # type: ignore[arg-type]
    elif kind in TRIGGERS:
        path, takes = TRIGGERS[kind]
        for option, value in given.items():
            if value is not None and option not in takes:
                raise UsageError(f"{kind} takes no --{option.replace('_', '-')}")
        values = {"deal_id": args.deal, **{k: v for k, v in given.items() if k in takes}}
        try:
            if path == "dealOffer":  # 204 unless asked for the events and the deal
                call = replace(
                    core.trigger_deal_offer(values, None), prefer="return=representation"
                )
            else:
                call = core.trigger(path, values, None)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
            )
            raise UsageError(f"{kind}: {problems}") from exc
    else:
        raise UsageError(
            f"no event or scenario {name!r}; events: {', '.join(TRIGGERS)}; "
            f"scenarios: {', '.join(SCENARIOS)}"
        )
    with creds.client() as client:
        result = fetch(client, call)
    emit(result)
    for event in result["events"]:
        note(f"{event['event']:<20} {_summary(event['data'])}  {event['id']}")
    deal = result.get("deal")
    if deal:
        payment = f", payment {deal['paymentStatus']}" if deal.get("paymentStatus") else ""
        note(f"deal {deal['id']} is {deal['status']}{payment}")
    return 0


def _summary(data: dict[str, Any]) -> str:
    parts = [data.get("signatureType"), data.get("status"), data.get("type")]
    return " ".join(str(p) for p in parts if p) or str(data.get("id", ""))


# --- the command line ------------------------------------------------------------------------


def _uuid(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an id (a UUID): {value!r}") from None


def _credential_options(parser: argparse.ArgumentParser, default: Any) -> None:
    group = parser.add_argument_group("credentials (or their environment variables)")
    group.add_argument(
        "--api-url", default=default, help=f"the service's base URL ({DEFAULT_API_URL})"
    )
    group.add_argument("--client-id", default=default, help="the integration's client id")
    group.add_argument(
        "--client-secret",
        default=default,
        help="its client secret (prefer DEALBROKER_CLIENT_SECRET: options show in ps)",
    )
    group.add_argument(
        "--webhook-secret",
        action="append",
        default=default,
        help="its webhook secret, for the sandbox and for signing forwarded events (repeat it "
        "to sign with both secrets of a rotation)",
    )


def build_parser() -> argparse.ArgumentParser:
    from dealbroker_client.cli import listen

    parser = argparse.ArgumentParser(
        prog="dealbroker-client",
        description="The dealbroker integration API from a terminal: deals, events, the "
        "sandbox's triggers and clock, and listen, which forwards events to a local URL signed "
        "as webhooks.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    _credential_options(parser, None)
    # The credentials are accepted after the command too; there they override nothing unless
    # given (SUPPRESS leaves the main parser's value).
    common = argparse.ArgumentParser(add_help=False)
    _credential_options(common, argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    deals = commands.add_parser("deals", help="your deals").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    listing = deals.add_parser("list", parents=[common], help="one page of deals, newest first")
    listing.add_argument("--page", type=int, default=None, help="the page, from 1")
    listing.add_argument("--page-size", type=int, default=None, help="deals a page")
    listing.set_defaults(run=deals_list)
    get = deals.add_parser("get", parents=[common], help="one deal")
    get.add_argument("deal_id", type=_uuid, metavar="ID")
    get.set_defaults(run=deals_get)

    ev = commands.add_parser(
        "events",
        parents=[common],
        help="one page of events: newest first, or oldest first after --after",
    )
    ev.add_argument("--after", type=_uuid, help="the events after this event id, oldest first")
    ev.add_argument("--limit", type=int, default=None, help="events a page")
    ev.add_argument("--page", type=int, default=None, help="the page, from 1")
    ev.add_argument("--event", choices=[k.value for k in m.EventKind], help="only this kind")
    ev.add_argument("--deal", type=_uuid, help="only this deal's events")
    ev.set_defaults(run=events)

    clock = commands.add_parser("clock", help="the sandbox clock").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    advance = clock.add_parser(
        "advance",
        parents=[common],
        help="move the integration's sandbox clock ahead (or one deal's, with --deal); "
        "deadlines now due fire",
    )
    advance.add_argument("seconds", type=int, metavar="SECONDS")
    advance.add_argument("--deal", type=_uuid, help="move only this deal's own clock")
    advance.set_defaults(run=clock_advance)
    show = clock.add_parser(
        "show", parents=[common], help="a deal's clock: its offsets and pending deadlines"
    )
    show.add_argument("--deal", type=_uuid, required=True, help="the deal")
    show.set_defaults(run=clock_show)

    trig = commands.add_parser(
        "trigger",
        parents=[common],
        help="simulate an event or run a scenario in the sandbox",
        description="Simulate one event (on --deal, or with dummy data) or drive a deal (--deal, "
        "or a new one) down a named scenario; prints the events emitted and the deal. Events: "
        + ", ".join(TRIGGERS)
        + ". Scenarios: "
        + ", ".join(SCENARIOS)
        + ".",
    )
    trig.add_argument("name", metavar="EVENT|SCENARIO")
    trig.add_argument("--deal", type=_uuid, help="the deal to act on")
    trig.add_argument("--status", help="the status (signature.status, payment.status, deal.status)")
    trig.add_argument("--signature-type", choices=get_args(m.SignatureType))
    trig.set_defaults(run=trigger)

    listen.add_parser(commands, common)
    return parser


def _version() -> str:
    try:
        return version("dealbroker-client")
    except PackageNotFoundError:
        return "unknown"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def problem_line(exc: APIError) -> str:
    """An error answer as one line: status, title, detail, refused fields and request id."""
    line = f"{exc.status} {exc.title}"
    if exc.detail:
        line += f": {exc.detail}"
    if exc.errors:
        line += " [" + "; ".join(f"{e.field}: {e.message}" for e in exc.errors) + "]"
    if exc.request_id:
        line += f" (requestId {exc.request_id})"
    return _one_line(line)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    creds = Credentials(args)
    run: Callable[[argparse.Namespace, Credentials], int] = args.run
    try:
        return run(args, creds)
    except UsageError as exc:
        note(f"{parser.prog}: error: {exc}")
        return 2
    except APIError as exc:
        note(f"error: {problem_line(exc)}")
        return 1
    except APIConnectionError as exc:
        note(_one_line(f"error: cannot reach {creds.api_url}: {exc}"))
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly; the interpreter's final flush of the
        # closed pipe must not print a traceback either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
