"""Business days: Monday to Friday, counted on the calendar of the deployment's time zone.

Public holidays are not known to the service (they differ by country and year): a decision
date may fall on one. docs/decisions/0023-dispute-decisions.md says why.
"""

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

SATURDAY = 5  # ``date.weekday()``: Monday is 0


def business_days_after(moment: datetime, days: int, zone: ZoneInfo) -> datetime:
    """The moment ``days`` business days after ``moment``: the same wall-clock time in
    ``zone``, on the ``days``-th Monday-to-Friday date after ``moment``'s local date. A moment
    on a weekend counts from the Monday after it (Saturday 10:00 plus one business day is
    Monday 10:00, as is Friday 10:00 plus one). Returned in UTC's offset of ``moment``'s
    timezone-aware input; the wall-clock time is kept across a change of summer time."""
    if days < 0:
        raise ValueError("days must not be negative")
    if moment.tzinfo is None:
        raise ValueError("moment must be timezone-aware")
    local = moment.astimezone(zone)
    day = local.date()
    counted = 0
    while counted < days:
        day += timedelta(days=1)
        if day.weekday() < SATURDAY:
            counted += 1
    while day.weekday() >= SATURDAY:  # zero days from a weekend: the next Monday
        day += timedelta(days=1)
    wall = datetime.combine(day, local.time().replace(fold=0), tzinfo=zone)
    # A wall-clock time that does not exist that day (skipped by summer time) is read as the
    # same instant's offset before the change; zoneinfo does it, and the round trip settles it.
    return wall.astimezone(moment.tzinfo)
