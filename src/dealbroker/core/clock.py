"""The one source of time. Tests (and, later, the sandbox clock) replace it."""

from collections.abc import Callable
from datetime import UTC, datetime

_now: Callable[[], datetime] = lambda: datetime.now(UTC)  # noqa: E731


def now() -> datetime:
    """The current time, timezone-aware UTC."""
    return _now()


def set_clock(func: Callable[[], datetime]) -> None:
    """Replace the clock (tests only)."""
    global _now
    _now = func


def reset_clock() -> None:
    set_clock(lambda: datetime.now(UTC))


def to_millis(moment: datetime) -> int:
    """Milliseconds since the epoch, the interface's timestamp unit."""
    return int(moment.timestamp() * 1000)


def from_millis(millis: int) -> datetime:
    """The moment ``millis`` (milliseconds since the epoch) names, in UTC."""
    return datetime.fromtimestamp(millis / 1000, UTC)
