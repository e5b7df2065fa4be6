"""docs/configuration.md's settings and docs/cli.md's commands are generated from the code
(``dealbroker.docs``): the committed files must be what the code generates now. And every link
between the repository's Markdown files leads to a file, and to a heading there."""

import re
import subprocess
from pathlib import Path

from dealbroker import docs


def test_the_generated_references_are_current():
    stale = [path.name for path in docs.stale()]
    assert not stale, f"docs/{', docs/'.join(stale)} stale: run `{docs.COMMAND}` and commit"


def test_every_setting_has_a_description():
    from dealbroker.core.settings import Settings

    assert [name for name, field in Settings.model_fields.items() if not field.description] == []


def test_a_stale_reference_is_found(tmp_path):
    for name in docs.GENERATED:
        text = (docs.DOCS / name).read_text()
        (tmp_path / name).write_text(text.replace(docs.END, f"An edit by hand.\n{docs.END}"))
    assert sorted(path.name for path in docs.stale(tmp_path)) == sorted(docs.GENERATED)


ROOT = docs.DOCS.parent
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _markdown() -> list[Path]:
    tracked = subprocess.run(
        ["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [ROOT / name for name in tracked.stdout.split()]


def _outside_code(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def _anchors(path: Path) -> set[str]:
    """GitHub's ids for a Markdown file's headings."""
    headings = re.findall(r"^#{1,6} (.+)$", _outside_code(path.read_text()), re.M)
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings
    }


def test_every_link_between_the_docs_leads_somewhere():
    broken = []
    for path in _markdown():
        for target in LINK.findall(_outside_code(path.read_text())):
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []
