"""What in a message may lead a party off dealbroker before the deal is paid: a phone number,
an e-mail address, a link, or words about paying some other way (in Norwegian, Swedish or
English). The reader of such a message is warned: the money is only safe in the deal.

A warning is a nudge, not a filter: the message is shown whole (links never clickable), and
false alarms ("the frame is 56 cm, 2019 model", "pickup 12.12.2026 at 17:30") are kept rare by
asking for what a phone number or an account number looks like, not for any digits.

Linear time: the text is bounded before it gets here (``Settings.message_max_chars``), and no
pattern is searched for at every position of it with an unbounded repetition. Addresses and
links are looked for word by word (a split on white space and brackets), each word matched
from its start only and cut to ``LONGEST_WORD``; the patterns searched in the whole text repeat
a bounded number of times (a phone number's 8 to 15 digits) or are literal words.
"""

import re
from enum import StrEnum


class Warning(StrEnum):  # noqa: A001 - the domain's word
    PHONE = "phone"
    EMAIL = "email"
    LINK = "link"
    PAYMENT = "payment"


# Longer than any address or link a person types; the rest of such a word is not looked at.
LONGEST_WORD = 300
_WORDS = re.compile(r"[\s()<>\[\]{}\"'`,;|]+")
_EMAIL = re.compile(r"[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63})+\.?")
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]{1,15}:/", re.IGNORECASE)
# A name with dots and a top-level domain of letters, then a path: "evil.ru/pay". Any
# top-level domain with a path; without one, only those people here link to, so that "56.cm"
# or "e.g." raise nothing.
_HOST = re.compile(r"(?:[\w-]{1,63}\.){1,10}([a-z]{2,24})(/|:\d|\?|#)?", re.IGNORECASE)
_LINKED_TLDS = frozenset(
    "no se dk fi is com net org io me info biz link app shop ly co eu uk de nu site online".split()
)
# A run of 8 to 15 digits, allowing one space, dot or hyphen between groups and a leading "+"
# or "00": Norwegian (8 digits), Swedish (07x…, 10 digits) and international numbers, and the
# account numbers of bank transfers (Norway's 11 digits, Sweden's clearing and account number).
_NUMBER = re.compile(r"(?:\+|\b00)?\d(?:[ .\-]?\d){7,14}\b")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b")
# Dates (12.12.2026, 1/6-26) are how people agree a pickup: not phone numbers.
_DATE = re.compile(r"\b\d{1,4}[./-]\d{1,2}[./-]\d{1,4}\b")
# Paying outside the deal, as people write it; whole words, any white space between them.
_PAYMENT_WORDS = (
    # English
    "bank transfer",
    "wire transfer",
    "by transfer",
    "via transfer",
    "transfer the money",
    "transfer it",
    "pay me directly",
    "pay directly",
    "pay outside",
    "pay in cash",
    "account number",
    "sort code",
    "iban",
    "paypal",
    "western union",
    "revolut",
    "cash app",
    "vipps me",
    "swish me",
    "on vipps",
    "on swish",
    "by vipps",
    "by swish",
    # Norwegian
    "bankoverføring",
    "kontonummer",
    "kontonr",
    "betal direkte",
    "betale direkte",
    "vipps meg",
    "vipps til",
    "på vipps",
    "med vipps",
    "betal utenom",
    "utenom dealbroker",
    # Swedish
    "banköverföring",
    "clearingnummer",
    "bankgiro",
    "plusgiro",
    "betala direkt",
    "swish till",
    "swishnummer",
    "på swish",
    "med swish",
    "betala utanför",
    "utanför dealbroker",
)
# Stems that take endings ("overføre", "överföring", "swishar", "vippser").
_PAYMENT_STEMS = ("overfør", "överför", "vippse", "swisha")
_PAYMENT = re.compile(
    r"\b(?:"
    + "|".join(re.escape(w) for w in _PAYMENT_STEMS)
    + r"|(?:"
    + "|".join(r"\s+".join(re.escape(p) for p in w.split()) for w in _PAYMENT_WORDS)
    + r")\b"
    # "vipps 500 til meg", "swisha 300": the app's name and an amount or a number.
    + r"|(?:vipps|swish)\s+(?:\w+\s+)?\d"
    + r")"
)


def _is_link(word: str) -> bool:
    if word.lower().startswith("www.") or _SCHEME.match(word):
        return True
    host = _HOST.match(word)
    if host is None:
        return False
    if host.group(2) is not None:  # a path, a port or a query: "evil.ru/pay"
        return True
    # A bare name: the whole word (closing punctuation aside), at a domain people link to.
    return host.end() == len(word.rstrip(".!?:")) and host.group(1).lower() in _LINKED_TLDS


def found(text: str) -> list[Warning]:
    """The warnings ``text`` calls for, in a fixed order (none: an empty list)."""
    kinds: list[Warning] = []
    if _NUMBER.search(_DATE.sub(" ", text)):
        kinds.append(Warning.PHONE)
    words = [w[:LONGEST_WORD] for w in _WORDS.split(text) if w]
    if any("@" in w and _EMAIL.match(w) for w in words):
        kinds.append(Warning.EMAIL)
    if any(_is_link(w) for w in words if "@" not in w):
        kinds.append(Warning.LINK)
    if _PAYMENT.search(text.lower()) or _IBAN.search(text):
        kinds.append(Warning.PAYMENT)
    return kinds
