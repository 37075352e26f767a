"""Rules of the source tree that import-linter cannot check, checked on the code itself.

- every public class says what it is for (a docstring);
- no module imports another module's ``_private`` names (a module that needs
  them is one module split in the wrong place: make a package with a facade);
- the README's code map names every package and module of ``operator/usher``
  and ``operator/usher/core``, and nothing that does not exist.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "usher"
SOURCES = sorted(PACKAGE.rglob("*.py"))


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", SOURCES, ids=_relative)
def test_every_public_class_has_a_docstring(path: Path) -> None:
    tree = ast.parse(path.read_text())
    missing = [
        f"{node.name} (line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and ast.get_docstring(node) is None
    ]
    assert missing == [], f"public classes without a docstring in {_relative(path)}: {missing}"


@pytest.mark.parametrize("path", SOURCES, ids=_relative)
def test_no_module_imports_another_modules_private_names(path: Path) -> None:
    tree = ast.parse(path.read_text())
    private = [
        f"{node.module}.{alias.name} (line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("usher")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert private == [], f"{_relative(path)} imports private names: {private}"


def _code_map() -> str:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"```\noperator/usher/\n(.*?)```", readme, re.S)
    assert match is not None, "README.md has no code map (a block starting with operator/usher/)"
    lines = match.group(1).splitlines()
    end = next((i for i, line in enumerate(lines) if not line.startswith(" ")), len(lines))
    return "\n".join(lines[:end]) + "\n"


def _entries(directory: Path) -> list[str]:
    names = []
    for child in sorted(directory.iterdir()):
        if (child.name.startswith(("_", ".")) and child.name != "__main__.py") or child.name == "py.typed":
            continue
        if child.is_dir() and (child / "__init__.py").exists():
            names.append(f"{child.name}/")
        elif child.suffix == ".py":
            names.append(child.name)
    return names


@pytest.mark.parametrize("directory", [PACKAGE, PACKAGE / "core"], ids=_relative)
def test_the_readme_code_map_names_every_package_and_module(directory: Path) -> None:
    code_map = _code_map()
    missing = [name for name in _entries(directory) if not re.search(rf"(?<![\w/.]){re.escape(name)}", code_map)]
    assert missing == [], f"README.md's code map does not mention {missing} of {_relative(directory)}"


def test_the_readme_code_map_names_nothing_that_does_not_exist() -> None:
    named = set(re.findall(r"(?<![\w/.])([a-z_]+(?:\.py|/))(?=\s)", _code_map()))
    known = {name for directory in [PACKAGE, *PACKAGE.rglob("*")] if directory.is_dir() for name in _entries(directory)}
    assert sorted(named - known) == []
