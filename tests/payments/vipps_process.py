"""The Vipps MobilePay emulator (``tests.payments.vipps_emulator``) as its own process on a free
loopback port, with methods for its control endpoints (documented in that module)."""

import sys
from pathlib import Path
from typing import Any

import httpx

from tests.payments.vipps_emulator import (
    CLIENT_ID,
    CLIENT_SECRET,
    MSN,
    SUBSCRIPTION_KEY,
    WEBHOOK_SECRET,
)
from tests.processes import EmulatorProcess, free_port


class VippsEmulator(EmulatorProcess):
    name = "the Vipps emulator"

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.spawn(
            [sys.executable, "-m", "tests.payments.vipps_emulator", str(self.port)],
            workdir / "vipps-emulator.log",
            lambda: httpx.get(f"{self.base}/_emulator/payments", timeout=1).status_code == 200,
        )

    def settings(self, **extra: str) -> dict[str, str]:
        """The ``DEALBROKER_*`` variables of a server whose Vipps payments go through it."""
        return {
            "DEALBROKER_CURRENCY": "NOK",
            "DEALBROKER_VIPPS_CLIENT_ID": CLIENT_ID,
            "DEALBROKER_VIPPS_CLIENT_SECRET": CLIENT_SECRET,
            "DEALBROKER_VIPPS_SUBSCRIPTION_KEY": SUBSCRIPTION_KEY,
            "DEALBROKER_VIPPS_MERCHANT_SERIAL_NUMBER": MSN,
            "DEALBROKER_VIPPS_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "DEALBROKER_VIPPS_API_BASE": self.base,
            **extra,
        }

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        answer = httpx.post(f"{self.base}/_emulator/{path}", json=body, timeout=15)
        answer.raise_for_status()
        return answer.json()

    def webhook_to(self, url: str, secret: str = WEBHOOK_SECRET) -> None:
        self._post("webhook", {"url": url, "secret": secret})

    def decide(self, reference: str, action: str, method: str = "WALLET") -> dict[str, Any]:
        answer: dict[str, Any] = self._post(
            "decide", {"reference": reference, "action": action, "method": method}
        )
        return answer

    def send(self, reference: str, name: str, signature: str = "good") -> int | None:
        status: int | None = self._post(
            "send", {"reference": reference, "name": name, "signature": signature}
        )["status"]
        return status

    def fail(
        self,
        mode: str,
        count: int = 1,
        *,
        path: str = "/",
        retry_after: int = 1,
        hang_seconds: float = 5,
    ) -> None:
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

    def reset_failures(self) -> None:
        """Forget the failures asked for that have not happened yet (the payments stay)."""
        self._post("fail", {"mode": "500", "count": 0, "clear": True})

    def payments(self) -> dict[str, Any]:
        answer = httpx.get(f"{self.base}/_emulator/payments", timeout=5)
        answer.raise_for_status()
        found: dict[str, Any] = answer.json()
        return found

    def payment(self, reference: str) -> dict[str, Any]:
        found: dict[str, Any] = self.payments()["payments"][reference]
        return found

    def close_date(self, day: str) -> None:
        """Vipps closes the ledger date ``day`` (yyyy-mm-dd): its report no longer says
        ``tryLater``."""
        self._post("close", {"date": day})

    def ledger(self) -> dict[str, Any]:
        """The funds ledger's ``entries``, and how many ``report_pages`` were served."""
        answer = httpx.get(f"{self.base}/_emulator/ledger", timeout=5)
        answer.raise_for_status()
        found: dict[str, Any] = answer.json()
        return found

    def reset(self) -> None:
        self._post("reset", {})
