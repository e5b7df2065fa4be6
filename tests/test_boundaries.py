"""Packages point one way. The table of which package may import which is `[tool.importlinter]`
in pyproject.toml, checked here by import-linter on every import statement of every module
(those inside a function too); docs/architecture.md draws it, and a stale picture fails here."""

import logging
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import grimp
import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parent.parent
PICTURE = ROOT / "docs" / "architecture.md"


def _contracts() -> dict[str, dict[str, Any]]:
    table = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["id"]: c for c in table["tool"]["importlinter"]["contracts"]}


def _layers() -> list[tuple[str, list[str]]]:
    """Each layer, top first, as its separator (`|` independent, `:` a knot) and packages."""
    found = []
    for layer in _contracts()["layers"]["layers"]:
        separator = ":" if ":" in layer else "|"
        found.append((separator, [p.strip() for p in layer.split(separator)]))
    return found


def mermaid() -> str:
    """The picture of the table, as docs/architecture.md shows it."""
    lines = [
        "flowchart TB",
        "    %% Drawn from [tool.importlinter] in pyproject.toml by tests/test_boundaries.py.",
    ]
    layers = _layers()
    for number, (separator, packages) in enumerate(layers):
        title = "a knot, to untie" if separator == ":" and len(packages) > 1 else " "
        lines.append(f'    subgraph L{number}["{title}"]')
        lines.append("        direction LR")
        lines += [f'        {_node(p)}["{p}"]' for p in packages]
        lines.append("    end")
    lines += [f"    L{n} --> L{n + 1}" for n in range(len(layers) - 1)]
    for rule in _contracts()["acyclic"].get("ignore_imports", []):
        importer, imported = (_package(side) for side in rule.split("->"))
        lines.append(f"    {_node(importer)} -.-> {_node(imported)}")
    return "\n".join(lines) + "\n"


def _node(package: str) -> str:
    return "p_" + package.strip("_")


def _package(expression: str) -> str:
    return expression.strip().split(".")[1]


def test_the_table_holds(capsys: pytest.CaptureFixture[str]) -> None:
    """Every package has its layer and imports only the layers below it; pages and commands
    import no repository; no cycle joins two packages but those listed, to be untied."""
    # import-linter's command configures logging with ``dictConfig``, which turns off every
    # logger already made in this process: the other tests' loggers are put back as they were.
    loggers = [
        logger
        for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    ]
    was = [logger.disabled for logger in loggers]
    try:
        failed = lint_imports(str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    finally:
        for logger, disabled in zip(loggers, was, strict=True):
            logger.disabled = disabled
    report = capsys.readouterr().out
    assert not failed, report
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in report, report


def test_the_picture_is_the_table() -> None:
    drawn = re.search(r"```mermaid\n(.*?)```", PICTURE.read_text(encoding="utf-8"), re.S)
    assert drawn is not None, "docs/architecture.md has no mermaid picture"
    assert drawn.group(1) == mermaid(), f"paste this into docs/architecture.md:\n{mermaid()}"


def test_every_package_is_in_the_table() -> None:
    listed = {p for _, packages in _layers() for p in packages}
    children = {m.rsplit(".", 1)[1] for m in _graph().find_children("dealbroker")}
    assert children == listed


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """What the contracts read: an import at the top, a relative one and one inside a
    function all count."""
    package = tmp_path / "sample"
    (package / "low").mkdir(parents=True)
    (package / "high").mkdir()
    for path in ("__init__.py", "low/__init__.py", "high/__init__.py", "high/page.py"):
        (package / path).write_text("", encoding="utf-8")
    (package / "low" / "rows.py").write_text(
        textwrap.dedent(
            """
            import sample.high.page
            from ..high import page
            def later():
                from sample.high.page import x
            """
        ),
        encoding="utf-8",
    )
    sys.path.insert(0, str(tmp_path))
    try:
        graph = grimp.build_graph("sample", cache_dir=None)
    finally:
        sys.path.remove(str(tmp_path))
    lines = {
        detail["line_number"]
        for detail in graph.get_import_details(
            importer="sample.low.rows", imported="sample.high.page"
        )
    }
    assert lines == {2, 3, 5}


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("dealbroker", cache_dir=None)


# Loading a package loads nothing above it, through no path the table cannot see either: each
# is imported whole in a fresh interpreter (the rows the layering matters most for).
LOADED_ALONE = ["core", "events", "payments"]


@pytest.mark.parametrize("package", LOADED_ALONE)
def test_loading_a_package_loads_nothing_above_it(package: str) -> None:
    above = [f"dealbroker.{p}" for _, packages in _layers()[: _layer_of(package)] for p in packages]
    modules = sorted(m for m in _graph().modules if m.startswith(f"dealbroker.{package}"))
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"above = {tuple(above)!r}\n"
        "print('\\n'.join(m for m in sys.modules if m.startswith(above)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [], f"loaded with {package}: {done.stdout.split()}"


def _layer_of(package: str) -> int:
    return next(n for n, (_, packages) in enumerate(_layers()) if package in packages)


if __name__ == "__main__":
    sys.stdout.write(mermaid())
