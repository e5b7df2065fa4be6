"""Finding English words left on a page meant for another language."""

import re
from html.parser import HTMLParser

# Words of English sentences that are no Norwegian or Swedish word (nor a name on these pages).
ENGLISH = frozenset(
    "the is are was were has have been cannot can't not your you this that with and must "
    "will would should which what when where there their of from into than deal "
    "payment offer item seller buyer please try again".split()
)


WORD = re.compile(r"[A-Za-z']+")


def english_in(page: str) -> list[str]:
    """The pieces of ``page``'s text that read as English."""
    reader = _Text()
    reader.feed(page)
    found = []
    for part in reader.parts:
        if part in ALLOWED:
            continue
        part = part.replace(SIMULATED_REASON, "")
        words = {w.lower() for w in WORD.findall(part)}
        if len(words & ENGLISH) >= 2 or (len(words) <= 3 and words & ENGLISH == words and words):
            found.append(part)
    return found


# Text that is English by design: the language switch names each language in its own words;
# the sandbox's simulated buyer writes its dispute reason in English (a person's own words are
# shown as typed).
SIMULATED_REASON = "Sandbox: the buyer denied the item (simulated)."
ALLOWED = {"English", f"“{SIMULATED_REASON}”"}


class _Text(HTMLParser):
    """The text a person reads: text nodes outside script and style, and the attributes a
    screen reader or a hover says aloud."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        for name, value in attrs:
            if name in ("placeholder", "aria-label", "title", "alt") and value:
                self.parts.append(value)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip and data.strip():
            self.parts.append(data.strip())
