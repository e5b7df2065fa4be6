"""The page's locale: its words (``core.i18n``), and how its numbers, amounts and dates are
written.

Chosen per request: a ``?lang=`` link (the language switch on every page, remembered in the
``lang`` cookie), else the browser's ``Accept-Language``, else ``DEALBROKER_DEFAULT_LOCALE``.
"""

from babel.core import negotiate_locale
from fastapi import Request

from dealbroker.core.i18n import LOCALES

COOKIE = "lang"
# Babel's alias for the plain "no" some browsers send.
_ALIASES = {"nb-no": "nb"}


def page_locale(request: Request) -> str:
    """The locale of the page answering ``request``."""
    for chosen in (request.query_params.get("lang"), request.cookies.get(COOKIE)):
        if chosen in LOCALES:
            return chosen
    accepted = _accepted(request.headers.get("accept-language", ""))
    found = negotiate_locale(accepted, [*LOCALES, *_ALIASES], sep="-")
    if found is None:
        return str(request.app.state.settings.default_locale)
    found = found.lower()
    return _ALIASES.get(found, found.split("-")[0])


def _accepted(header: str) -> list[str]:
    """The languages of an ``Accept-Language`` header, most wanted first (``q=0`` left out)."""
    weighted: list[tuple[float, str]] = []
    for part in header.split(",")[:20]:
        tag, _, params = part.strip().partition(";")
        try:
            weight = float(params.strip().removeprefix("q=")) if params else 1.0
        except ValueError:
            continue
        if tag and tag != "*" and weight > 0:
            weighted.append((weight, tag.strip()))
    return [tag for _, tag in sorted(weighted, key=lambda item: -item[0])]


def switch_links(request: Request, page: str | None = None) -> list[tuple[str, str, str]]:
    """The language switch: (code, name, link) for each locale, each link this page (its form
    action left, or ``page``) with ``lang`` set."""
    path = page or request.url.path.split("/-/")[0]
    links = []
    for code, name in LOCALES.items():
        query = request.url.include_query_params(lang=code).query
        links.append((code, name, f"{path}?{query}"))
    return links
