"""Reproduction studies: many (preset, seed) training runs of our own scripts, resumable, with one result file each.

A study is a JSON spec (see `studies/*.json`):

```json
{
  "name": "mt-families", "task": "translation",
  "arguments": {"dataset_name": "embedded", "d_model": 128, "max_steps": 3750, "learning_rate": 1e-3, ...},
  "presets": ["base", "hc-sa"] | "seq2seq" | "encoder",
  "seeds": [1] | {"default": [1], "base": [1, 2, 3]},
  "sweep": {"settings": [{"learning_rate": 5e-4}, {"learning_rate": 1e-3}],
            "groups": {"base": ["base", "base-no-ff"], "hc-sa": ["hc-sa", "sh-x"]}},
  "preset_arguments": {"local-all": {"learning_rate": 2e-3}},
  "save_steps": 500
}
```

`arguments` are the training script's own options (`--key value`), shared by every run. With a `sweep`, each
group's first preset (its representative) is trained once per setting (seed: the first of its seeds) and scored on
the validation split; every preset of the group then runs with the setting that scored best, never chosen on the
test split. A run whose options equal a sweep run's is that run (same folder, trained once; with the folder gone,
its result is the sweep's result file). `preset_arguments` gives a preset outside the sweep its own options (e.g.
the learning rate another study's sweep chose for it).

Each run trains in `<spec folder>/runs/<study>/<run>/` (not committed) with periodic checkpoints, so a killed study
continues from the last complete checkpoint when started again; a run with results is never trained again. Its
results land in `<spec folder>/results/<study>/<preset>--seed<k>.json` (sweep runs in `.../sweep/`), with the test
predictions next to it for the paired bootstrap in `hf_simple_attn.studies.summary`.
"""

import importlib
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from ..modeling.presets import list_presets
from ..recipes.arguments import ModelArguments, last_complete_checkpoint
from ..recipes.run_steps import select_split


logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]

TASKS = {
    "translation": {
        "script": "training/run_translation.py",
        "task_module": "translation_task",
        "metrics": ("bleu", "chrf"),
        "selection_metric": "bleu",
        "display_scale": 1,
        "arguments": {"predict_with_generate": True},
        "predictions": "generated_predictions.txt",
        "auto_class": "AutoModelForSeq2SeqLM",
    },
    "classification": {
        "script": "training/run_glue.py",
        "task_module": "classification_task",
        "metrics": ("accuracy", "f1", "matthews_correlation"),
        "selection_metric": "accuracy",
        "display_scale": 100,  # fractions in the results, percent in tables and charts (points, as GLUE reports)
        "arguments": {},
        "predictions": "predict_results.txt",
        "auto_class": "AutoModelForSequenceClassification",
    },
    "summarization": {
        "script": "training/run_summarization.py",
        "task_module": "summarization_task",
        "metrics": ("rouge1", "rouge2", "rougeL"),
        "selection_metric": "rougeL",
        "display_scale": 1,
        "arguments": {"predict_with_generate": True},
        "predictions": "generated_predictions.txt",
        "auto_class": "AutoModelForSeq2SeqLM",
    },
}
SPEC_FIELDS = {
    "name",
    "task",
    "description",
    "arguments",
    "presets",
    "seeds",
    "sweep",
    "preset_arguments",
    "save_steps",
    "analyses",
    "baselines",
}
PACKAGE_PREFIX = "package:"
# Options the runner sets for every run; a spec may not set them in "arguments".
RUNNER_ARGUMENTS = {"attention_preset", "seed", "output_dir", "do_train", "do_eval", "do_predict", "save_strategy"}


class StudyError(ValueError):
    """A study spec that cannot be run; the message names the field."""


@dataclass(frozen=True)
class Run:
    """One training run: a preset, a seed and the options that differ from the spec's `arguments`."""

    preset: str
    seed: int
    overrides: tuple[tuple[str, object], ...] = ()

    @property
    def name(self) -> str:
        tag = "".join(f"--{setting_tag(key, value)}" for key, value in self.overrides)
        return f"{self.preset}{tag}--seed{self.seed}"


def setting_tag(key: str, value) -> str:
    """Short, file-name-safe label of one option: `learning_rate` 0.001 -> `lr0.001`."""
    short = {"learning_rate": "lr", "warmup_steps": "wu", "weight_decay": "wd"}
    return f"{short.get(key, key)}{value:g}" if isinstance(value, float) else f"{short.get(key, key)}{value}"


@dataclass
class Study:
    name: str
    task: str
    arguments: dict
    presets: list[str]
    seeds: dict[str, list[int]]
    sweep_settings: list[dict] = field(default_factory=list)
    sweep_groups: dict[str, list[str]] = field(default_factory=dict)
    preset_arguments: dict[str, dict] = field(default_factory=dict)
    save_steps: int = 500
    analyses: bool = True
    description: str = ""
    baselines: list[str] = field(default_factory=list)
    spec_path: Path | None = None

    @property
    def home(self) -> Path:
        """The folder of the spec file: results and runs live there."""
        return self.spec_path.resolve().parent if self.spec_path is not None else REPO_ROOT / "studies"

    @property
    def results_dir(self) -> Path:
        return self.home / "results" / self.name

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs" / self.name

    @property
    def selection_metric(self) -> str:
        return TASKS[self.task]["selection_metric"]

    def seeds_of(self, preset: str) -> list[int]:
        return self.seeds.get(preset, self.seeds["default"])

    def representative_of(self, preset: str) -> str | None:
        return next((group[0] for group in self.sweep_groups.values() if preset in group), None)


def load_study(path: str | os.PathLike) -> Study:
    """Read and check a study spec; every problem is a `StudyError` naming the field."""
    path = Path(path)
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise StudyError(f"{path}: cannot read the study spec: {error}") from error
    if not isinstance(spec, dict):
        raise StudyError(f"{path}: a study spec is a JSON object")
    unknown = set(spec) - SPEC_FIELDS
    if unknown:
        raise StudyError(f"{path}: unknown field(s) {sorted(unknown)}; valid: {sorted(SPEC_FIELDS)}")
    for required in ("name", "task", "arguments", "presets", "seeds"):
        if required not in spec:
            raise StudyError(f"{path}: field {required!r} is missing")
    if spec["task"] not in TASKS:
        raise StudyError(f"{path}: task {spec['task']!r} is not one of {sorted(TASKS)}")
    if not isinstance(spec["arguments"], dict):
        raise StudyError(f"{path}: 'arguments' must map script options to values")
    reserved = RUNNER_ARGUMENTS & set(spec["arguments"])
    if reserved:
        raise StudyError(f"{path}: arguments {sorted(reserved)} are set by the runner for each run")
    known_presets = list_presets("encoder" if spec["task"] == "classification" else "seq2seq")
    presets = spec["presets"]
    if presets in ("seq2seq", "encoder"):
        presets = list_presets(presets)
    if not isinstance(presets, list) or not presets:
        raise StudyError(f"{path}: 'presets' is a non-empty list of preset names, 'seq2seq' or 'encoder'")
    for preset in presets:
        if preset not in known_presets:
            raise StudyError(f"{path}: presets: {preset!r} is not a {spec['task']} preset; valid: {known_presets}")
    seeds = spec["seeds"]
    if isinstance(seeds, list):
        seeds = {"default": seeds}
    if not isinstance(seeds, dict) or "default" not in seeds:
        raise StudyError(f"{path}: 'seeds' is a list of ints or {{'default': [...], '<preset>': [...]}}")
    for key, values in seeds.items():
        if not (isinstance(values, list) and values and all(type(v) is int for v in values)):
            raise StudyError(f"{path}: seeds.{key} must be a non-empty list of ints")
    sweep = spec.get("sweep", {})
    settings, groups = sweep.get("settings", []), sweep.get("groups", {})
    if sweep and (not settings or not groups):
        raise StudyError(f"{path}: sweep needs 'settings' (a list of option dicts) and 'groups'")
    for index, setting in enumerate(settings):
        if not isinstance(setting, dict) or not setting or RUNNER_ARGUMENTS & set(setting):
            raise StudyError(f"{path}: sweep.settings[{index}] must be a non-empty dict of script options")
    grouped = [preset for group in groups.values() for preset in group]
    for preset in grouped:
        if preset not in presets:
            raise StudyError(f"{path}: sweep.groups: {preset!r} is not among the study's presets")
    if len(grouped) != len(set(grouped)):
        raise StudyError(f"{path}: sweep.groups: a preset belongs to at most one group")
    preset_arguments = spec.get("preset_arguments", {})
    if not isinstance(preset_arguments, dict):
        raise StudyError(f"{path}: 'preset_arguments' maps preset names to dicts of script options")
    for preset, options in preset_arguments.items():
        if preset not in presets:
            raise StudyError(f"{path}: preset_arguments: {preset!r} is not among the study's presets")
        if preset in grouped:
            raise StudyError(f"{path}: preset_arguments: {preset!r} takes its options from its sweep group")
        if not isinstance(options, dict) or not options or RUNNER_ARGUMENTS & set(options):
            raise StudyError(f"{path}: preset_arguments.{preset} must be a non-empty dict of script options")
    baselines = spec.get("baselines", [])
    from .baselines import BASELINES

    if spec["task"] != "translation" and baselines or any(name not in BASELINES for name in baselines):
        raise StudyError(f"{path}: baselines: translation studies may name {sorted(BASELINES)}, got {baselines}")
    save_steps = spec.get("save_steps", 500)
    if type(save_steps) is not int or save_steps <= 0:
        raise StudyError(f"{path}: save_steps must be a positive int")
    return Study(
        name=spec["name"],
        task=spec["task"],
        arguments=dict(TASKS[spec["task"]]["arguments"], **spec["arguments"]),
        presets=presets,
        seeds=seeds,
        sweep_settings=settings,
        sweep_groups={name: list(group) for name, group in groups.items()},
        preset_arguments={preset: dict(options) for preset, options in preset_arguments.items()},
        save_steps=save_steps,
        analyses=spec.get("analyses", True),
        description=spec.get("description", ""),
        baselines=list(baselines),
        spec_path=path,
    )


# ---- the plan ----------------------------------------------------------------------------------------------------


def sweep_runs(study: Study) -> list[Run]:
    """One run per (group representative, setting), at the representative's first seed."""
    return [
        Run(group[0], study.seeds_of(group[0])[0], tuple(sorted(setting.items())))
        for setting in study.sweep_settings
        for group in study.sweep_groups.values()
    ]


def option_runs(study: Study) -> list[Run]:
    """One run for every distinct set of options the study passes: each sweep run, and each preset at its first seed
    with its `preset_arguments` (a swept preset takes a sweep setting, checked with the sweep runs)."""
    return sweep_runs(study) + [
        Run(preset, study.seeds_of(preset)[0], tuple(sorted(study.preset_arguments.get(preset, {}).items())))
        for preset in study.presets
    ]


def check_script_options(study: Study) -> None:
    """A `StudyError` naming the run and the options the task's script would refuse (an unknown option, a value not
    among its choices or not of its type), raised before any run starts rather than by every run in turn."""
    import argparse

    script = TASKS[study.task]["script"]
    parser = script_parser(study)
    where = study.spec_path or study.name
    for run in option_runs(study):
        try:
            *_, unknown = parser.parse_args_into_dataclasses(
                command_for(study, run)[2:], return_remaining_strings=True
            )
        except (argparse.ArgumentError, ValueError) as error:
            raise StudyError(f"{where}: run {run.name}: {script} refuses its options: {error}") from error
        if unknown:
            raise StudyError(
                f"{where}: run {run.name}: {script} has no option {' '.join(unknown)} (`python {script} --help` "
                "lists them); check the spec's arguments, preset_arguments and sweep settings"
            )


def chosen_setting(study: Study, representative: str) -> tuple[tuple[str, object], ...] | None:
    """The sweep setting with the best validation score for this representative; None while any is unfinished."""
    scored = []
    for setting in study.sweep_settings:
        run = Run(representative, study.seeds_of(representative)[0], tuple(sorted(setting.items())))
        result = read_result(study, run, sweep=True)
        if result is None:
            return None
        scored.append((result["validation"].get(study.selection_metric, -math.inf), run.overrides))
    return max(scored, key=lambda pair: pair[0])[1]


def main_runs(study: Study) -> list[Run | None]:
    """The study's runs, every preset's first seed before any preset's second (a study stopped early has every
    preset at one seed); None where the preset's setting still waits for the sweep."""
    overrides_of = {}
    for preset in study.presets:
        representative = study.representative_of(preset)
        if representative is None:
            overrides_of[preset] = tuple(sorted(study.preset_arguments.get(preset, {}).items()))
        else:
            overrides_of[preset] = chosen_setting(study, representative)
    runs = []
    for rank in range(max(len(study.seeds_of(preset)) for preset in study.presets)):
        for preset in study.presets:
            seeds, overrides = study.seeds_of(preset), overrides_of[preset]
            if rank < len(seeds):
                runs.append(None if overrides is None else Run(preset, seeds[rank], overrides))
    return runs


# ---- one run -----------------------------------------------------------------------------------------------------


def command_for(study: Study, run: Run) -> list[str]:
    """The training script's command line for one run."""
    options = dict(study.arguments, **dict(run.overrides))
    options.update(
        attention_preset=run.preset,
        seed=run.seed,
        output_dir=str(study.runs_dir / run.name),
        do_train=True,
        do_eval=True,
        do_predict=True,
        save_strategy="steps",
        save_steps=study.save_steps,
        save_total_limit=1,
    )
    command = [sys.executable, str(REPO_ROOT / TASKS[study.task]["script"])]
    for key, value in options.items():
        if value is False or value is None:
            continue
        command.append(f"--{key}")
        if value is not True:
            command.append(resolve_package_path(value) if isinstance(value, str) else json.dumps(value))
    return command


def portable_command(command: list[str], study: Study) -> list[str]:
    """The command as a reader reruns it from the repository root: `python`, paths relative to the root (the run
    folder relative to the folder holding the study's `studies/`)."""
    prefixes = [str(REPO_ROOT) + os.sep, str(study.home.parent) + os.sep]
    portable = ["python"]
    for part in command[1:]:
        for prefix in prefixes:
            part = part.replace(prefix, "")
        portable.append(part)
    return portable


def resolve_package_path(value: str) -> str:
    """`package:<module>/<path>` -> that path inside an installed Python package (e.g. a pretrained model shipped
    on PyPI); any other text as it is."""
    if not value.startswith(PACKAGE_PREFIX):
        return value
    import importlib.util

    module, _, inner = value[len(PACKAGE_PREFIX) :].partition("/")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise StudyError(f"{value}: the Python package {module!r} is not installed (pip install it first)")
    return str(Path(spec.origin).parent / inner)


def result_path(study: Study, run: Run, sweep: bool = False) -> Path:
    folder = study.results_dir / "sweep" if sweep else study.results_dir
    name = run.name if sweep else f"{run.preset}--seed{run.seed}"
    return folder / f"{name}.json"


def read_result(study: Study, run: Run, sweep: bool = False) -> dict | None:
    """The run's result, or None when there is none yet or the file holds another run of the preset and seed (the
    spec's options for it changed since: the file is replaced when this run finishes)."""
    path = result_path(study, run, sweep)
    if not path.is_file():
        return None
    result = json.loads(path.read_text(encoding="utf-8"))
    return result if result.get("run", run.name) == run.name else None


def run_finished(study: Study, run: Run) -> bool:
    results = study.runs_dir / run.name / "all_results.json"
    return results.is_file() and "predict_runtime" in json.loads(results.read_text(encoding="utf-8"))


def latest_checkpoint_step(run_dir: Path) -> int:
    """The step of the newest complete checkpoint in a run folder (0 if none)."""
    checkpoint = last_complete_checkpoint(run_dir)
    return 0 if checkpoint is None else int(checkpoint.split("-")[-1])


def train(study: Study, run: Run) -> subprocess.Popen:
    """Start (or continue) one run's training in a subprocess at one thread; its output goes to `train.log`."""
    run_dir = study.runs_dir / run.name
    run_dir.mkdir(parents=True, exist_ok=True)
    attempt = {"started": time.time(), "from_step": latest_checkpoint_step(run_dir), "code": code_version()}
    with (run_dir / "attempts.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(attempt) + "\n")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_EVALUATE_OFFLINE="1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    log = (run_dir / "train.log").open("a", encoding="utf-8")
    command = command_for(study, run) + ["--disable_tqdm", "true"]
    return subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def report_failure(study: Study, run: Run, returncode: int, failures: int, retries: int) -> None:
    """Log a run that failed (exit status `returncode`) or ended without its results, and whether it is retried."""
    how = f"failed (exit {returncode})" if returncode != 0 else "ended without its results"
    where = study.runs_dir / run.name / "train.log"
    if failures > retries:
        logger.error("%s %s: see %s", run.name, how, where)
    else:
        retry = f"retry {failures} of {retries}"
        logger.warning("%s %s (see %s); starting it again from its last checkpoint, %s", run.name, how, where, retry)


def claim(study: Study, run: Run) -> FileLock | None:
    """The run's lock, held while this runner trains it; None when another runner (the same study started twice,
    from another shell or machine sharing the folder) holds it: two processes would write one run folder."""
    study.runs_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(study.runs_dir / f"{run.name}.lock", timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return None
    return lock


def code_version() -> str | None:
    """The commit the training code comes from, `+dirty` when the package or scripts differ from it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", "hf_simple_attn", "training")
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+dirty" if dirty else "")


def validation_curve(log_history: list[dict], names: tuple[str, ...]) -> list[list]:
    """[[step, {metric: value}], ...] of every evaluation the trainer logged: the periodic ones (`eval_strategy`
    "steps" in the spec's arguments) and the final one, which show whether a run converged on validation."""
    curve = []
    for entry in log_history:
        scores = {name: entry[f"eval_{name}"] for name in names if f"eval_{name}" in entry}
        if scores and not (curve and curve[-1] == [entry["step"], scores]):
            curve.append([entry["step"], scores])
    return curve


def collect(study: Study, run: Run, sweep: bool = False) -> dict:
    """Write the result file of a finished run (and its test predictions) from its run folder."""
    run_dir = study.runs_dir / run.name
    metrics = json.loads((run_dir / "all_results.json").read_text(encoding="utf-8"))
    state = json.loads((run_dir / "trainer_state.json").read_text(encoding="utf-8"))
    attempts = [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text(encoding="utf-8").splitlines()]
    names = TASKS[study.task]["metrics"]
    options = dict(study.arguments, **dict(run.overrides))
    result = {
        "study": study.name,
        "preset": run.preset,
        "seed": run.seed,
        "task": study.task,
        "sweep": sweep,
        "run": run.name,
        "parameters": count_parameters(run_dir, study.task),
        "train_seconds": train_seconds(metrics, state, attempts[-1]["from_step"]),
        "resumed_from_step": attempts[-1]["from_step"] or None,
        "code": sorted({attempt.get("code") or "unknown" for attempt in attempts}),
        "learning_rate": options.get("learning_rate"),
        "warmup_steps": options.get("warmup_steps"),
        "overrides": dict(run.overrides),
        "validation": {name: metrics[f"eval_{name}"] for name in names if f"eval_{name}" in metrics},
        "test": {name: metrics[f"predict_{name}"] for name in names if f"predict_{name}" in metrics},
        "signatures": {key.split("_", 1)[1]: value for key, value in metrics.items() if key.endswith("_signature")},
        "steps": state["global_step"],
        "loss_curve": [[entry["step"], entry["loss"]] for entry in state["log_history"] if "loss" in entry],
        "validation_curve": validation_curve(state["log_history"], names),
        "command": portable_command(command_for(study, run), study),
    }
    path = result_path(study, run, sweep)
    write_result(path, run, result, run_dir / TASKS[study.task]["predictions"])
    add_study_to_card(run_dir / "README.md", study_card_section(study, run, result, path))
    return result


def write_result(path: Path, run: Run, result: dict, predictions: Path) -> None:
    """The result file at `path` and the test predictions next to it, after setting aside another run's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    set_aside_other_run(path, run)
    if predictions.is_file():
        shutil.copyfile(predictions, path.with_suffix(".test.txt"))
    # Last and whole: a result file marks a finished run, so a kill here must leave either none or all of it.
    write_text_atomically(path, json.dumps(result, indent=1) + "\n")


def write_text_atomically(path: Path, text: str) -> None:
    """Write `path` through a temporary file beside it, so that it is never seen half written."""
    staging = path.with_name(f".{path.name}.partial")
    staging.write_text(text, encoding="utf-8")
    staging.replace(path)


def set_aside_other_run(path: Path, run: Run) -> None:
    """Move the result files of another run of the same preset and seed (the spec's options changed) from `path`
    into `superseded/<that run>.*` beside it, so this run's result does not overwrite them."""
    if not path.is_file():
        return
    old_run = json.loads(path.read_text(encoding="utf-8")).get("run", run.name)
    if old_run == run.name:
        return
    folder = path.parent / "superseded"
    folder.mkdir(exist_ok=True)
    for suffix in (".json", ".test.txt", ".analysis.json"):
        old_file = path.with_suffix(suffix)
        if old_file.is_file():
            old_file.replace(folder / f"{old_run}{suffix}")
    logger.info("%s: the result of %s moved to %s", path.name, old_run, folder)


CARD_BEGIN, CARD_END = "<!-- hf_simple_attn study -->", "<!-- /hf_simple_attn study -->"


def add_study_to_card(card: Path, section: str) -> None:
    """Write (or replace) the model card's "Study" section, so the card of a study model carries its results."""
    if not card.is_file():
        return
    text = card.read_text(encoding="utf-8")
    if CARD_BEGIN in text:
        text = text[: text.index(CARD_BEGIN)].rstrip() + "\n"
    card.write_text(f"{text}\n{section}\n", encoding="utf-8")


def study_card_section(study: Study, run: Run, result: dict, result_file: Path) -> str:
    """Markdown of one run's place in its study, between markers so that a later collect replaces it."""
    rows = [
        ("study", f"`{study.name}`: {study.description}" if study.description else f"`{study.name}`"),
        ("preset, seed", f"`{run.preset}`, {run.seed}"),
        ("options", options_origin(study, run)),
    ]
    for split in ("validation", "test"):
        rows.append((split, ", ".join(f"{name} {value:.2f}" for name, value in result[split].items()) or "-"))
    rows += [
        ("result file", f"`{os.path.relpath(result_file, study.home.parent)}`"),
        ("code", ", ".join(f"`{commit}`" for commit in result["code"])),
        ("command", f"`{' '.join(result['command'])}`"),
    ]
    table = "\n".join(f"| {name} | {value} |" for name, value in rows)
    return f"{CARD_BEGIN}\n## Study\n\n| | |\n|---|---|\n{table}\n{CARD_END}"


def options_origin(study: Study, run: Run) -> str:
    """Where the run's own options come from: its group's sweep (with the scores), the spec, or none."""
    if not run.overrides:
        return "the study's shared arguments"
    chosen = ", ".join(f"{key} {value}" for key, value in run.overrides)
    representative = study.representative_of(run.preset)
    if representative is None:
        return f"{chosen}, set for this preset in the study spec"
    scores = []
    for setting in study.sweep_settings:
        swept = Run(representative, study.seeds_of(representative)[0], tuple(sorted(setting.items())))
        swept_result = read_result(study, swept, sweep=True) or {}
        score = swept_result.get("validation", {}).get(study.selection_metric)
        label = ", ".join(f"{key} {value}" for key, value in swept.overrides)
        scores.append(f"{label}: {'-' if score is None else f'{score:.2f}'}")
    return (
        f"{chosen}, chosen by validation {study.selection_metric} in the sweep of `{representative}` "
        f"({'; '.join(scores)})"
    )


def train_seconds(metrics: dict, state: dict, from_step: int) -> float:
    """Training time of the whole run; a resumed run's last attempt is scaled up to every step."""
    seconds = metrics["train_runtime"]
    steps = state["global_step"]
    if from_step and steps > from_step:
        seconds *= steps / (steps - from_step)
    return round(seconds, 1)


def count_parameters(run_dir: Path, task: str) -> int:
    """Parameters of the trained model (its task head included), counted on the meta device (no weights read)."""
    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(run_dir)
    with torch.device("meta"):
        model = getattr(transformers, TASKS[task]["auto_class"]).from_config(config)
    return model.num_parameters()


def script_module(study: Study):
    """The task's training script as a module (its `SCRIPT_ARGUMENTS` are the options the runs parse)."""
    import importlib.util

    script = REPO_ROOT / TASKS[study.task]["script"]
    spec = importlib.util.spec_from_file_location(script.stem, script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def script_parser(study: Study):
    """A parser of the whole command line of the task's training script (`SCRIPT_ARGUMENTS`) that raises on a bad
    option instead of exiting."""
    from transformers import HfArgumentParser

    return HfArgumentParser(script_module(study).SCRIPT_ARGUMENTS, exit_on_error=False)


def script_data_arguments(study: Study):
    """(the task's module in `hf_simple_attn.recipes`, model arguments, data arguments) as the task's script parses
    the study's command line."""
    task = importlib.import_module(f"..recipes.{TASKS[study.task]['task_module']}", __package__)
    first = Run(study.presets[0], study.seeds_of(study.presets[0])[0])
    *parsed, _ = script_parser(study).parse_args_into_dataclasses(
        command_for(study, first)[2:], return_remaining_strings=True
    )
    model_args = next(group for group in parsed if isinstance(group, ModelArguments))
    data_args = next(group for group in parsed if isinstance(group, task.DataTrainingArguments))
    return task, model_args, data_args


def evaluation_splits(study: Study, splits: tuple[str, ...]) -> dict[str, tuple[list[str], list[str]]]:
    """(sources, references) of each split ("validation", "test") as the study's runs evaluated it, in order, from
    one load of the corpus: the sentences and translations, or the texts and summaries (the raw summaries: the runs
    score them tokenized and decoded, which ROUGE sees the same unless a summary was cut at the target length)."""
    if study.task not in ("translation", "summarization"):
        raise StudyError(f"study {study.name!r}: texts are read for translation and summarization, not {study.task!r}")
    task, model_args, data_args = script_data_arguments(study)
    raw_datasets = task.load_raw_datasets(data_args, model_args)
    texts = {}
    for split in splits:
        limit = data_args.max_predict_samples if split == "test" else data_args.max_eval_samples
        texts[split] = task.source_and_target_texts(select_split(raw_datasets, split, limit, split), data_args)
    return texts


def evaluation_texts(study: Study, split: str = "test") -> tuple[list[str], list[str]]:
    """(sources, references) of one split, as `evaluation_splits`."""
    return evaluation_splits(study, (split,))[split]


def evaluation_labels(study: Study) -> tuple[list[str], list[int]] | None:
    """(label names in id order, each test example's label id) as the study's classification runs read them; the
    names are those `predict_results.txt` writes. None when there are none to score: a GLUE task (hidden test labels),
    a regression, or a test split without a label for every example."""
    task, model_args, data_args = script_data_arguments(study)
    if data_args.task_name is not None:
        return None
    raw_datasets = task.load_raw_datasets(data_args, model_args, True)
    reference_split = raw_datasets["train"] if "train" in raw_datasets else next(iter(raw_datasets.values()))
    label_names, label_to_id = task.read_labels(reference_split, None)
    test = select_split(raw_datasets, "test", data_args.max_predict_samples, "test")
    if label_names is None or "label" not in test.column_names:
        return None
    labels = test["label"] if label_to_id is None else [label_to_id.get(label, -1) for label in test["label"]]
    return None if -1 in labels else ([str(name) for name in label_names], labels)


# ---- the loop ----------------------------------------------------------------------------------------------------


def write_baseline_result(study: Study, name: str) -> Path | None:
    """Score an outside system on the study's validation and test splits (once); None if it is not installed."""
    from .baselines import BASELINES

    path = study.results_dir / "baselines" / f"{name}.json"
    if path.is_file():
        return None
    baseline = BASELINES[name]
    task, _, data_args = script_data_arguments(study)
    source_lang, target_lang = data_args.source_lang, data_args.target_lang
    if not baseline.available(source_lang, target_lang):
        logger.warning("baseline %s skipped: %s", name, baseline.install_hint(source_lang, target_lang))
        return None
    scorer = task.TranslationScorer()
    result = {"study": study.name, "baseline": name, "task": study.task, "system": baseline.describe()}
    for split, (sources, references) in evaluation_splits(study, ("validation", "test")).items():
        predictions = baseline.translate(sources, source_lang, target_lang)
        result[split] = scorer(predictions, references)
        if split == "test":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.with_suffix(".test.txt").write_text("\n".join(predictions) + "\n", encoding="utf-8")
    result["signatures"] = scorer.signatures
    write_text_atomically(path, json.dumps(result, indent=1) + "\n")
    logger.info("%s: validation %s, test %s", path.name, result["validation"], result["test"])
    return path


def promote_sweep_result(study: Study, run: Run) -> dict:
    """Write a main run's result from the finished sweep run it equals (same options, same name), for when the run
    folder is gone (another machine, a cleaned disk): the scores and test predictions are that run's, so it is not
    trained again. Its model, and so its analyses, stay missing unless the folder comes back."""
    sweep_path = result_path(study, run, sweep=True)
    result = dict(json.loads(sweep_path.read_text(encoding="utf-8")), sweep=False)
    write_result(result_path(study, run), run, result, sweep_path.with_suffix(".test.txt"))
    return result


def pending_runs(study: Study) -> list[tuple[Run, bool]]:
    """(run, is_sweep) for every run without a result file whose options are known now."""
    todo = [(run, True) for run in sweep_runs(study) if read_result(study, run, sweep=True) is None]
    todo += [(run, False) for run in main_runs(study) if run is not None and read_result(study, run) is None]
    return todo


def unanalysed_runs(study: Study) -> list[Run]:
    """Main runs with a result but no analysis yet, whose trained model is still here."""
    return [
        run
        for run in main_runs(study)
        if run is not None
        and result_path(study, run).is_file()
        and not result_path(study, run).with_suffix(".analysis.json").is_file()
        and (study.runs_dir / run.name / "config.json").is_file()
    ]


def run_study(study: Study, jobs: int = 2, poll_seconds: float = 5.0, analyze=None, retries: int = 2) -> list[Path]:
    """Train every run of the study that has no result yet, `jobs` at a time; returns the result files written.

    `analyze(study, run, result_path)` is called on each main run with a result and no analysis yet (the papers'
    analyses). Options the task's script would refuse stop it before any run starts (`check_script_options`).
    A run that fails (or ends without its results) is started again from its last checkpoint, up to `retries`
    times. Interrupted, it stops its training processes; their checkpoints stay for the next start. A run that
    another runner of the study is training (`claim`) is left to it; this one ends when only such runs remain.
    """
    check_script_options(study)
    written, running, analysed, failures = [], {}, set(), Counter()
    claims, elsewhere = {}, set()  # the locks of the runs this runner trains; runs another runner trains
    for name in study.baselines:
        path = write_baseline_result(study, name)
        if path is not None:
            written.append(path)
    try:
        while True:
            for name, (run, process) in list(running.items()):
                if process.poll() is not None:
                    del running[name]
                    claims.pop(name).release()
                    if process.returncode != 0 or not run_finished(study, run):
                        failures[name] += 1
                        report_failure(study, run, process.returncode, failures[name], retries)
            startable, collected = {}, False
            if analyze is not None and study.analyses:
                for run in unanalysed_runs(study):
                    if run.name not in analysed:  # once a session: some tasks have no analyses, some fail
                        analysed.add(run.name)
                        try:
                            analyze(study, run, result_path(study, run))
                        except Exception:  # an analysis must not stop the training runs
                            logger.exception("%s: the analyses failed; the run's result stands", run.name)
            for run, sweep in pending_runs(study):
                if run.name in running:
                    continue
                if run_finished(study, run):  # its metrics are complete, even if a later step (the card) failed
                    path = result_path(study, run, sweep)
                    result = collect(study, run, sweep)
                    logger.info("%s: validation %s, test %s", path.name, result["validation"], result["test"])
                    written.append(path)
                    collected = True
                elif not sweep and read_result(study, run, sweep=True) is not None:
                    path = result_path(study, run)
                    result = promote_sweep_result(study, run)
                    logger.info(
                        "%s: from the sweep's result (its run folder is gone), test %s", path.name, result["test"]
                    )
                    written.append(path)
                    collected = True
                elif failures[run.name] <= retries:
                    startable[run.name] = run
            for run in startable.values():
                if len(running) >= jobs:
                    break
                lock = claim(study, run)
                if lock is None:
                    if run.name not in elsewhere:
                        logger.info(
                            "%s is being trained by another runner; its result is collected once it ends", run.name
                        )
                        elsewhere.add(run.name)
                    continue
                claims[run.name] = lock
                elsewhere.discard(run.name)
                logger.info("training %s", run.name)
                running[run.name] = (run, train(study, run))
            if not running and set(startable) <= elsewhere and not collected:
                break
            if not collected:
                time.sleep(poll_seconds)
    finally:
        for _, process in running.values():
            process.terminate()
            process.wait()
        for lock in claims.values():
            lock.release()
    failed = sorted(name for name, count in failures.items() if count > retries)
    if failed:
        raise RuntimeError(f"{len(failed)} run(s) failed: {failed}")
    return written
