"""The distillation study's summary: `python studies/distill_summary.py` (see `hf_simple_attn.studies.distillation`).

Reads the results of mt-distill-teacher, mt-distill-finetune, mt-distill-kd and mt-distill-scratch (runs still
missing are listed, not estimated), writes `studies/results/mt-distill/` (README.md, summary.json with the paired
bootstrap against the teacher, the chart of validation BLEU against steps), then the tables into the
`<!-- study:mt-distill -->` block of docs/training/from-pretrained.md. `--docs-only` writes the block from the results
and the committed summary.json (no bootstrap, no chart); `--check` writes nothing and fails when the block differs
from it (tests/test_docs_studies.py runs it once the study has results).
"""

import argparse
import json
import sys
from pathlib import Path

from hf_simple_attn.studies.distillation import (
    NAME,
    DistillationStudies,
    condition_runs,
    decoding_speeds,
    distillation_summary,
    load_distillation_studies,
    report,
    teacher_result,
    write_summary,
)
from hf_simple_attn.studies.summary import paired_test, replace_block


STUDIES_DIR = Path(__file__).resolve().parent
DOCS_PAGE = STUDIES_DIR.parent / "docs" / "training" / "from-pretrained.md"
RESULTS_LINK = f"../studies/results/{NAME}"  # the summary's folder as the site mounts it, from docs/training/


def has_results(studies: DistillationStudies) -> bool:
    return teacher_result(studies) is not None or any(condition_runs(s)[0] for s in studies.conditions.values())


def docs_block(studies: DistillationStudies) -> str:
    """The tables as the page shows them, from the results and the paired tests of the committed summary.json; the
    chart and the README linked as the documentation site mounts them (`studies/results/...`, docs/hooks.py)."""
    committed = studies.results_dir / "summary.json"
    tests = json.loads(committed.read_text(encoding="utf-8"))["bootstrap"] if committed.is_file() else {}
    summary = distillation_summary(studies, tests, decoding_speeds(studies.layouts))
    return (
        f"{report(summary, RESULTS_LINK + '/')}\n\nAll figures: [{RESULTS_LINK}/README.md]({RESULTS_LINK}/README.md)."
    )


def stale_block(studies: DistillationStudies, page: Path) -> str | None:
    """None when the page's block is the table of the committed results; else what differs."""
    text = page.read_text(encoding="utf-8")
    if replace_block(text, NAME, docs_block(studies)) == text:
        return None
    return (
        f"{page}: the block of {NAME} is not the table of the committed results; run "
        "`python studies/distill_summary.py`"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--studies", type=Path, default=STUDIES_DIR, help="the folder of the four specs (default: studies/)"
    )
    parser.add_argument(
        "--page", type=Path, default=DOCS_PAGE, help="the page with the `<!-- study:mt-distill -->` block"
    )
    parser.add_argument("--no-docs", action="store_true", help="write the study's own files only")
    parser.add_argument(
        "--docs-only", action="store_true", help="only write the block, from the results and summary.json"
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 when the block differs from the results' tables"
    )
    args = parser.parse_args(argv)
    studies = load_distillation_studies(args.studies)
    if not has_results(studies):
        print(f"{NAME}: no results yet; the page keeps its placeholder")
        return 0
    if args.check:
        problem = stale_block(studies, args.page)
        print(problem or f"{NAME}: up to date")
        return 1 if problem else 0
    if not args.docs_only:
        print(f"wrote {write_summary(studies, paired_test(studies.teacher))}")
    if not args.no_docs:
        text = args.page.read_text(encoding="utf-8")
        args.page.write_text(replace_block(text, NAME, docs_block(studies)), encoding="utf-8")
        print(f"wrote the tables of {NAME} into {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
