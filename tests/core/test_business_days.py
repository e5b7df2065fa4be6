"""Business days: Monday to Friday on the deployment's calendar, the wall-clock time kept."""

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from dealbroker.core.business_days import business_days_after
from dealbroker.core.settings import Settings
from dealbroker.deals.flows import decision_date

OSLO = ZoneInfo("Europe/Oslo")


def oslo(*args: int) -> datetime:
    return datetime(*args, tzinfo=OSLO)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("opened", "days", "decided"),
    [
        # Monday + 5: the Monday after.
        (oslo(2026, 11, 23, 14, 5), 5, oslo(2026, 11, 30, 14, 5)),
        # Wednesday + 1: Thursday; Friday + 1: Monday.
        (oslo(2026, 11, 25, 9, 0), 1, oslo(2026, 11, 26, 9, 0)),
        (oslo(2026, 11, 27, 9, 0), 1, oslo(2026, 11, 30, 9, 0)),
        # Thursday + 3 skips the weekend: Tuesday.
        (oslo(2026, 11, 26, 16, 30), 3, oslo(2026, 12, 1, 16, 30)),
        # A dispute opened on a weekend counts from the Monday: Saturday + 1 is Monday, + 5 the
        # Friday, as from the Friday before.
        (oslo(2026, 11, 28, 10, 0), 1, oslo(2026, 11, 30, 10, 0)),
        (oslo(2026, 11, 29, 23, 59), 5, oslo(2026, 12, 4, 23, 59)),
        (oslo(2026, 11, 27, 10, 0), 5, oslo(2026, 12, 4, 10, 0)),
        # Zero days from a weekend: the Monday; from a weekday: that moment.
        (oslo(2026, 11, 28, 10, 0), 0, oslo(2026, 11, 30, 10, 0)),
        (oslo(2026, 11, 26, 10, 0), 0, oslo(2026, 11, 26, 10, 0)),
        # Ten days are two whole weeks.
        (oslo(2026, 11, 24, 8, 0), 10, oslo(2026, 12, 8, 8, 0)),
    ],
)
def test_weekends_are_not_counted(opened, days, decided):
    assert business_days_after(opened, days, OSLO) == decided
    assert business_days_after(opened, days, OSLO).weekday() < 5


def test_the_day_is_the_deployments_not_utcs():
    """Friday 23:30 UTC is already Saturday in Oslo: the count starts from that Saturday (so
    from the Monday), not from UTC's Friday."""
    friday_night = datetime(2026, 11, 27, 23, 30, tzinfo=UTC)
    decided = business_days_after(friday_night, 1, OSLO)
    assert decided.astimezone(OSLO) == oslo(2026, 11, 30, 0, 30)
    # Counted on UTC's calendar instead it is Monday 23:30 UTC: a different moment.
    assert business_days_after(friday_night, 1, ZoneInfo("UTC")) == datetime(
        2026, 11, 30, 23, 30, tzinfo=UTC
    )
    # And in a zone west of UTC, Friday 23:30 UTC is still Friday: one day on is Monday.
    new_york = ZoneInfo("America/New_York")
    assert business_days_after(friday_night, 1, new_york).astimezone(new_york) == datetime(
        2026, 11, 30, 18, 30, tzinfo=new_york
    )


def test_the_wall_clock_time_is_kept_across_summer_time():
    """Oslo leaves summer time on Sunday 25 October 2026: a dispute opened at 14:00 on the
    Friday before is decided at 14:00 on the next Friday, 169 hours later, not 168."""
    opened = oslo(2026, 10, 23, 14, 0)
    decided = business_days_after(opened.astimezone(UTC), 5, OSLO)
    assert decided.astimezone(OSLO).replace(tzinfo=None) == datetime(2026, 10, 30, 14, 0)
    assert decided - opened == timedelta(hours=7 * 24 + 1)
    # Into summer time (29 March 2026): 167 hours.
    spring = business_days_after(oslo(2026, 3, 27, 14, 0), 5, OSLO)
    assert spring.astimezone(OSLO).replace(tzinfo=None) == datetime(2026, 4, 3, 14, 0)
    elapsed = spring.astimezone(UTC) - oslo(2026, 3, 27, 14, 0).astimezone(UTC)
    assert elapsed == timedelta(hours=7 * 24 - 1)


def test_the_answer_keeps_the_given_offset():
    opened = datetime(2026, 11, 26, 12, 0, tzinfo=timezone(timedelta(hours=1)))
    decided = business_days_after(opened, 1, OSLO)
    assert decided.utcoffset() == timedelta(hours=1)
    assert decided == opened + timedelta(days=1)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="negative"):
        business_days_after(oslo(2026, 11, 26, 12, 0), -1, OSLO)
    with pytest.raises(ValueError, match="timezone-aware"):
        business_days_after(datetime(2026, 11, 26, 12, 0), 1, OSLO)


def test_the_decision_date_follows_the_settings():
    settings = Settings(
        database_url="sqlite://", dispute_decision_business_days=2, time_zone="Europe/Stockholm"
    )
    friday = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
    assert decision_date(friday, settings) == datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    assert Settings(database_url="sqlite://").dispute_decision_business_days == 5
    with pytest.raises(ValueError, match="dispute_decision_business_days"):
        Settings(database_url="sqlite://", dispute_decision_business_days=0)
