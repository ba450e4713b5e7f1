"""A sentence-pair study's reach shares and length rule: `python studies/pair_baselines.py
glue-local-bible-paraphrase --reach 12 36 72` (reach = layers x k of a band-k layout; see
`hf_simple_attn.studies.pair_baselines`)."""

import argparse
import json
import sys
from pathlib import Path

from hf_simple_attn.studies.pair_baselines import pair_baselines
from hf_simple_attn.studies.runner import load_study


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("study", help="a study name (studies/<name>.json) or the path of its spec")
    parser.add_argument("--reach", type=int, nargs="+", default=[12, 36, 72], help="reaches (layers x k) to report")
    parser.add_argument("--positive_label", default="equivalent", help="the label of a matching pair")
    args = parser.parse_args(argv)
    spec = Path(args.study) if args.study.endswith(".json") else Path(__file__).parent / f"{args.study}.json"
    print(json.dumps(pair_baselines(load_study(spec), args.reach, args.positive_label), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
