"""Pressing a console's one-time login link as a browser does: its page first (which sets the
nonce's cookie), then its button (the form with the page's nonce)."""

import re

import httpx


def nonce_of(page: str) -> str:
    found = re.search(r'name="nonce" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


async def press(client: httpx.AsyncClient, path: str) -> httpx.Response:
    """Open the link's page, press its button; the POST's answer."""
    shown = await client.get(path)
    assert shown.status_code == 200, shown.text
    assert f'action="{path}"' in shown.text  # a button; opening the link uses nothing up
    return await client.post(path, data={"nonce": nonce_of(shown.text)})


def press_sync(client: httpx.Client, path: str) -> httpx.Response:
    """``press`` for a synchronous client (a test that drives a real server process)."""
    shown = client.get(path)
    assert shown.status_code == 200, shown.text
    return client.post(path, data={"nonce": nonce_of(shown.text)})
