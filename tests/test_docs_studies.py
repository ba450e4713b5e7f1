"""The studies' tables in the documentation are the tables of the committed results (the distillation study's, made
from four studies, once it has results), and the headline results quoted in README.md and docs/studies/index.md are
the cells of the generated `mt-headline-long` table."""

import importlib.util
import re
from pathlib import Path

import pytest

from hf_simple_attn.studies.distillation import STUDY_NAMES as DISTILLATION_STUDIES
from hf_simple_attn.studies.runner import load_study
from hf_simple_attn.studies.summary import load_results


REPO_ROOT = Path(__file__).resolve().parent.parent
STUDIES = REPO_ROOT / "studies"
SPECS = sorted(STUDIES.glob("*.json"))
HEADLINE_STUDY = "mt-headline-long"


def study_script(name: str):
    """studies/NAME.py, loaded under its own name (benchmarks/summarize.py is `summarize` for other tests)."""
    spec = importlib.util.spec_from_file_location(f"studies_{name}", STUDIES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def summarize_script():
    return study_script("summarize")


def studies_with_results() -> list[Path]:
    """The studies with results whose table is their own (the distillation study's four share one)."""
    return [
        path
        for path in SPECS
        if path.stem not in DISTILLATION_STUDIES and load_results(STUDIES / "results" / path.stem)
    ]


def table_rows(text: str) -> dict[str, dict[str, str]]:
    """{first cell: {column: cell}} of the first markdown table in `text`."""
    lines = re.search(r"^\|.*?(?=^(?!\|))", text + "\n", re.M | re.S).group(0).splitlines()
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(header, cells))
    return rows


def block(text: str, name: str) -> str:
    return text.split(f"<!-- study:{name} -->", 1)[1].split(f"<!-- /study:{name} -->", 1)[0]


@pytest.mark.parametrize("spec", studies_with_results(), ids=lambda path: path.stem)
def test_the_docs_table_of_every_study_is_the_table_of_its_results(spec):
    script = summarize_script()
    problem = script.stale_block(load_study(spec), script.DOCS_DIR)  # also fails unless exactly one page has it
    assert problem is None, problem


@pytest.mark.skipif(
    not any(load_results(STUDIES / "results" / name) for name in DISTILLATION_STUDIES),
    reason="the distillation study (issue 40) has no results yet; its page shows a placeholder",
)
def test_the_docs_table_of_the_distillation_study_is_the_table_of_its_results():
    script = study_script("distill_summary")
    problem = script.stale_block(script.load_distillation_studies(STUDIES), script.DOCS_PAGE)
    assert problem is None, problem


def test_check_mode_reports_a_stale_block(tmp_path):
    script = summarize_script()
    study = load_study(STUDIES / f"{HEADLINE_STUDY}.json")
    page = tmp_path / "page.md"
    page.write_text(f"intro\n<!-- study:{HEADLINE_STUDY} -->\n| old | table |\n<!-- /study:{HEADLINE_STUDY} -->\n")
    assert script.main([str(STUDIES / f"{HEADLINE_STUDY}.json"), "--check", "--docs", str(tmp_path)]) == 1
    page.write_text(f"<!-- study:{HEADLINE_STUDY} -->\n{script.docs_block(study)}\n<!-- /study:{HEADLINE_STUDY} -->\n")
    assert script.main([str(STUDIES / f"{HEADLINE_STUDY}.json"), "--check", "--docs", str(tmp_path)]) == 0


@pytest.mark.parametrize("path", ["README.md", "docs/studies/index.md"])
def test_the_headline_results_are_the_generated_table(path):
    generated = table_rows(block((REPO_ROOT / "docs" / "studies" / "mt-headline.md").read_text(), HEADLINE_STUDY))
    section = (REPO_ROOT / path).read_text(encoding="utf-8").split(f"`studies/results/{HEADLINE_STUDY}/`", 1)[1]
    quoted = table_rows(section)
    assert set(quoted) >= {"base", "hc-sa", "sh-x", "local-all", "ran-d", "gmm", "hard-dec"}
    for preset, row in quoted.items():
        assert row["test BLEU"] == generated[preset]["test bleu"], preset
        assert row["Δ vs base"] == generated[preset]["Δ vs base (bleu)"], preset
        p_column = next(column for column in row if column.startswith("p vs base"))
        assert row[p_column] == generated[preset]["p vs base (bleu)"], preset


def test_docs_link_only_to_results_the_site_mounts():
    """The studies' pages link charts and result pages under results/<study>/, which docs/hooks.py mounts from
    studies/results/; every one of those files exists."""
    for page in sorted((REPO_ROOT / "docs" / "studies").glob("*.md")):
        for target in re.findall(r"\]\((results/[^)#]+)", page.read_text(encoding="utf-8")):
            assert (STUDIES / target).is_file(), f"{page.name}: {target}"
