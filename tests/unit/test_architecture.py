"""Rules of the source tree that import-linter cannot check, checked on the code itself.

- every public class says what it is for (a docstring);
- no module imports another module's ``_private`` names (a module that needs
  them is one module split in the wrong place: make a package with a facade);
- kopf's private API (``kopf._cogs``, ``kopf._core``, ...) is used by one module
  only, ``adapters/watching/kopf_private.py``: the one to check when kopf changes;
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


KOPF_SEAM = PACKAGE / "adapters" / "watching" / "kopf_private.py"
"""The one module that may use kopf's private API."""
EVERY_PYTHON_FILE = sorted(
    {*SOURCES, *(path for folder in ("tests", "e2e", "bench") for path in (ROOT / folder).rglob("*.py"))}
)


def _private(dotted: str) -> bool:
    """Whether a dotted name reaches into kopf's private API (``kopf._cogs...``; dunders are public)."""
    top, *rest = dotted.split(".")
    return top == "kopf" and any(part.startswith("_") and not part.endswith("__") for part in rest)


def _kopf_private_uses(path: Path) -> list[str]:
    """Every import of a private kopf module or name in ``path``, and every ``kopf._x`` attribute it reads."""
    uses = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "kopf":
            names = [f"kopf.{node.attr}"]
        else:
            continue
        uses.extend(f"{name} (line {node.lineno})" for name in names if _private(name))
    return uses


def test_kopf_s_private_api_is_used_by_one_module_only() -> None:
    """kopf promises nothing about ``kopf._cogs``: with every use in one module, a kopf upgrade is one module to check.

    Tests and the e2e suite go through that module too (the unit tests script its `watch_stream`).
    """
    users = {
        _relative(path): uses for path in EVERY_PYTHON_FILE if path != KOPF_SEAM and (uses := _kopf_private_uses(path))
    }
    assert users == {}, f"only {_relative(KOPF_SEAM)} may use kopf's private API; also used by {users}"
    assert _kopf_private_uses(KOPF_SEAM), (
        f"{_relative(KOPF_SEAM)} uses no private kopf API: point KOPF_SEAM at the module that does"
    )


@pytest.mark.parametrize(
    ("source", "private"),
    [
        pytest.param("from kopf._cogs.structs.credentials import Vault", True, id="from a private module"),
        pytest.param("import kopf._core.engines.peering", True, id="a private module imported"),
        pytest.param("from kopf import _cogs", True, id="a private package from kopf"),
        pytest.param("import kopf\nkopf._cogs.clients", True, id="a private attribute of kopf"),
        pytest.param("import kopf\nfrom kopf import OperatorSettings, __version__", False, id="kopf's public API"),
        pytest.param("from usher.adapters.watching import kopf_private", False, id="the seam itself"),
    ],
)
def test_the_check_finds_every_way_to_reach_kopf_s_private_api(source: str, private: bool, tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text(source)
    assert bool(_kopf_private_uses(module)) is private


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
