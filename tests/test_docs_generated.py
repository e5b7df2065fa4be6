"""docs/configuration.md's settings and docs/cli.md's commands are generated from the code
(``dealbroker.docs``): the committed files must be what the code generates now."""

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
