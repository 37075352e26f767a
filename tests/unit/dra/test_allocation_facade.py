"""The allocator package is used through its facade, and its modules share no private names.

import-linter holds the facade for ``usher`` itself (a ``protected`` contract in pyproject.toml);
these tests hold it for the tests, the benchmarks and the e2e suite too, and check what the
contract cannot see: names with a leading underscore imported from another module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import usher.core.dra.allocation as facade

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = "usher.core.dra.allocation"


def python_files(*folders: str) -> Iterator[Path]:
    for folder in folders:
        yield from sorted((ROOT / folder).rglob("*.py"))


def imported_modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            yield node.lineno, node.module
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)


def test_every_public_name_of_the_facade_is_there_once_and_in_order() -> None:
    assert len(set(facade.__all__)) == len(facade.__all__)
    assert facade.__all__ == sorted(facade.__all__, key=lambda name: (not name.isupper(), name))
    for name in facade.__all__:
        assert getattr(facade, name, None) is not None, name


def test_nothing_outside_the_package_imports_its_modules() -> None:
    internals = {f"{PACKAGE}.{path.stem}" for path in (ROOT / "operator/usher/core/dra/allocation").glob("[!_]*.py")}
    outside: list[str] = []
    for path in python_files("operator", "tests", "bench", "e2e"):
        if path.parent == ROOT / "operator/usher/core/dra/allocation":
            continue
        for line, module in imported_modules(ast.parse(path.read_text(), str(path))):
            if module in internals or any(module.startswith(f"{internal}.") for internal in internals):
                outside.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    assert outside == [], "import from usher.core.dra.allocation instead"


def private_names_from_other_modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``from usher... import _name``, and ``module._name`` on a module imported from usher."""
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("usher"):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    yield node.lineno, f"{node.module}.{alias.name}"
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update(alias.asname or alias.name.partition(".")[0] for alias in node.names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in modules:
                yield node.lineno, ast.unparse(node)


@pytest.mark.parametrize("folder", ["operator/usher/core/dra", "operator/usher/core/plugins/dynamicresources"])
def test_no_module_uses_another_modules_private_names(folder: str) -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in python_files(folder)
        for line, name in private_names_from_other_modules(ast.parse(path.read_text(), str(path)))
    ]
    assert found == [], "a name other modules need is public (or the modules are one module)"
