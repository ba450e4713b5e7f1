"""The package laid out by concern: what its top level holds, which subpackage imports which, what setuptools ships.

`modeling` travels with every checkpoint (copied next to the weights for `trust_remote_code`), so it imports
nothing of ours outside itself; `data` and `metrics` stand alone; `recipes` and `deploy` build on `modeling` and
never import `studies`. Checked on the source of every module, lazy imports inside functions included.
"""

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest


REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE = REPO_ROOT / "hf_simple_attn"
# Each subpackage -> the other subpackages it may import.
ALLOWED_IMPORTS = {
    "modeling": set(),
    "data": set(),
    "metrics": set(),
    "recipes": {"modeling", "data", "metrics"},
    "deploy": {"modeling", "data", "metrics", "recipes"},
    "studies": {"modeling", "data", "metrics", "recipes", "deploy"},
}
# What a checkpoint's copy of `modeling` may import besides the standard library: transformers and what it needs.
MODELING_DEPENDENCIES = {"torch", "transformers", "huggingface_hub"}


def package_modules(subpackage: str) -> list[Path]:
    return sorted((PACKAGE / subpackage).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, int, str]]:
    """(line, relative level, absolute module name) of every import statement of `path`."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, 0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            found.append((node.lineno, node.level, ".".join(part for part in (base, node.module) if part)))
    return found


def subpackage_of(module: str) -> str | None:
    """The subpackage of one of our modules ("" for the package's top level), None for other modules."""
    if module != "hf_simple_attn" and not module.startswith("hf_simple_attn."):
        return None
    return module.split(".")[1] if "." in module else ""


def test_the_top_level_holds_only_init_cli_and_subpackages():
    entries = [path for path in PACKAGE.iterdir() if path.name != "__pycache__"]
    assert sorted(path.name for path in entries if not path.is_dir()) == ["__init__.py", "cli.py"]
    folders = sorted(path.name for path in entries if path.is_dir())
    assert all((PACKAGE / name / "__init__.py").is_file() for name in folders), folders
    assert folders == sorted(ALLOWED_IMPORTS), "a new subpackage: add its import rule to ALLOWED_IMPORTS"


@pytest.mark.parametrize("subpackage", sorted(ALLOWED_IMPORTS))
def test_each_subpackage_says_what_lives_there_and_what_it_may_import(subpackage):
    docstring = ast.get_docstring(ast.parse((PACKAGE / subpackage / "__init__.py").read_text(encoding="utf-8")))
    assert docstring and "import" in docstring


@pytest.mark.parametrize("subpackage", sorted(ALLOWED_IMPORTS))
def test_subpackages_import_only_what_their_rule_allows(subpackage):
    allowed = ALLOWED_IMPORTS[subpackage] | {subpackage}
    wrong = [
        f"{path.relative_to(REPO_ROOT)}:{line} imports {module}"
        for path in package_modules(subpackage)
        for line, _, module in imports(path)
        if subpackage_of(module) is not None and subpackage_of(module) not in allowed
    ]
    assert not wrong, "\n".join(wrong)


def test_modeling_imports_only_its_own_modules_torch_and_transformers():
    """A checkpoint's copy of the code is a flat folder: single-dot relative imports only, no `hf_simple_attn`."""
    wrong = []
    for path in package_modules("modeling"):
        for line, level, module in imports(path):
            top = module.split(".")[0]
            if level > 1 or (level == 0 and top not in sys.stdlib_module_names | MODELING_DEPENDENCIES):
                wrong.append(f"{path.relative_to(REPO_ROOT)}:{line} imports {module} (level {level})")
    assert not wrong, "\n".join(wrong)


def test_pyproject_lists_every_package_and_ships_the_card_templates():
    setuptools = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    packages = {module_name(init) for init in PACKAGE.rglob("__init__.py")}
    assert sorted(setuptools["packages"]) == sorted(packages | {"hf_simple_attn.model_cards"})
    assert setuptools["package-dir"] == {"hf_simple_attn.model_cards": "model_cards"}
    assert (REPO_ROOT / "model_cards" / "model_card.md").is_file()


def test_the_version_has_its_changelog_section_in_keep_a_changelog_form():
    """`hf_simple_attn.__version__` (which pyproject.toml reads) is the newest release in CHANGELOG.md, and the changelog
    uses only Keep a Changelog's section names."""
    import hf_simple_attn

    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "hf_simple_attn.__version__"}
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", changelog, re.M)
    assert releases[0] == ("Unreleased", "")
    assert releases[1][0] == hf_simple_attn.__version__ and releases[1][1], releases[:2]
    sections = set(re.findall(r"^### (.+)$", changelog, re.M))
    assert sections <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, sections
