"""Failed token requests: guessing a client's secret is slowed, and cannot lock its owner out.

Every token request is counted before its secret is checked, and given back once the secret
proves right: only failures stay counted, and requests sent at once are counted as they
arrive, not as their answers leave (a burst cannot slip past the limit by being checked before
any of it failed). Two counts a minute, in the rate limiter (``core.ratelimit``, shared by the
server processes on PostgreSQL):

- per client id and source address (``DEALBROKER_RATE_LIMIT_TOKEN_FAILURES_PER_MINUTE``, 20):
  a guesser at one address is stopped there; the owner, asking from another, is not.
- per client id from every address (``..._TOKEN_FAILURES_PER_CLIENT_PER_MINUTE``, 200): bounds
  a guesser with many addresses. An address that got a token for that client id in the last
  ``KNOWN_SOURCE_SECONDS`` (remembered by each server process) is exempt, so even such a flood
  does not stop an owner asking from where it asked before.

A client id that does not exist is counted as one that does, so the limits reveal nothing.
"""

import time
from collections import OrderedDict
from dataclasses import dataclass

from dealbroker.auth.service import OAuthError
from dealbroker.core.ratelimit import RateLimiter

KNOWN_SOURCE_SECONDS = 24 * 3600
MAX_KNOWN_SOURCES = 10_000


class Refused(OAuthError):
    """A token request refused by the failure limit ``limit`` (the rate limiter's name)."""

    def __init__(self, limit: str, wait: int) -> None:
        # Refused before the secret is checked: a guess made now teaches nothing.
        super().__init__(
            429,
            "temporarily_unavailable",
            f"Too many failed attempts for this client; try again in {wait} seconds.",
            retry_after=wait,
        )
        self.limit = limit


@dataclass
class Attempt:
    """A token request counted as a failure until ``succeeded`` says otherwise."""

    guard: "TokenGuard"
    client_id: str
    source: str
    keys: list[str]

    def succeeded(self) -> None:
        """The secret was right: uncount the attempt, and know this address for the client."""
        self.not_a_guess()
        self.guard.remember(self.client_id, self.source)

    def not_a_guess(self) -> None:
        """The request failed for another reason than its credentials: uncount it."""
        for key in self.keys:
            self.guard.limiter.give_back(key)
        self.keys = []


class TokenGuard:
    """The failure limits of ``POST /oauth2/token`` (one per server process)."""

    def __init__(self, limiter: RateLimiter) -> None:
        self.limiter = limiter
        self._known: OrderedDict[tuple[str, str], float] = OrderedDict()

    def remember(self, client_id: str, source: str, now: float | None = None) -> None:
        self._known[(client_id, source)] = time.time() if now is None else now
        self._known.move_to_end((client_id, source))
        if len(self._known) > MAX_KNOWN_SOURCES:
            self._known.popitem(last=False)

    def is_known(self, client_id: str, source: str, now: float | None = None) -> bool:
        """Whether ``source`` got a token for ``client_id`` lately (from this process)."""
        seen = self._known.get((client_id, source))
        now = time.time() if now is None else now
        return seen is not None and now - seen < KNOWN_SOURCE_SECONDS

    async def admit(self, client_id: str, source: str, per_source: int, per_client: int) -> Attempt:
        """Count an attempt of ``client_id`` from ``source``; ``Refused`` (429 with
        ``retry_after``) if either limit is reached this minute."""
        pair = f"token-failures:{client_id}@{source}"
        wait = await self.limiter.take("token_failures", pair, per_source)
        if wait is not None:
            raise Refused("token_failures", wait)
        attempt = Attempt(self, client_id, source, [pair])
        if self.is_known(client_id, source):
            return attempt
        everyone = f"token-failures:{client_id}"
        wait = await self.limiter.take("token_failures_client", everyone, per_client)
        if wait is not None:
            attempt.not_a_guess()
            raise Refused("token_failures_client", wait)
        attempt.keys.append(everyone)
        return attempt
