"""The catalogs: every text the code and templates mark is translated, in both languages."""

import re
from pathlib import Path

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.frontend import parse_mapping_cfg
from babel.messages.pofile import read_po

from dealbroker.core import i18n

ROOT = Path(__file__).parents[2]


def marked() -> set[str]:
    """Every message id the sources mark, extracted as ``pybabel extract -F babel.cfg`` does."""
    with (ROOT / "babel.cfg").open() as cfg:
        method_map, options_map = parse_mapping_cfg(cfg)
    found = set()
    for _file, _line, message, _comments, _context in extract_from_dir(
        ROOT, method_map, options_map
    ):
        found.add(message if isinstance(message, str) else message[0])
    return found


@pytest.fixture(scope="module")
def ids() -> set[str]:
    return marked()


@pytest.mark.parametrize("locale", ["nb", "sv"])
def test_every_marked_text_is_translated_and_nothing_is_left_over(ids, locale):
    with (i18n.CATALOGS / locale / "LC_MESSAGES" / "messages.po").open("rb") as po:
        catalog = read_po(po, locale=locale)
    # A plural text is keyed by its singular, as ``marked`` lists it.
    entries = {(m.id if isinstance(m.id, str) else m.id[0]): m for m in catalog if m.id}
    assert sorted(ids - set(entries)) == [], "not in the catalog: run pybabel extract/update"
    assert sorted(set(entries) - ids) == [], "no longer marked: run pybabel update"
    assert [m.id for m in entries.values() if not m.string or not all(m.string)] == []
    assert [m.id for m in entries.values() if m.fuzzy] == []
    # The placeholders of each translation are those of its text (Babel's own check).
    assert [(m.id, errors) for m, errors in catalog.check()] == []


def test_english_is_the_code_itself_and_an_unknown_locale_reads_english():
    with i18n.using("en"):
        assert i18n.gettext("Draft") == "Draft"
    with i18n.using("xx"):
        assert i18n.current() == "en"
    with i18n.using("nb"):
        assert i18n.gettext("Draft") != "Draft"
        assert i18n.gettext("a text no catalog has") == "a text no catalog has"
    assert i18n.current() == "en"  # the block's locale ends with it


# One word for one thing in each language: Bokmål allows "fram" and "frem", and the offer link's
# page had two names; a reader meets one of each.
ONE_WORD = {
    "nb": [(r"\bfrem\b", "fram"), (r"\btilbudssiden\b", "budsiden")],
    "sv": [(r"\banbudssidan\b", "budsidan")],
}


@pytest.mark.parametrize("locale", ["nb", "sv"])
def test_each_catalog_says_one_thing_one_way(locale):
    with (i18n.CATALOGS / locale / "LC_MESSAGES" / "messages.po").open("rb") as po:
        catalog = read_po(po, locale=locale)
    written = [m.string for m in catalog if m.id and isinstance(m.string, str)]
    for avoided, used in ONE_WORD[locale]:
        assert [s for s in written if re.search(avoided, s, re.I)] == [], f"say {used!r}"
