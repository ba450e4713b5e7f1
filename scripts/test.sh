#!/usr/bin/env bash
# The tests (offline, a few minutes on 2 cores), after the main job's idempotent install; arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install.sh
python -m pytest -q -p no:cacheprovider "$@"
