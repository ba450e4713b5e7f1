"""Tables and charts of a study: `python studies/summarize.py <study name or spec>` (see `hf_simple_attn.study_summary`)."""

import argparse
import sys
from pathlib import Path

from hf_simple_attn.study import load_study
from hf_simple_attn.study_summary import summarize


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("study", help="a study name (studies/<name>.json) or the path of its spec")
    parser.add_argument(
        "--readme",
        type=Path,
        default=None,
        help="also write the table into this README's `<!-- study:NAME -->` block (e.g. README.md)",
    )
    args = parser.parse_args(argv)
    spec = Path(args.study) if args.study.endswith(".json") else Path(__file__).parent / f"{args.study}.json"
    print(f"wrote {summarize(load_study(spec), args.readme)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
