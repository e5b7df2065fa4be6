"""Payments knows no deal rules: no module of ``dealbroker.payments`` imports the deals or the
pages, neither by an import statement (at the top or inside a function) nor by loading a module
that does. The deals call payments; the provider's answers reach a deal through the settlement
handler (``dealbroker.settlement``), registered at startup."""

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

FORBIDDEN = ("dealbroker.deals", "dealbroker.web")
PACKAGE = "dealbroker.payments"


def _package_dir() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    assert spec is not None
    assert spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def _modules() -> list[tuple[str, Path]]:
    root = _package_dir()
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found.append((".".join([PACKAGE, *parts]), path))
    return found


def _imported(module: str, path: Path) -> set[str]:
    """Every module ``path`` names in an import, wherever in the file, relative ones resolved,
    and every literal handed to ``importlib.import_module`` or ``__import__``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if called in ("import_module", "__import__") and isinstance(first, ast.Constant):
                names.add(str(first.value))
    return names


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def test_the_walk_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The checker itself: each way of importing the deals is caught."""
    source = tmp_path / "sample.py"
    source.write_text(
        "import dealbroker.deals.flows\n"
        "from dealbroker.web import render\n"
        "def later():\n"
        "    from dealbroker.deals.models import Deal\n"
        "    import importlib\n"
        "    importlib.import_module('dealbroker.web.forms')\n"
        "from .. import deals\n",
        encoding="utf-8",
    )
    found = {n for n in _imported("dealbroker.payments.sample", source) if _forbidden(n)}
    assert found >= {
        "dealbroker.deals.flows",
        "dealbroker.web",
        "dealbroker.deals.models",
        "dealbroker.web.forms",
        "dealbroker.deals",
    }


def test_the_package_is_walked_whole() -> None:
    names = {name for name, _ in _modules()}
    assert {
        "dealbroker.payments.service",
        "dealbroker.payments.tasks",
        "dealbroker.payments.stripe_events",
        "dealbroker.payments.bank_file",
        "dealbroker.payments.reconciliation",
        "dealbroker.payments.escrow",
    } <= names


@pytest.mark.parametrize(("module", "path"), _modules(), ids=lambda v: str(v).rsplit(".")[-1])
def test_no_payments_module_imports_the_deals_or_the_pages(module: str, path: Path) -> None:
    bad = sorted(n for n in _imported(module, path) if _forbidden(n))
    assert not bad, f"{module} imports {bad}: pass the values in, or go through settlement"


def test_loading_payments_loads_neither_the_deals_nor_the_pages() -> None:
    """Nor through another package: every payments module is imported in a fresh interpreter,
    and no deal or page module may have been loaded with them."""
    modules = [name for name, _ in _modules()]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"print('\\n'.join(m for m in sys.modules if m.startswith({FORBIDDEN!r})))\n"
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
    assert done.stdout.split() == [], f"loaded with payments: {done.stdout.split()}"
