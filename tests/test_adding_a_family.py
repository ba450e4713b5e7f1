"""Adding a family touches the files docs/adding-a-family.md lists, no others.

A family registered here and defined in no file of the package (`throwaway_family.py`) reaches what the package
builds from the registry: the layouts' and presets' validation, the docs' generated table, BibTeX and navigation, the
model cards, and the contract tests. The package's own families are each listed by the registry, described on a
docs page, and named by no other module of the package's shared code than their own, the registry and the presets.
"""

import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hf_simple_attn import ATTENTION_FAMILIES, LayoutError, SimpleAttnBertConfig, SimpleAttnMarianConfig
from hf_simple_attn.modeling.attention_heads import SITES, AttentionHeads
from hf_simple_attn.modeling.attention_registry import register_attention
from hf_simple_attn.modeling.modeling_simple_attn_marian import SimpleAttnMarianMTModel
from hf_simple_attn.recipes.model_card import write_model_card

from conftest import TINY_BERT, TINY_MARIAN
from throwaway_family import ThrowawayHeads


REPO = Path(__file__).resolve().parent.parent
MODELING = REPO / "hf_simple_attn" / "modeling"
PAGE = REPO / "docs" / "adding-a-family.md"
# What a new family touches, as the page lists it (`<name>`: the family's name).
FAMILY_FILES = {
    "hf_simple_attn/modeling/attention_<name>.py",
    "hf_simple_attn/modeling/attention_registry.py",
    "docs/families/<name>.md",
    "tests/test_attention_<name>.py",
    "README.md",
}
# The code that serves every family alike: it may name a family only through the registry.
SHARED_CODE = [
    *sorted((REPO / "hf_simple_attn").glob("*.py")),
    *(
        path
        for folder in ("modeling", "recipes", "deploy")
        for path in sorted((REPO / "hf_simple_attn" / folder).glob("*.py"))
    ),
    REPO / "docs" / "hooks.py",
]
PACKAGE_FAMILIES = dict(ATTENTION_FAMILIES)  # before any test registers one


@pytest.fixture
def throwaway():
    register_attention(ThrowawayHeads)
    yield ThrowawayHeads
    del ATTENTION_FAMILIES[ThrowawayHeads.kind]


def test_the_page_lists_the_files_a_family_touches():
    section = PAGE.read_text(encoding="utf-8").split("\n## The files a family touches\n", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"^\d+\. `([^`]+)`", section, re.M)) == FAMILY_FILES


def test_the_registry_lists_every_family_module():
    """A family module that the registry forgets fails here, not in a checkpoint loaded with `trust_remote_code`."""
    for path in sorted(MODELING.glob("attention_*.py")):
        module = importlib.import_module(f"hf_simple_attn.modeling.{path.stem}")
        for family in vars(module).values():
            if inspect.isclass(family) and issubclass(family, AttentionHeads) and family.__module__ == module.__name__:
                assert not family.kind or PACKAGE_FAMILIES.get(family.kind) is family, family


def test_no_shared_module_names_a_family():
    for family in PACKAGE_FAMILIES.values():
        module = family.__module__.rsplit(".", 1)[-1]
        name = re.compile(rf"\b({module}|{family.__name__})\b")
        naming = {path.name for path in SHARED_CODE if name.search(path.read_text(encoding="utf-8"))}
        assert naming <= {f"{module}.py", "attention_registry.py", "presets.py"}, family


def test_every_family_but_the_baseline_has_its_docs_page(hooks):
    assert set(hooks.family_pages()) == set(PACKAGE_FAMILIES) - {"dot"}


def test_every_family_module_but_the_baseline_has_its_test_file():
    """`tests/test_attention_<name>.py` beside `attention_<name>.py`, as the page names it."""
    modules = {family.__module__.rsplit(".", 1)[-1] for family in PACKAGE_FAMILIES.values()} - {"attention_dot"}
    assert {module for module in modules if not (REPO / "tests" / f"test_{module}.py").is_file()} == set()


def test_layouts_and_presets_take_a_registered_family(throwaway):
    config = SimpleAttnMarianConfig.from_preset("hc-sa", attention_layout={"cross": "throwaway"}, **TINY_MARIAN)
    assert {group["kind"] for spec in config.attention_layout["cross"] for group in spec["groups"]} == {"throwaway"}
    groups = [{"kind": "throwaway", "num_heads": 1}, {"kind": "local"}]
    config = SimpleAttnBertConfig.from_preset(
        "band6", attention_layout={"encoder_self": {"groups": groups}}, **TINY_BERT
    )
    assert [group["kind"] for group in config.attention_layout["encoder_self"][0]["groups"]] == ["throwaway", "local"]
    with pytest.raises(LayoutError, match=r"valid kinds: \[.*'throwaway'"):
        SimpleAttnMarianConfig(attention_layout={"cross": "throwaways"}, **TINY_MARIAN)
    with pytest.raises(LayoutError, match="unknown option"):
        SimpleAttnMarianConfig(attention_layout={"cross": {"kind": "throwaway", "width": 3}}, **TINY_MARIAN)


def test_the_docs_show_a_registered_family(throwaway, hooks, tmp_path):
    row = next(line for line in hooks.families_marker("table").splitlines() if "`throwaway`" in line)
    assert "ThrowawayHeads" in row and throwaway.paper in row and all(f"`{site}`" in row for site in SITES)
    # Its class: a reference entry under its kind, which the table links to.
    entry = f"{throwaway.__module__}.{throwaway.__qualname__}"
    assert f"][{entry}]" in row
    reference = hooks.reference_marker("families")
    assert "## `throwaway`\n" in reference and f"\n::: {entry}\n" in reference
    assert throwaway.citation in hooks.bibtex_marker("throwaway")
    # Its page: linked from the table, and added to the navigation without an entry in mkdocs.yml.
    (tmp_path / "families").mkdir()
    for page in ("index.md", "hard-coded.md", "throwaway.md"):
        (tmp_path / "families" / page).write_text("<!-- bibtex:throwaway -->\n" if page == "throwaway.md" else "")
    assert hooks.family_pages(tmp_path / "families") == {"throwaway": "throwaway.md"}
    nav = [{"Home": "index.md"}, {"Attention families": ["families/index.md", {"HC": "families/hard-coded.md"}]}]
    hooks.on_config({"docs_dir": str(tmp_path), "nav": nav})
    assert nav[1]["Attention families"] == [
        "families/index.md",
        {"HC": "families/hard-coded.md"},
        "families/throwaway.md",
    ]


def test_model_cards_cite_a_registered_family(throwaway, tmp_path):
    model = SimpleAttnMarianMTModel(SimpleAttnMarianConfig(attention_layout={"cross": "throwaway"}, **TINY_MARIAN))
    card = write_model_card(tmp_path, model, task="translation", dataset_name=None, metrics={}).read_text()
    assert throwaway.citation in card and throwaway.limitations in card


def test_the_contract_tests_cover_a_registered_family():
    """The contract tests, run with the family registered as a plugin, collect it at every site it declares and
    pass for it."""
    path = os.pathsep.join(filter(None, [str(REPO / "tests"), str(REPO), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "pytest", "tests/test_family_contract.py", "-p", "throwaway_family"]
    command += ["-p", "no:cacheprovider", "-q", "-k", "throwaway", "-x"]
    completed = subprocess.run(
        command, cwd=REPO, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stdout[-4000:]
    passed = int(re.search(r"(\d+) passed", completed.stdout).group(1))
    assert passed >= 2 * len(SITES), completed.stdout[-4000:]


def test_the_readme_families_table_is_the_registry_s(hooks):
    """The README (not built by mkdocs) holds the table the home page's `<!-- families:summary -->` generates."""
    table = hooks.families_summary(PACKAGE_FAMILIES, "docs/families/")
    assert table in (REPO / "README.md").read_text(encoding="utf-8"), f"README.md's families table is:\n{table}"
    assert all(family.summary for family in PACKAGE_FAMILIES.values())
