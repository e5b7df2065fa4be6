"""A real ``dealbroker listen`` in the background, and the API calls its tests make."""

import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from tests.conftest import SELLER
from tests.processes import Server, env


class Listener:
    """``python -m dealbroker listen`` in the background; its output lines kept."""

    def __init__(
        self, db: str, cwd: Path, *args: str, interval: float = 0.1, **extra_env: str
    ) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dealbroker", "listen", "--interval", str(interval), *args],
            env=env(db, **extra_env),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.errors: list[str] = []
        self.ready = threading.Event()
        threading.Thread(target=self._drain_errors, daemon=True).start()
        threading.Thread(target=self._drain_lines, daemon=True).start()
        if not self.ready.wait(20):
            self.stop()
            raise AssertionError("listen did not start:\n" + "\n".join(self.errors))

    def _drain_errors(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.errors.append(line.rstrip())
            if line.startswith("Ready"):
                self.ready.set()

    def _drain_lines(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip())

    def stop(self, sig: int = signal.SIGINT) -> int:
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise


class Api:
    def __init__(self, server: Server) -> None:
        self.server = server
        token = httpx.post(
            f"{server.base}/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(server.credential("client id"), server.credential("client secret")),
        ).json()["access_token"]
        self.headers = {"Authorization": f"Bearer {token}"}

    def create_deal(self, name: str) -> str:
        response = httpx.post(
            f"{self.server.base}/deals/v1/deals",
            json={"name": name, "price": 500, "seller": SELLER},
            headers=self.headers,
        )
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def trigger(self, name: str, body: dict) -> None:
        secret = self.server.credential("webhook secret")
        response = httpx.post(
            f"{self.server.base}/webhooks/v1/{name}", json=body, headers={"webhook-secret": secret}
        )
        assert response.status_code in (200, 204), response.text

    def events_after(self, event_id: str) -> list[str]:
        response = httpx.get(
            f"{self.server.base}/events/v1/events",
            params={"after": event_id, "pageSize": 100},
            headers=self.headers,
        )
        return [e["id"] for e in response.json()["items"]]

    def newest_event(self) -> str:
        response = httpx.get(
            f"{self.server.base}/events/v1/events", params={"pageSize": 1}, headers=self.headers
        )
        return response.json()["items"][0]["id"]
