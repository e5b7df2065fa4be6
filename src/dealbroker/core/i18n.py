"""The words of the pages and of the messages, in the reader's language.

The texts are written in English in the code and templates (``_("...")``, ``{% trans %}``);
their Norwegian Bokmål and Swedish translations are gettext catalogs managed with Babel, in
``dealbroker/locale/<locale>/LC_MESSAGES/messages.po`` (docs/architecture.md says how to
extract and update them). The catalogs are compiled in memory when first used, so no build step stands
between a catalog and the running service.

The language is chosen per unit of work, not passed around: a page request sets it from the
page's locale (``web.locale``), a message to a party sets it to that party's locale while it is
worded (``using``). Anything else (the API, logs, the CLI) reads English.
"""

import gettext as _gettext
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from functools import cache
from io import BytesIO
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo

from babel.dates import format_date, format_time, get_datetime_format, get_timezone_name
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.support import Translations

# The languages we write, each with its name in itself, in the order the switch lists them;
# English is the code's own.
LOCALES = {"nb": "Norsk bokmål", "sv": "Svenska", "en": "English"}
SOURCE = "en"
CATALOGS = Path(__file__).parent.parent / "locale"

_current: ContextVar[str] = ContextVar("locale", default=SOURCE)


def current() -> str:
    """The locale the words being written now are in."""
    return _current.get()


@contextmanager
def using(locale: str) -> Iterator[None]:
    """Write in ``locale`` (one of ``LOCALES``, else English) within the block."""
    token = _current.set(locale if locale in LOCALES else SOURCE)
    try:
        yield
    finally:
        _current.reset(token)


def use(locale: str) -> None:
    """Write in ``locale`` for the rest of this context (a request's task)."""
    _current.set(locale if locale in LOCALES else SOURCE)


@cache
def translations(locale: str) -> _gettext.NullTranslations:
    """The compiled catalog of ``locale``; English is the source and needs none."""
    if locale == SOURCE or locale not in LOCALES:
        return _gettext.NullTranslations()
    with (CATALOGS / locale / "LC_MESSAGES" / "messages.po").open("rb") as po:
        catalog = read_po(po, locale=locale)
    compiled = BytesIO()
    write_mo(compiled, catalog, use_fuzzy=False)
    compiled.seek(0)
    return Translations(compiled)


def load() -> None:
    """Compile every catalog now (a process's start), so no request waits for it."""
    for locale in LOCALES:
        translations(locale)


def gettext(message: str) -> str:
    """``message`` in the current locale."""
    return translations(current()).gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    return translations(current()).ngettext(singular, plural, n)


_ = gettext


def N_(message: str) -> str:  # noqa: N802 (gettext's name for "translated later")
    """Mark ``message`` for the catalogs where it is defined (a module's table); it is
    translated where it is used, with ``_``."""
    return message


def when(moment: datetime, zone: ZoneInfo, width: Literal["full", "long"] = "full") -> str:
    """A moment as a person reads a deadline, in the current locale: the local date (``width``:
    "full" with the weekday, or "long") and the time in hours and minutes, with the zone's name
    as that language says it, e.g. "mandag 30. november 2026, 14:05 (sentraleuropeisk tid)" (a
    person never reads the zone's database name, "Europe/Oslo": a Swedish reader of a Norwegian
    deployment reads "centraleuropeisk tid")."""
    locale, local = current(), moment.astimezone(zone)
    pattern = str(get_datetime_format(width, locale=locale)).replace("'", "")
    written = pattern.replace("{1}", format_date(local, width, locale=locale)).replace(
        "{0}", format_time(local, "short", locale=locale)
    )
    named = (
        get_timezone_name(zone, "long", zone_variant="generic", locale=locale)
        if "/" in zone.key and not zone.key.startswith("Etc/")
        else zone.key.removeprefix("Etc/")  # "UTC": CLDR names no region for it
    )
    return f"{written} ({named})"
