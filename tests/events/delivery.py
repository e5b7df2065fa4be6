"""Webhook endpoints registered through the API and deliveries run to the end, for the webhook tests
of every area; and a resolver that answers as a test tells it."""

import asyncio
import ipaddress
import socket
from collections.abc import Callable
from typing import Any

import pytest

from dealbroker.events.tasks import DeliveryJob

ENDPOINTS = "/integrations/v1/webhook-endpoints"


async def drain(worker: DeliveryJob) -> int:
    total = 0
    while handled := await worker.run_once():
        total += handled
    return total


async def register(client, caller, url, **fields):
    response = await client.post(ENDPOINTS, json={"url": url, **fields}, headers=caller.headers)
    assert response.status_code == 201, response.text
    return response.json()


def fake_resolver(
    monkeypatch: pytest.MonkeyPatch, answers: Callable[[str], list[str]]
) -> list[str]:
    """Replace the running loop's getaddrinfo; returns the list of names looked up. A name
    ``answers`` gives no address fails as a resolver's unknown name does (no query leaves)."""
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo
    looked_up: list[str] = []

    async def getaddrinfo(host: Any, port: Any, **kwargs: Any) -> list[Any]:
        if isinstance(host, bytes):  # anyio (httpx's unvetted dialler) passes the IDNA bytes
            host = host.decode("ascii")
        if host in ("localhost", "nonexistent.invalid"):
            return await real(host, port, **kwargs)
        looked_up.append(host)
        addresses = answers(host)
        if not addresses:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        infos: list[tuple[Any, ...]] = []
        for answer in addresses:
            address = ipaddress.ip_address(answer)
            if address.version == 4:
                infos.append(
                    (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (answer, port))
                )
            else:
                infos.append(
                    (
                        socket.AF_INET6,
                        socket.SOCK_STREAM,
                        socket.IPPROTO_TCP,
                        "",
                        (answer, port, 0, 0),
                    )
                )
        return infos

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    return looked_up
