"""Run a study: `python studies/run_study.py studies/<name>.json --jobs 2` (see `hf_simple_attn.studies.runner`).

Start it again after an interruption: finished runs are skipped, unfinished ones continue from their last checkpoint.
"""

import argparse
import logging
import signal
import sys

from hf_simple_attn.studies.runner import StudyError, load_study, run_study


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("spec", help="the study's JSON spec, e.g. studies/mt-families.json")
    parser.add_argument("--jobs", type=int, default=2, help="runs trained at once, one thread each (default 2)")
    parser.add_argument("--no_analyses", action="store_true", help="skip the attention analyses of finished runs")
    parser.add_argument(
        "--retries", type=int, default=2, help="times a failed run is started again from its checkpoint (default 2)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(message)s", datefmt="%H:%M:%S", level=logging.INFO)
    try:
        study = load_study(args.spec)
    except StudyError as error:
        parser.error(str(error))
    analyze = None
    if not args.no_analyses:
        from hf_simple_attn.studies.analysis import analyze_run as analyze
    # `kill` (SIGTERM) stops the training runs too; their checkpoints stay for the next start.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    written = run_study(study, jobs=args.jobs, analyze=analyze, retries=args.retries)
    print(f"{study.name}: {len(written)} result file(s) written in {study.results_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
