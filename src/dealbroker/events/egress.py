"""Egress policy for webhooks: which destinations dealbroker is willing to send HTTP requests to.

Integrations choose webhook URLs, so without a policy they could aim the service at its own
network (cloud metadata at 169.254.169.254, databases, admin ports on loopback). In production
the URL is checked when it is registered (:func:`check_url`; the sandbox also accepts a host
that does not resolve yet) and, because DNS answers can change between registration and
delivery, again on every new connection: the session made by :func:`webhook_session` (the
delivery worker's, aiohttp) resolves the host itself, vets every address and dials only vetted
addresses, so the address checked is the address connected to (no DNS-rebinding window); an IP
literal in the URL is vetted before the request is made. A sandbox on a developer's machine
passes ``allow_private=True`` to permit local test receivers; whatever the policy, only a public
destination's answer is kept (:func:`answered_from_public_address`), so the attempts API never
reads an internal service's answer back.

The session and the resolver it dials through are aiohttp's, in ``events.egress_session``, which
only the delivery worker imports: importing aiohttp would slow every start of a process that
imports this module only to check a URL (the app, each CLI command). ``webhook_session`` and
``ConnectError`` are still importable from here.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
import ssl
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import certifi
import httpx

if TYPE_CHECKING:
    import aiohttp

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# A registration must not hang on a slow resolver; send-time lookups use the connect timeout.
_RESOLVE_TIMEOUT = 5.0

# NAT64 well-known prefix (RFC 6052): the last 32 bits are the IPv4 address actually reached.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")

# Ranges that ipaddress.is_global does not reliably treat as non-global on every Python we
# support (its tables change between patch releases): 192.0.0.9 and 192.0.0.10 count as global
# on current Pythons, the IPv6 documentation prefix 3fff::/20 (RFC 9637) is newer than them, and
# the local-use NAT64 prefix (RFC 8215) is reported as global.
_NOT_PUBLIC = (
    (ipaddress.ip_network("192.0.0.0/24"), "IETF protocol assignments"),
    (ipaddress.ip_network("3fff::/20"), "documentation"),
    (ipaddress.ip_network("64:ff9b:1::/48"), "local-use NAT64"),
)


class EgressRefused(Exception):
    """A destination the service will not send to; str(exc) is a clear human reason."""


@functools.lru_cache(maxsize=4096)
def _ip_literal(host: str) -> IPAddress | None:
    """``host`` as an IP address, or None when it is not one (a name); parsed once per host
    string (bounded): the worker asks it of every answer's peer address and, in production, of
    every URL's host, and ``ip_address`` is not free, less so when it fails."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


@functools.lru_cache(maxsize=4096)
def _non_public_reason(address: IPAddress) -> str | None:
    """Why ``address`` is not a public destination, or None if it is one. A pure function of the
    address (the tables are the module's and ``ipaddress``'s), kept for the addresses last asked
    about (bounded): it is asked of every answer's peer."""
    if isinstance(address, ipaddress.IPv6Address):
        # Addresses that carry an IPv4 address are judged by the IPv4 address they reach.
        if address.ipv4_mapped is not None:
            embedded: ipaddress.IPv4Address | None = address.ipv4_mapped
        elif address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
        else:
            embedded = address.sixtofour
        if embedded is not None:
            why = _non_public_reason(embedded)
            return None if why is None else f"embeds {embedded}, {why}"
        if address.is_site_local:  # fec0::/10: deprecated, but is_global still says True
            return "site-local"
    # Multicast is checked explicitly because is_global is True for global-scope groups.
    for flag, reason in (
        (address.is_unspecified, "unspecified"),
        (address.is_loopback, "loopback"),
        (address.is_link_local, "link-local"),
        (address.is_multicast, "multicast"),
        (address.is_private, "private or special-purpose"),
        (address.is_reserved, "reserved"),
    ):
        if flag:
            return reason
    for network, reason in _NOT_PUBLIC:
        if address in network:
            return reason
    if not address.is_global:  # e.g. 100.64.0.0/10, shared address space for carrier-grade NAT
        return "not globally routable"
    return None


def is_public_address(address: IPAddress) -> bool:
    """Whether ``address`` is a globally routable unicast address webhooks may be sent to."""
    return _non_public_reason(address) is None


def peer_is_public(peer: Any) -> bool:
    """Whether a socket's peer address (``(host, port, ...)`` as ``getpeername`` gives it) is
    public; False when there is none or it is not an IP address."""
    if not peer:
        return False
    host = peer[0]
    if isinstance(host, str):
        address = _ip_literal(host)
    else:  # not what a TCP socket gives: judged as before, uncached
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
    return address is not None and is_public_address(address)


async def _resolve(host: str, port: int) -> list[IPAddress]:
    """All addresses ``host`` resolves to (both families, in resolver order); IP literals as is.

    Raises OSError (or UnicodeError for names that cannot be encoded) if nothing resolves.
    """
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM)
    addresses: list[IPAddress] = []
    for family, _type, _proto, _canonname, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            address = ipaddress.ip_address(sockaddr[0])
            if address not in addresses:
                addresses.append(address)
    if not addresses:
        raise socket.gaierror(socket.EAI_NONAME, "no IPv4 or IPv6 address")
    return addresses


def _no_public_address(host: str) -> str:
    """What is said of a host name that does not resolve, or resolves to an address that is not
    public: the same words for both, and never the address or its kind, so that registering
    URLs (or following their sends) cannot tell which names exist on the service's own network
    and what they point at."""
    return f"{host!r} does not resolve to public addresses only"


def _is_literal(host: str) -> bool:
    return _ip_literal(host) is not None


def _refuse_non_public(host: str, addresses: Iterable[IPAddress]) -> None:
    """Raise EgressRefused if any of ``host``'s addresses is not public.

    Any, not all: a name that also resolves to a private address could be dialled there. An IP
    literal is named with the reason (its writer knows it); a name is not (``_no_public_address``).
    """
    for address in addresses:
        reason = _non_public_reason(address)
        if reason is None:
            continue
        if _is_literal(host):
            raise EgressRefused(f"refusing to send to {host}: not a public address ({reason})")
        raise EgressRefused(f"refusing to send: {_no_public_address(host)}")


async def check_url(url: str, *, allow_private: bool, allow_unresolved: bool = False) -> None:
    """Registration-time check: http(s) scheme, a host, no userinfo, port 1-65535; resolve the host
    (asyncio loop.getaddrinfo, both families) and raise EgressRefused if resolution fails or, unless
    allow_private, if ANY resolved address is not public. IP literals (incl. [::1]) are checked
    directly.

    With ``allow_unresolved`` (the sandbox) a host that does not resolve (yet) is accepted: an
    integrator may register the URL of a receiver it has not deployed. A host that does resolve
    is judged as always, and the dial-time check of :func:`webhook_session` vets whatever the
    name resolves to when a webhook is sent."""
    # A strict parser (httpx's). The sender parses again (aiohttp, yarl) and vets whatever host
    # it dials, so were the two ever to disagree on a host, a send could only be refused.
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise EgressRefused(f"invalid URL: {exc}") from exc
    if parsed.scheme not in ("http", "https"):
        raise EgressRefused(f"URL scheme must be http or https, not {parsed.scheme or 'missing'!r}")
    if not parsed.raw_host:
        raise EgressRefused("URL has no host")
    if parsed.userinfo:
        raise EgressRefused("URL must not contain credentials (user:password@)")
    port = parsed.port  # None when it is the scheme's default
    if port is not None and not 1 <= port <= 65535:
        raise EgressRefused(f"URL port must be between 1 and 65535, not {port}")
    # raw_host: IDNA-encoded, IPv6 literals without brackets.
    host = parsed.raw_host.decode("ascii")
    try:
        async with asyncio.timeout(_RESOLVE_TIMEOUT):
            addresses = await _resolve(host, port or (443 if parsed.scheme == "https" else 80))
    except UnicodeError as exc:  # a name no resolver could ever be asked for
        raise EgressRefused(f"invalid host name {host!r}: {exc}") from exc
    except (TimeoutError, OSError) as exc:
        if allow_unresolved:
            return
        raise EgressRefused(f"refusing to send: {_no_public_address(host)}") from exc
    if not allow_private:
        _refuse_non_public(host, addresses)


def answered_from_public_address(response: aiohttp.ClientResponse) -> bool:
    """Whether ``response`` (of a :func:`webhook_session`) came over a connection to a public
    address, judged by the peer address of the socket actually used (not by the URL, whose name
    may resolve elsewhere now). When the address cannot be told, the answer is False: an answer
    from an unknown place is treated as one from inside the network."""
    return peer_is_public(getattr(response, "peer", None))


def ssl_context() -> ssl.SSLContext:
    """TLS client context trusting certifi's bundle, the one httpx uses."""
    return ssl.create_default_context(cafile=certifi.where())


def __getattr__(name: str) -> Any:
    """``webhook_session`` and ``ConnectError``, from ``events.egress_session`` (imported on
    first use: it imports aiohttp)."""
    if name in ("webhook_session", "ConnectError"):
        from dealbroker.events import egress_session

        return getattr(egress_session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
