"""The page's locale: how dates are written in each, and how a browser's languages are read."""

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from dealbroker.core import i18n
from dealbroker.web.locale import _accepted

MOMENT = datetime(2026, 11, 30, 13, 21, tzinfo=UTC)


@pytest.mark.parametrize(
    ("locale", "written"),
    [
        ("nb", "mandag 30. november 2026, 14:21 (sentraleuropeisk tid)"),
        ("sv", "måndag 30 november 2026 14:21 (centraleuropeisk tid)"),
        ("en", "Monday, November 30, 2026, 2:21\u202fPM (Central European Time)"),
    ],
)
def test_a_deadline_is_written_as_the_locale_does_in_the_deployments_zone(locale, written):
    with i18n.using(locale):
        assert i18n.when(MOMENT, ZoneInfo("Europe/Oslo")) == written


def test_a_deadline_names_its_zone_as_the_reader_says_it():
    """Never the zone's database name ("Europe/Oslo"), which a Swedish reader of a Norwegian
    deployment would read as Norwegian time, and nobody says."""
    with i18n.using("sv"):
        assert i18n.when(MOMENT, ZoneInfo("Europe/Stockholm")).endswith(
            "14:21 (centraleuropeisk tid)"
        )
        assert i18n.when(MOMENT, ZoneInfo("America/New_York")).endswith(
            "08:21 (östnordamerikansk tid)"
        )
        assert i18n.when(MOMENT, ZoneInfo("UTC")).endswith("13:21 (UTC)")


@pytest.mark.parametrize(
    ("header", "languages"),
    [
        ("", []),
        ("sv-SE,sv;q=0.9,en;q=0.8", ["sv-SE", "sv", "en"]),
        ("en;q=0.5, nb", ["nb", "en"]),
        ("*, de;q=0, fr;q=x", []),
    ],
)
def test_accept_language_is_read_most_wanted_first(header, languages):
    assert _accepted(header) == languages
