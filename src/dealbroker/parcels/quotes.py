"""The shipping price a buyer sees before offering Carrier: the carrier's quote for the deal's
package size from the seller's postcode.

One price per size and postcode for the whole country (a private seller's parcel services are
priced by size, not by distance), so the buyer's postcode, not known before the offer, is not
asked: the quote is from the seller's postcode to itself. The cheapest of the carrier's
services is the price. Quotes are kept in this process for ``TTL`` (a page and the offer it
sends name the same price, and the carrier is asked at most once per size and postcode in that
time), at most ``MAX_CACHED`` of them; a failure is not kept, the next page asks again.
"""

import time
from collections import OrderedDict

from dealbroker.carriers import registry
from dealbroker.carriers.base import CarrierRefused, PackageSize, Quote
from dealbroker.core.settings import Settings

TTL = 600.0  # seconds
MAX_CACHED = 1024
# A deal without a packageType is sent as a Medium parcel.
DEFAULT_SIZE = PackageSize.MEDIUM

# (carrier, size, postcode) -> (when it was quoted, on ``time.monotonic``; the quote)
_cache: OrderedDict[tuple[str, PackageSize, str], tuple[float, Quote]] = OrderedDict()


async def shipping_quote(
    settings: Settings, package_type: str | None, from_postcode: str | None
) -> Quote | None:
    """The cheapest quote for sending a ``package_type`` parcel (Medium when None) from
    ``from_postcode``; None when the deployment has no carrier (``DEALBROKER_CARRIER=none``).
    A carrier that cannot quote now raises its ``CarrierError`` (``CarrierUnavailable``,
    ``CarrierRefused``; a seller without a postcode is ``CarrierRefused("invalid_address")``):
    the caller shows the price as not available and leaves Pickup open."""
    carrier = registry.carrier_for(settings)
    if carrier is None:
        return None
    if not from_postcode or not from_postcode.strip():
        raise CarrierRefused("invalid_address", "the seller has no postcode", "sender.postcode")
    size = PackageSize(package_type) if package_type else DEFAULT_SIZE
    postcode = from_postcode.strip()
    key = (carrier.name, size, postcode)
    now = time.monotonic()
    cached = _cache.get(key)
    if cached is not None and now - cached[0] < TTL:
        return cached[1]
    quotes = await carrier.quote(size, postcode, postcode)
    if not quotes:
        raise CarrierRefused("route_not_served", f"{carrier.name} has no service for {size}")
    cheapest = min(quotes, key=lambda q: q.price_minor)
    _cache[key] = (now, cheapest)
    _cache.move_to_end(key)
    while len(_cache) > MAX_CACHED:
        _cache.popitem(last=False)
    return cheapest


def forget() -> None:
    """Drop every kept quote (a test that changes the carrier's prices)."""
    _cache.clear()
