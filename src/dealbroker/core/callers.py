"""Which integration made the request at hand, as its request log records it
(``integrations.request_log``): set in the request's scope by whatever authenticates it, read
by the log's middleware once the response has gone.

A request authenticated with a token (or a sandbox trigger's webhook secret) is its
integration's; a token request is the integration's whose client id it names, if any has it (a
made-up one is no one's). A request that names no one, such as one with a made-up token, is not
recorded.
"""

import uuid

from starlette.types import Scope

INTEGRATION = "caller_integration_id"
CLIENT_ID = "caller_client_id"


def identify(scope: Scope, integration_id: uuid.UUID) -> None:
    """The request at hand is this integration's."""
    scope.setdefault("state", {})[INTEGRATION] = integration_id


def identify_client(scope: Scope, client_id: str) -> None:
    """The request at hand names this client id (maybe made up)."""
    scope.setdefault("state", {})[CLIENT_ID] = client_id


def caller(scope: Scope) -> uuid.UUID | str | None:
    """The integration's id the request was authenticated as, else the client id it named."""
    state = scope.get("state")
    if not state:
        return None
    found: uuid.UUID | str | None = state.get(INTEGRATION) or state.get(CLIENT_ID)
    return found
