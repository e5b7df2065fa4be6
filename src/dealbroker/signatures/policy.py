"""Which signatures a deployment takes: eID through an issuer (``DEALBROKER_EID_*``), or, where
the operator accepts it (and always in the sandbox), a typed name and a ticked box. Kept apart
from ``signatures.eid`` so the command line checks it before importing the OpenID client."""

from dealbroker.core.settings import Settings


def startup_problem(settings: Settings) -> str | None:
    """Why production may not start with these signature settings (one line), or None."""
    if settings.is_sandbox or settings.eid_enabled or settings.simple_signature:
        return None
    return (
        "production signs deals with eID: set DEALBROKER_EID_ISSUER and its client, or "
        "DEALBROKER_SIMPLE_SIGNATURE=true to accept signatures by typed name"
    )
