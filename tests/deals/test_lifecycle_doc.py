"""docs/lifecycle.md says what the code does: its table of every transition is the lifecycle
table in ``deals/lifecycle.py``, row for row, and its table of what each party sees names every
status."""

import re
from pathlib import Path

from dealbroker.core.statuses import DealStatus
from dealbroker.deals.lifecycle import TRANSITIONS, Actor

DOC = Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md"


def _section(heading: str) -> str:
    text = DOC.read_text()
    start = text.index(heading)
    following = re.search(r"^#{2,3} ", text[start + len(heading) :], re.M)
    return text[start : start + len(heading) + (following.start() if following else len(text))]


def _rows(section: str) -> list[list[str]]:
    """The cells of each row of the section's first table, past its header and rule."""
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]


def _codes(cell: str) -> frozenset[str]:
    return frozenset(re.findall(r"`([^`]+)`", cell))


def test_the_transition_table_is_the_codes() -> None:
    documented = set()
    for sources, trigger, target, actors, effects in _rows(_section("### Every transition")):
        who = set(re.findall(r"[a-z]+", actors.replace("(and the sandbox)", "")))
        if "(and the sandbox)" in actors:
            who.add(Actor.SANDBOX.value)
        documented.add(
            (_codes(sources), _codes(trigger), _codes(target), frozenset(who), _codes(effects))
        )
    in_code = {
        (
            frozenset(s.value for s in t.sources),
            frozenset({t.trigger.value}),
            frozenset({t.target.value}),
            frozenset(a.value for a in t.actors),
            frozenset(e.value for e in t.effects),
        )
        for t in TRANSITIONS
    }
    assert documented == in_code
    assert len(_rows(_section("### Every transition"))) == len(TRANSITIONS)


def test_what_each_party_sees_names_every_status() -> None:
    rows = _rows(_section("## What each party sees, state by state"))
    named = set().union(*(_codes(row[0]) for row in rows))
    assert {s.value for s in DealStatus} <= named
    assert all(len(row) == 5 for row in rows)  # seller, buyer, integration, money
