"""localstripe, the Stripe emulator, as a real process on a loopback port, and the signing of
a webhook body with the documented Stripe-Signature scheme (to deliver an event again).

localstripe is started through its own aiohttp application, bound to 127.0.0.1 (its command
line listens on every interface). It keeps its objects in memory (and pickles them to a file
in the temporary directory after each change, which is never read back: ``flush`` empties the
store between tests). It sends its webhooks one second after the change, signed with the secret
registered at ``/_config/webhooks/<name>``.
"""

import hashlib
import hmac
import sys
import time
from pathlib import Path

import httpx

from tests.processes import EmulatorProcess, free_port

LAUNCH = (
    "import sys; from aiohttp import web; from localstripe.server import app; "
    "web.run_app(app, host='127.0.0.1', port=int(sys.argv[1]), print=None)"
)
SECRET_KEY = "sk_test_dealbroker"
PUBLISHABLE_KEY = "pk_test_dealbroker"
WEBHOOK_SECRET = "whsec_dealbroker_tests"


class LocalStripe(EmulatorProcess):
    name = "localstripe"

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.spawn(
            [sys.executable, "-c", LAUNCH, str(self.port)],
            workdir / "localstripe.log",
            lambda: httpx.get(self.js_url, timeout=1).status_code == 200,
            cwd=workdir,
        )

    @property
    def js_url(self) -> str:
        """Where localstripe serves its replacement of Stripe.js."""
        return f"{self.base}/js.stripe.com/v3/"

    def settings(self) -> dict[str, str]:
        """The ``DEALBROKER_*`` variables of a server that takes payments through it."""
        return {
            "DEALBROKER_PAYMENT_PROVIDER": "stripe",
            "DEALBROKER_STRIPE_SECRET_KEY": SECRET_KEY,
            "DEALBROKER_STRIPE_PUBLISHABLE_KEY": PUBLISHABLE_KEY,
            "DEALBROKER_STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "DEALBROKER_STRIPE_API_BASE": self.base,
            "DEALBROKER_STRIPE_JS_URL": self.js_url,
        }

    def send_webhooks_to(self, url: str) -> None:
        answer = httpx.post(
            f"{self.base}/_config/webhooks/dealbroker",
            json={"url": url, "secret": WEBHOOK_SECRET},
            timeout=5,
        )
        answer.raise_for_status()

    def flush(self) -> None:
        httpx.delete(f"{self.base}/_config/data", timeout=5).raise_for_status()


def signature(body: bytes, secret: str = WEBHOOK_SECRET, at: int | None = None) -> str:
    """A ``Stripe-Signature`` header for ``body``: ``t=<unix time>,v1=<hex HMAC-SHA256 of
    "<t>.<body>" keyed with the endpoint's secret>``, as Stripe documents it."""
    timestamp = int(time.time()) if at is None else at
    signed = f"{timestamp}.".encode() + body
    mac = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"
