#!/usr/bin/env bash
# The tests (offline), after the main job's idempotent install; arguments go to pytest (`-n 0` runs them in this
# process). pytest-xdist runs one test file per worker on every core (each test uses one thread: tests/conftest.py);
# a file stays on one worker, so its module fixtures are built once.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install.sh
python -m pytest -q -p no:cacheprovider -n auto --dist loadfile "$@"
