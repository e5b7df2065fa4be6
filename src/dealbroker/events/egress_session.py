"""The delivery worker's aiohttp session under the egress policy of ``events.egress``: it
resolves every host itself, vets each address and dials only vetted ones; IP literals are vetted
before the request is made. Apart from ``events.egress`` so that aiohttp is imported only by the
processes that send webhooks (the worker, and a server running it embedded).
"""

from __future__ import annotations

import socket
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from dealbroker.events import egress


class ConnectError(aiohttp.ClientConnectionError):
    """A webhook's host did not resolve when it was sent: possibly transient, so an ordinary
    network error that delivery retries, not a refusal."""


# Every request asks for an uncompressed answer: no Accept-Encoding at all would allow any coding
# (RFC 9110, 12.5.3), and answers are not decoded.
_HEADERS = {"Accept-Encoding": "identity"}

# The addresses handed to aiohttp are numeric: the socket layer must not resolve them again.
_NUMERIC = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV


class _VettingResolver(AbstractResolver):
    """aiohttp resolver that refuses a host if any of its addresses is not public, and otherwise
    hands the connector exactly the addresses it vetted, so those are the only ones dialled
    (happy eyeballs included). aiohttp does not ask a resolver about IP literals:
    :func:`_vet_literal_hosts` covers those."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_UNSPEC
    ) -> list[ResolveResult]:
        try:
            addresses = await egress._resolve(host, port)
        except (OSError, UnicodeError) as exc:
            # Unlike at registration, a lookup failure here may be transient.
            raise ConnectError(f"could not send: {egress._no_public_address(host)}") from exc
        egress._refuse_non_public(host, addresses)  # before any socket to the destination exists
        return [
            ResolveResult(
                hostname=host,
                host=str(address),
                port=port,
                family=socket.AF_INET if address.version == 4 else socket.AF_INET6,
                proto=socket.IPPROTO_TCP,
                flags=_NUMERIC,
            )
            for address in addresses
        ]

    async def close(self) -> None:
        pass


async def _vet_literal_hosts(
    request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
) -> aiohttp.ClientResponse:
    """Client middleware refusing a URL whose host is a non-public IP literal (which aiohttp
    dials without asking the resolver)."""
    host = request.url.raw_host or ""
    address = egress._ip_literal(host)  # None for a name: the resolver vets those
    if address is not None:
        egress._refuse_non_public(host, [address])
    return await handler(request)


class _Response(aiohttp.ClientResponse):
    """Remembers the peer address of the connection it came over: aiohttp lets the connection go
    as soon as the body has arrived, which for a short answer is before the caller sees it."""

    peer: Any = None

    async def start(self, connection: aiohttp.connector.Connection) -> aiohttp.ClientResponse:
        transport = connection.transport
        self.peer = None if transport is None else transport.get_extra_info("peername")
        return await super().start(connection)


def webhook_session(
    *,
    allow_private: bool,
    connect_timeout: float = 5.0,
    total_timeout: float = 15.0,
    max_connections: int = 100,
) -> aiohttp.ClientSession:
    """The delivery worker's aiohttp session. Call it with a running event loop; close it.

    Unless ``allow_private``, it resolves every host itself at connect time and refuses (raising
    EgressRefused, before any connection to the destination is opened) if any address is not
    public, dialling only the vetted addresses; IP literals are vetted as well. A host that does
    not resolve raises :class:`ConnectError`. Always: no proxy from the environment
    (``trust_env=False``), no cookies kept, certificates verified against certifi's bundle (as
    httpx does), no compressed answers asked for (``Accept-Encoding: identity`` on every
    request) nor decoded (the caller reads a bounded number of raw bytes); ``connect_timeout``
    covers resolving and connecting, ``total_timeout`` the whole exchange including the
    response body. Redirects are the caller's to refuse (aiohttp takes ``allow_redirects`` per
    request). At most ``max_connections`` connections, to one host or to all, each kept idle
    for 5 s at most (httpx's default).
    """
    connector = aiohttp.TCPConnector(
        limit=max_connections,
        limit_per_host=max_connections,
        keepalive_timeout=5.0,
        ssl=egress.ssl_context(),
        resolver=None if allow_private else _VettingResolver(),
        # Every new connection resolves (and vets) afresh.
        use_dns_cache=False,
        happy_eyeballs_delay=None,  # addresses in resolver order, one after the other
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=total_timeout, connect=connect_timeout),
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        auto_decompress=False,
        # Said once for the session, not left out of aiohttp's defaults (``skip_auto_headers``),
        # which it works out again for every request (bench/bench_send_path.py).
        headers=_HEADERS,
        middlewares=() if allow_private else (_vet_literal_hosts,),
        response_class=_Response,
    )
