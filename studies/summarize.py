"""Tables and charts of a study: `python studies/summarize.py <study name or spec>` (see
`hf_simple_attn.studies.summary`).

Writes `studies/results/<study>/README.md`, `significance.json` and the charts, then the study's table into the
`<!-- study:NAME -->` block of the documentation page in `docs/studies/` that has one (the pages are committed; the
prose around the blocks is written by hand). `--check` writes nothing and fails when a page's block differs from
the table of the committed results (tests/test_docs_studies.py runs it for every study).
"""

import argparse
import json
import sys
from pathlib import Path

from hf_simple_attn.studies.runner import load_study
from hf_simple_attn.studies.summary import load_results, replace_block, results_table, summarize


DOCS_DIR = Path(__file__).resolve().parent.parent / "docs" / "studies"


def docs_block(study) -> str:
    """The study's table as its documentation page shows it, from the files `summarize` wrote: the runs' results,
    `significance.json` and the outside baselines; the chart and the study's README linked as the documentation site
    mounts them (`results/<study>/...` next to the page, see docs/hooks.py)."""
    results = load_results(study.results_dir)
    significance = study.results_dir / "significance.json"
    tests = json.loads(significance.read_text(encoding="utf-8")) if significance.is_file() else {}
    table = results_table(study, results, tests, load_results(study.results_dir / "baselines", "*.json"))
    link = f"results/{study.name}"
    return f"{table}\n\n![{study.name}]({link}/scores.png)\n\nAll figures: [{link}/README.md]({link}/README.md)."


def docs_page(study, docs_dir: Path) -> Path:
    """The page of `docs_dir` that holds the study's block."""
    marker = f"<!-- study:{study.name} -->"
    pages = [path for path in sorted(docs_dir.glob("*.md")) if marker in path.read_text(encoding="utf-8")]
    if len(pages) != 1:
        found = "no page has" if not pages else f"{len(pages)} pages have"
        raise SystemExit(
            f"{docs_dir}: {found} the block {marker} ... <!-- /study:{study.name} -->; put it (once) where the "
            "study's table belongs"
        )
    return pages[0]


def stale_block(study, docs_dir: Path) -> str | None:
    """None when the study's block in its page is the table of its committed results; else what differs."""
    page = docs_page(study, docs_dir)
    text = page.read_text(encoding="utf-8")
    if replace_block(text, study.name, docs_block(study)) == text:
        return None
    return f"{page}: the block of {study.name} is not the table of {study.results_dir}; run `python studies/summarize.py {study.name}`"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("study", help="a study name (studies/<name>.json) or the path of its spec")
    parser.add_argument(
        "--docs",
        type=Path,
        default=DOCS_DIR,
        help="the folder of the documentation pages that hold the studies' `<!-- study:NAME -->` blocks "
        "(default: docs/studies)",
    )
    parser.add_argument("--no-docs", action="store_true", help="write the study's own files only")
    parser.add_argument(
        "--docs-only",
        action="store_true",
        help="only write the documentation block, from the committed results and significance.json (no bootstrap, "
        "no charts)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when the documentation block differs from the committed results' table",
    )
    args = parser.parse_args(argv)
    spec = Path(args.study) if args.study.endswith(".json") else Path(__file__).parent / f"{args.study}.json"
    study = load_study(spec)
    if args.check:
        problem = stale_block(study, args.docs)
        print(problem or f"{study.name}: up to date")
        return 1 if problem else 0
    if not args.docs_only:
        print(f"wrote {summarize(study)}")
    if not args.no_docs:
        page = docs_page(study, args.docs)
        page.write_text(
            replace_block(page.read_text(encoding="utf-8"), study.name, docs_block(study)), encoding="utf-8"
        )
        print(f"wrote the table of {study.name} into {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
