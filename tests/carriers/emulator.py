"""The Bring emulator (``tests.carriers.bring_emulator``) as its own process on a free loopback
port, with helpers for its control endpoints (documented in that module)."""

import sys
from pathlib import Path
from typing import Any

import httpx

from tests.carriers.bring_emulator import API_KEY, CUSTOMER_NUMBER, UID
from tests.processes import EmulatorProcess, free_port

EVENT_CAST_SECRET = "emulator-event-cast-secret-0123456789abcdef"
SECRET_HEADER = "X-Dealbroker-Event-Cast-Secret"


class BringEmulator(EmulatorProcess):
    name = "the Bring emulator"

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.spawn(
            [
                sys.executable,
                "-m",
                "tests.carriers.bring_emulator",
                str(self.port),
                str(workdir / "state"),
            ],
            workdir / "bring-emulator.log",
            lambda: httpx.get(f"{self.base}/_emulator/bookings", timeout=1).status_code == 200,
        )

    def settings(self, **extra: str) -> dict[str, str]:
        """The ``DEALBROKER_*`` variables of a server that ships with Bring through it."""
        return {
            "DEALBROKER_CARRIER": "bring",
            "DEALBROKER_BRING_API_UID": UID,
            "DEALBROKER_BRING_API_KEY": API_KEY,
            "DEALBROKER_BRING_CUSTOMER_NUMBER": CUSTOMER_NUMBER,
            "DEALBROKER_BRING_API_BASE": self.base,
            "DEALBROKER_BRING_EVENT_CAST_SECRET": EVENT_CAST_SECRET,
            "DEALBROKER_BRING_TEST_INDICATOR": "true",
            **extra,
        }

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        answer = httpx.post(f"{self.base}/_emulator/{path}", json=body, timeout=15)
        answer.raise_for_status()
        return answer.json()

    def fail(
        self,
        mode: str,
        count: int = 1,
        *,
        path: str = "/",
        retry_after: int = 1,
        hang_seconds: float = 5,
    ) -> None:
        """The next ``count`` requests under ``path`` fail: ``"429"`` (with ``Retry-After``),
        ``"500"``/``"502"``/``"503"``, ``"hang"`` (done, answered after ``hang_seconds``) or
        ``"huge"`` (a 3 MB answer)."""
        self._post(
            "fail",
            {
                "mode": mode,
                "count": count,
                "path": path,
                "retry_after": retry_after,
                "hang_seconds": hang_seconds,
            },
        )

    def push_to(self, url: str, secret: str = EVENT_CAST_SECRET) -> None:
        """Event Cast pushes to ``url`` with the header registered for our secret."""
        self._post("push-url", {"url": url, "header": SECRET_HEADER, "secret": secret})

    def event(
        self, number: str, status: str, *, signature: str = "good", push: bool = True, **fields: str
    ) -> dict[str, Any]:
        """A tracking event for a parcel (shipment, package or reference), pushed when a URL is
        registered: ``signature`` "good", "bad" (a wrong secret) or "none" (no header)."""
        answer: dict[str, Any] = self._post(
            "events",
            {"number": number, "status": status, "signature": signature, "push": push, **fields},
        )
        return answer

    def bookings(self, reference: str | None = None) -> list[dict[str, Any]]:
        params = {"reference": reference} if reference is not None else {}
        answer = httpx.get(f"{self.base}/_emulator/bookings", params=params, timeout=5)
        answer.raise_for_status()
        found: list[dict[str, Any]] = answer.json()["bookings"]
        return found

    def requests(self) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.base}/_emulator/requests", timeout=5)
        answer.raise_for_status()
        found: list[dict[str, Any]] = answer.json()["requests"]
        return found

    def reset(self) -> None:
        self._post("reset", {})
