"""Egress policy for webhooks: address classification, registration checks, and the send-time
guard against real loopback servers (no external network is needed)."""

import datetime
import ipaddress
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import aiohttp
import certifi
import pytest

from dealbroker.events import egress
from dealbroker.events.egress import (
    EgressRefused,
    check_url,
    is_public_address,
    webhook_session,
)
from tests.events.delivery import fake_resolver
from tests.receiver import LoopbackServer

NOT_PUBLIC = [
    "127.0.0.1",
    "10.0.0.1",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "100.127.255.254",
    "0.0.0.0",
    "0.1.2.3",
    "224.0.0.1",
    "239.255.255.250",
    "255.255.255.255",
    "240.0.0.1",
    "192.0.0.1",
    "192.0.0.9",
    "198.18.0.1",
    "198.19.255.254",
    "192.0.2.1",
    "198.51.100.1",
    "203.0.113.1",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "fd12:3456::1",
    "fec0::1",
    "ff02::1",
    "ff0e::1",
    "2001:db8::1",
    "3fff::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "::127.0.0.1",  # deprecated IPv4-compatible form
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b:1::1",  # local-use NAT64
    "2002:a00:1::1",  # 6to4 of 10.0.0.1
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "2001::1",  # Teredo
]
PUBLIC = [
    "1.1.1.1",
    "8.8.8.8",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",  # NAT64 of 8.8.8.8
    "2002:808:808::1",  # 6to4 of 8.8.8.8
]


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_not_public_addresses(address: str) -> None:
    assert not is_public_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses(address: str) -> None:
    assert is_public_address(ipaddress.ip_address(address))


# --- registration-time checks ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1/hook", "loopback"),
        ("http://10.1.2.3/", "private"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://[::1]:8080/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://0.0.0.0:8000/", "unspecified"),
        ("http://localhost/", "'localhost' does not resolve to public addresses only"),
        (
            "http://127.1/",
            "does not resolve to public addresses only",
        ),  # shorthand the resolver expands to 127.0.0.1
        (
            "http://2130706433/",
            "does not resolve to public addresses only",
        ),  # 127.0.0.1 as one integer
        ("ftp://example.com/", "scheme"),
        ("file:///etc/passwd", "scheme"),
        ("example.com/hook", "scheme"),
        ("http://user:pw@1.1.1.1/", "credentials"),
        ("http:///hook", "no host"),
        ("http://1.1.1.1:0/", "port"),
        ("http://1.1.1.1:65536/", "port"),
        ("http://nonexistent.invalid/", "does not resolve to public addresses only"),
        ("http://[::1/", "invalid URL"),
    ],
)
async def test_check_url_refuses(url: str, reason: str) -> None:
    with pytest.raises(EgressRefused) as caught:
        await check_url(url, allow_private=False)
    assert reason in str(caught.value)


async def test_a_refused_name_does_not_echo_what_it_resolved_to() -> None:
    """Telling an integrator the internal address their host name resolved to would map the
    service's own network: say only that it is not a public address."""
    with pytest.raises(EgressRefused) as caught:
        await check_url("http://localhost:8000/hook", allow_private=False)
    assert "127.0.0.1" not in str(caught.value)
    assert "::1" not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "http://1.1.1.1/",
        "https://8.8.8.8:8443/hooks?x=1",
        "https://[2606:4700:4700::1111]/",
        "http://[64:ff9b::808:808]/",
    ],
)
async def test_check_url_allows_public_literals(url: str) -> None:
    await check_url(url, allow_private=False)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9/", "http://localhost:8080/hook", "http://[::1]/"]
)
async def test_check_url_allow_private(url: str) -> None:
    await check_url(url, allow_private=True)


async def test_check_url_allow_private_still_requires_resolution_and_scheme() -> None:
    with pytest.raises(EgressRefused, match="does not resolve to public addresses only"):
        await check_url("http://nonexistent.invalid/", allow_private=True)
    with pytest.raises(EgressRefused, match="scheme"):
        await check_url("gopher://127.0.0.1/", allow_private=True)


async def test_check_url_allow_unresolved_takes_a_host_that_does_not_resolve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sandbox's registration: a name that does not resolve (yet) is taken, by either
    private-address policy; everything else about the URL is checked as always."""
    looked_up = fake_resolver(monkeypatch, lambda host: [])
    for allow_private in (True, False):
        await check_url(
            "https://market.example.com/hooks/dealbroker",
            allow_private=allow_private,
            allow_unresolved=True,
        )
        with pytest.raises(EgressRefused, match="does not resolve to public addresses only"):
            await check_url("https://market.example.com/hooks", allow_private=allow_private)
    assert set(looked_up) == {"market.example.com"}
    for url, reason in [
        ("gopher://market.example.com/", "scheme"),
        ("https://user:pw@market.example.com/", "credentials"),
        ("https://market.example.com:0/", "port"),
    ]:
        with pytest.raises(EgressRefused, match=reason):
            await check_url(url, allow_private=True, allow_unresolved=True)


async def test_a_name_that_does_not_resolve_and_a_private_one_get_one_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Registering URLs must not tell which names exist on the service's own network: a name
    that does not resolve and one that resolves to a private address are refused alike."""
    fake_resolver(monkeypatch, lambda host: ["10.0.0.7"] if host == "db.internal" else [])
    answers = []
    for host in ("db.internal", "nothing.internal"):
        with pytest.raises(EgressRefused) as caught:
            await check_url(f"https://{host}/hook", allow_private=False)
        answers.append(str(caught.value).replace(host, "HOST"))
    assert (
        answers[0]
        == answers[1]
        == "refusing to send: 'HOST' does not resolve to public addresses only"
    )


async def test_check_url_allow_unresolved_refuses_a_name_no_resolver_takes() -> None:
    # A label over 63 characters: refused while encoding, before any query is sent.
    with pytest.raises(EgressRefused, match="invalid host name"):
        await check_url(
            "https://" + "a" * 64 + ".example/", allow_private=True, allow_unresolved=True
        )


async def test_check_url_allow_unresolved_still_judges_a_host_that_resolves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_resolver(monkeypatch, lambda host: ["10.0.0.7"])
    with pytest.raises(EgressRefused, match="does not resolve to public addresses only"):
        await check_url("https://intranet.example/", allow_private=False, allow_unresolved=True)
    with pytest.raises(EgressRefused, match="loopback"):
        await check_url("http://127.0.0.1/", allow_private=False, allow_unresolved=True)
    await check_url("https://intranet.example/", allow_private=True, allow_unresolved=True)


async def test_check_url_refuses_if_any_address_is_private(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_resolver(monkeypatch, lambda host: ["8.8.8.8", "2606:4700:4700::1111", "10.0.0.7"])
    with pytest.raises(
        EgressRefused, match="'mixed.example' does not resolve to public addresses only"
    ) as caught:
        await check_url("https://mixed.example/hook", allow_private=False)
    assert "10.0.0.7" not in str(caught.value)  # the private address is never echoed
    await check_url("https://mixed.example/hook", allow_private=True)


async def test_check_url_resolves_names_to_public_addresses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    looked_up = fake_resolver(monkeypatch, lambda host: ["93.184.215.14", "2606:2800:21f::1"])
    await check_url("https://hooks.example/receive", allow_private=False)
    assert looked_up == ["hooks.example"]


# --- send-time guard against a real loopback server ------------------------------------------


@dataclass
class Receiver:
    """A loopback HTTP(S) server recording the connections and requests it received."""

    port: int
    connections: list[tuple[str, int]] = field(default_factory=list)
    requests: list[tuple[str, str, str | None, bytes]] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.receiver.requests.append((self.command, self.path, self.headers["Host"], body))
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/landed")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/drip":  # a body trickled out slower than the total timeout allows
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            try:
                for _ in range(100):
                    self.wfile.write(b".")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass  # the client gave up, as it should
        else:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")


class _Server(LoopbackServer):
    def __init__(self, ssl_context: ssl.SSLContext | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.receiver = Receiver(port=self.server_address[1])
        self.ssl_context = ssl_context

    def get_request(self) -> tuple[Any, Any]:
        # Count TCP connections as they are accepted, before any HTTP is parsed.
        sock, address = super().get_request()
        self.receiver.connections.append(address)
        if self.ssl_context is not None:
            sock = self.ssl_context.wrap_socket(sock, server_side=True)
        return sock, address


@contextmanager
def serve(ssl_context: ssl.SSLContext | None = None) -> Iterator[Receiver]:
    server = _Server(ssl_context)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with serve() as running:
        yield running


@pytest.fixture
def allow_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Treat 127.0.0.0/8 as public, to exercise the vetting transport's own dial path."""
    real = egress._non_public_reason

    def reason(address: egress.IPAddress) -> str | None:
        return None if address in ipaddress.ip_network("127.0.0.0/8") else real(address)

    monkeypatch.setattr(egress, "_non_public_reason", reason)


async def _deliver_sentinel(receiver: Receiver) -> None:
    """Send one permitted request; connections are accepted in order, so once it has arrived,
    any earlier (refused) attempt that had reached the server would have been counted first."""
    url = f"http://127.0.0.1:{receiver.port}/sentinel"
    async with webhook_session(allow_private=True) as session, session.post(url, data=b"s") as r:
        assert r.status == 200


# --- TLS: the vetted IP is dialled, but SNI and certificate checks use the hostname -----------


def _self_signed(tmp_path: Path, hostname: str) -> tuple[Path, Path]:
    """A certificate (and key) valid only for the DNS name ``hostname``, no IP address SAN."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(hostname)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


# --- the guard on the delivery worker's aiohttp session ----------------------------------


async def _post(session: aiohttp.ClientSession, url: str, body: bytes = b"x") -> tuple[int, bytes]:
    async with session.post(url, data=body, allow_redirects=False) as response:
        return response.status, await response.read()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]", "[::1]"])
async def test_session_refuses_before_connecting(receiver: Receiver, host: str) -> None:
    said = "does not resolve to public addresses only" if host == "localhost" else "loopback"
    async with webhook_session(allow_private=False) as session:
        with pytest.raises(EgressRefused, match=said):
            await _post(session, f"http://{host}:{receiver.port}/hook", b"secret")
    assert receiver.requests == []
    await _deliver_sentinel(receiver)
    assert len(receiver.connections) == 1


async def test_session_allowed_with_allow_private(receiver: Receiver) -> None:
    async with webhook_session(allow_private=True) as session:
        answer = await _post(session, f"http://127.0.0.1:{receiver.port}/hook", b"payload")
    assert answer == (200, b"ok")
    assert receiver.requests == [("POST", "/hook", f"127.0.0.1:{receiver.port}", b"payload")]


async def test_session_closes_dns_rebinding_window(
    monkeypatch: pytest.MonkeyPatch, receiver: Receiver
) -> None:
    answers = iter([["93.184.215.14"], ["127.0.0.1"]])
    fake_resolver(monkeypatch, lambda host: next(answers))
    url = f"http://rebind.example:{receiver.port}/hook"
    await check_url(url, allow_private=False)
    async with webhook_session(allow_private=False) as session:
        with pytest.raises(
            EgressRefused, match="'rebind.example' does not resolve to public addresses only"
        ):
            await _post(session, url, b"secret")
    await _deliver_sentinel(receiver)
    assert len(receiver.connections) == 1


async def test_session_resolution_failure_is_a_connect_error() -> None:
    async with webhook_session(allow_private=False) as session:
        with pytest.raises(egress.ConnectError, match="does not resolve to public addresses only"):
            await _post(session, "http://nonexistent.invalid/hook")


async def test_session_dials_the_vetted_address_keeping_the_host(
    allow_loopback: None, monkeypatch: pytest.MonkeyPatch, receiver: Receiver
) -> None:
    looked_up = fake_resolver(monkeypatch, lambda host: ["127.0.0.1"])
    async with webhook_session(allow_private=False) as session:
        answer = await _post(session, f"http://hooks.example:{receiver.port}/hook")
    assert answer == (200, b"ok")
    assert looked_up == ["hooks.example"]
    assert receiver.requests == [("POST", "/hook", f"hooks.example:{receiver.port}", b"x")]


async def test_session_falls_back_to_the_next_address(
    allow_loopback: None, monkeypatch: pytest.MonkeyPatch, receiver: Receiver
) -> None:
    fake_resolver(monkeypatch, lambda host: ["127.0.0.2", "127.0.0.1"])
    async with webhook_session(allow_private=False) as session:
        answer = await _post(session, f"http://two.example:{receiver.port}/hook")
    assert answer == (200, b"ok")
    assert receiver.connections == [("127.0.0.1", receiver.connections[0][1])]


async def test_session_total_timeout_bounds_a_trickling_response(receiver: Receiver) -> None:
    async with webhook_session(allow_private=True, total_timeout=0.5) as session:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await _post(session, f"http://127.0.0.1:{receiver.port}/drip")
    assert time.monotonic() - started < 2.5


async def test_session_takes_no_proxy_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, receiver: Receiver
) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    async with webhook_session(allow_private=True) as session:
        assert (await _post(session, f"http://127.0.0.1:{receiver.port}/hook"))[0] == 200
        assert isinstance(session.cookie_jar, aiohttp.DummyCookieJar)


def test_a_peer_is_judged_by_the_policy_in_force_not_a_remembered_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The parsed address and each address's reason are cached; the verdict follows whatever
    # ``_non_public_reason`` says now (the tests' policy patches rely on it).
    peer = ("127.0.0.1", 443)
    assert egress.peer_is_public(peer) is False
    assert egress.peer_is_public(("93.184.216.34", 443)) is True
    real = egress._non_public_reason
    monkeypatch.setattr(egress, "_non_public_reason", lambda a: None if a.is_loopback else real(a))
    assert egress.peer_is_public(peer) is True
    monkeypatch.undo()
    assert egress.peer_is_public(peer) is False
    assert egress.peer_is_public(("not-an-address", 443)) is False
    assert egress.peer_is_public(None) is False


@pytest.mark.parametrize("public", [True, False])
async def test_a_short_answer_knows_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, receiver: Receiver, public: bool
) -> None:
    # aiohttp lets a connection go once the body has arrived, before the caller looks.
    if public:
        real = egress._non_public_reason
        monkeypatch.setattr(
            egress, "_non_public_reason", lambda a: None if a.is_loopback else real(a)
        )
    async with webhook_session(allow_private=True) as session:
        url = f"http://127.0.0.1:{receiver.port}/hook"
        async with session.post(url, data=b"x", allow_redirects=False) as response:
            assert await response.read() == b"ok"
            assert egress.answered_from_public_address(response) is public


@pytest.mark.parametrize(("cert_name", "succeeds"), [("localhost", True), ("other.test", False)])
async def test_session_tls_verifies_and_sends_sni_for_the_hostname(
    allow_loopback: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    cert_name: str,
    succeeds: bool,
) -> None:
    cert_path, key_path = _self_signed(tmp_path, cert_name)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert_path, key_path)
    sni: list[str | None] = []
    server_context.sni_callback = lambda sock, server_name, context: sni.append(server_name)
    monkeypatch.setattr(certifi, "where", lambda: str(cert_path))
    with serve(server_context) as tls_receiver:
        url = f"https://localhost:{tls_receiver.port}/hook"
        async with webhook_session(allow_private=False) as session:
            if succeeds:
                assert (await _post(session, url))[0] == 200
            else:
                with pytest.raises(aiohttp.ClientConnectorCertificateError):
                    await _post(session, url)
    assert sni == ["localhost"]
    expected = [("POST", "/hook", f"localhost:{tls_receiver.port}", b"x")] if succeeds else []
    assert tls_receiver.requests == expected
