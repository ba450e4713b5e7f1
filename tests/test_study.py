"""The study runner (plan, resume after a kill, result files) and the summary maths."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sacrebleu
from filelock import FileLock

from hf_simple_attn.studies.runner import (
    Run,
    StudyError,
    check_script_options,
    chosen_setting,
    command_for,
    evaluation_texts,
    load_study,
    main_runs,
    options_origin,
    pending_runs,
    read_result,
    result_path,
    run_study,
    set_aside_other_run,
    sweep_runs,
    write_text_atomically,
)
from hf_simple_attn.studies.summary import load_results, paired_bootstrap, summarize


REPO_ROOT = Path(__file__).resolve().parent.parent
TOY_ARGUMENTS = {
    "dataset_name": "embedded",
    "d_model": 16,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "attention_heads": 2,
    "ffn_dim": 32,
    "vocab_size": 300,
    "max_train_samples": 200,
    "max_eval_samples": 12,
    "max_predict_samples": 12,
    "max_steps": 30,
    "per_device_train_batch_size": 8,
    "per_device_eval_batch_size": 12,
    "val_max_target_length": 8,
    "logging_steps": 5,
    "learning_rate": 1e-3,
}


def write_spec(folder: Path, **fields) -> Path:
    spec = {
        "name": "toy",
        "task": "translation",
        "arguments": TOY_ARGUMENTS,
        "presets": ["base", "hc-sa"],
        "seeds": [1],
        "save_steps": 5,
        "analyses": False,
    }
    spec.update(fields)
    path = folder / "toy.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def fake_result(study, run: Run, validation_bleu: float, sweep: bool) -> None:
    path = result_path(study, run, sweep)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "preset": run.preset,
                "seed": run.seed,
                "validation": {"bleu": validation_bleu},
                "overrides": dict(run.overrides),
            }
        )
    )


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"task": "parsing"}, "task 'parsing' is not one of"),
        ({"presets": ["base", "band6"]}, "'band6' is not a translation preset"),
        ({"seeds": [1.5]}, "seeds.default must be a non-empty list of ints"),
        ({"colour": "red"}, "unknown field(s) ['colour']"),
        ({"arguments": dict(TOY_ARGUMENTS, seed=3)}, "arguments ['seed'] are set by the runner"),
        ({"sweep": {"settings": [{"learning_rate": 1e-3}], "groups": {"g": ["ran-d"]}}}, "'ran-d' is not among"),
        ({"sweep": {"settings": [], "groups": {"g": ["base"]}}}, "sweep needs 'settings'"),
        ({"baselines": ["google"]}, "baselines: translation studies may name ['apertium']"),
        ({"preset_arguments": {"ran-d": {"learning_rate": 1e-3}}}, "preset_arguments: 'ran-d' is not among"),
        ({"preset_arguments": {"base": {}}}, "preset_arguments.base must be a non-empty dict"),
        ({"preset_arguments": {"base": {"seed": 2}}}, "preset_arguments.base must be a non-empty dict"),
        (
            {
                "preset_arguments": {"hc-sa": {"learning_rate": 1e-3}},
                "sweep": {"settings": [{"learning_rate": 1e-3}], "groups": {"g": ["hc-sa"]}},
            },
            "'hc-sa' takes its options from its sweep group",
        ),
    ],
)
def test_bad_specs_name_the_field(tmp_path, fields, message):
    with pytest.raises(StudyError) as error:
        load_study(write_spec(tmp_path, **fields))
    assert message in str(error.value)
    assert "toy.json" in str(error.value)


def test_the_sweep_chooses_on_validation_and_its_run_is_reused(tmp_path):
    settings = [{"learning_rate": 1e-3}, {"learning_rate": 5e-4}]
    study = load_study(
        write_spec(
            tmp_path,
            presets=["base", "hc-sa", "sh-x"],
            seeds={"default": [1], "hc-sa": [1, 2]},
            sweep={"settings": settings, "groups": {"hc": ["hc-sa", "sh-x"]}},
        )
    )
    assert [run.name for run in sweep_runs(study)] == ["hc-sa--lr0.001--seed1", "hc-sa--lr0.0005--seed1"]
    # base is outside every group: it runs at once with the spec's arguments; the group waits for its sweep.
    assert [None if run is None else run.name for run in main_runs(study)] == ["base--seed1", None, None, None]
    fake_result(study, sweep_runs(study)[0], validation_bleu=3.0, sweep=True)
    assert chosen_setting(study, "hc-sa") is None
    fake_result(study, sweep_runs(study)[1], validation_bleu=4.0, sweep=True)
    assert chosen_setting(study, "hc-sa") == (("learning_rate", 5e-4),)
    names = [run.name for run in main_runs(study)]
    # Every preset's first seed comes before any preset's second.
    assert names == ["base--seed1", "hc-sa--lr0.0005--seed1", "sh-x--lr0.0005--seed1", "hc-sa--lr0.0005--seed2"]
    assert options_origin(study, main_runs(study)[2]) == (
        "learning_rate 0.0005, chosen by validation bleu in the sweep of `hc-sa` "
        "(learning_rate 0.001: 3.00; learning_rate 0.0005: 4.00)"
    )
    # The representative's main run is the sweep run itself (same folder, trained once).
    assert names[1] == sweep_runs(study)[1].name
    command = command_for(study, main_runs(study)[2])
    assert command[command.index("--learning_rate") + 1] == "0.0005"
    assert command[command.index("--attention_preset") + 1] == "sh-x"
    assert command[command.index("--output_dir") + 1] == str(tmp_path / "runs" / "toy" / "sh-x--lr0.0005--seed1")


def test_a_main_run_that_is_a_finished_sweep_run_takes_its_result_when_the_run_folder_is_gone(tmp_path, monkeypatch):
    settings = [{"learning_rate": 1e-3}, {"learning_rate": 5e-4}]
    study = load_study(
        write_spec(tmp_path, presets=["hc-sa"], sweep={"settings": settings, "groups": {"hc": ["hc-sa"]}})
    )
    for run, validation_bleu in zip(sweep_runs(study), (3.0, 4.0)):
        path = result_path(study, run, sweep=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        result = {
            "preset": run.preset,
            "seed": 1,
            "sweep": True,
            "run": run.name,
            "validation": {"bleu": validation_bleu},
        }
        path.write_text(json.dumps(dict(result, test={"bleu": validation_bleu + 1})))
        path.with_suffix(".test.txt").write_text(f"ein Haus {validation_bleu}\n")
    assert not study.runs_dir.exists()  # trained on another machine
    monkeypatch.setattr("hf_simple_attn.studies.runner.train", lambda *args: pytest.fail("a run was trained again"))
    [written] = run_study(study, jobs=1, poll_seconds=0)
    assert written == result_path(study, main_runs(study)[0]) == study.results_dir / "hc-sa--seed1.json"
    result = json.loads(written.read_text())
    assert result["validation"] == {"bleu": 4.0} and result["test"] == {"bleu": 5.0} and result["sweep"] is False
    assert written.with_suffix(".test.txt").read_text() == "ein Haus 4.0\n"
    assert run_study(study, jobs=1, poll_seconds=0) == []


def test_preset_arguments_give_a_preset_outside_the_sweep_its_own_options(tmp_path):
    study = load_study(
        write_spec(tmp_path, presets=["base", "hc-sa"], preset_arguments={"hc-sa": {"learning_rate": 2e-3}})
    )
    runs = main_runs(study)
    assert [run.name for run in runs] == ["base--seed1", "hc-sa--lr0.002--seed1"]
    learning_rates = []
    for run in runs:
        command = command_for(study, run)
        learning_rates.append(command[command.index("--learning_rate") + 1])
    assert learning_rates == ["0.001", "0.002"]
    assert options_origin(study, runs[1]) == "learning_rate 0.002, set for this preset in the study spec"


def test_a_result_of_other_options_is_not_taken_for_the_run_the_spec_now_asks_for(tmp_path):
    study = load_study(
        write_spec(tmp_path, presets=["base", "hc-sa"], preset_arguments={"hc-sa": {"learning_rate": 2e-3}})
    )
    old_run = Run("hc-sa", 1, (("learning_rate", 1e-3),))
    path = result_path(study, old_run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"preset": "hc-sa", "seed": 1, "run": old_run.name, "validation": {"bleu": 1.0}}))
    new_run = main_runs(study)[1]
    assert new_run.name == "hc-sa--lr0.002--seed1" and result_path(study, new_run) == path
    assert read_result(study, new_run) is None
    assert (new_run, False) in pending_runs(study)
    path.write_text(json.dumps({"preset": "hc-sa", "seed": 1, "run": new_run.name, "validation": {"bleu": 2.0}}))
    assert read_result(study, new_run)["validation"] == {"bleu": 2.0}
    assert (new_run, False) not in pending_runs(study)


def test_a_replaced_result_is_set_aside_not_overwritten(tmp_path):
    study = load_study(
        write_spec(tmp_path, presets=["base", "hc-sa"], preset_arguments={"hc-sa": {"learning_rate": 2e-3}})
    )
    old_run, new_run = Run("hc-sa", 1, (("learning_rate", 1e-3),)), main_runs(study)[1]
    path = result_path(study, new_run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run": old_run.name}))
    path.with_suffix(".test.txt").write_text("old output\n")
    path.with_suffix(".analysis.json").write_text("{}")
    set_aside_other_run(path, new_run)
    superseded = path.parent / "superseded"
    assert sorted(file.name for file in superseded.iterdir()) == [
        f"{old_run.name}.analysis.json",
        f"{old_run.name}.json",
        f"{old_run.name}.test.txt",
    ]
    assert not path.exists() and not path.with_suffix(".analysis.json").exists()
    path.write_text(json.dumps({"run": new_run.name}))
    set_aside_other_run(path, new_run)  # this run's own result stays
    assert path.is_file() and len(list(superseded.iterdir())) == 3


def test_a_result_file_is_never_seen_half_written(tmp_path, monkeypatch):
    """A result file marks a finished run: one cut off while being written must not exist, nor be read by the
    summary."""
    study = load_study(write_spec(tmp_path, presets=["base"]))
    path = result_path(study, Run("base", 1))
    path.parent.mkdir(parents=True, exist_ok=True)

    def killed(self, target):
        raise KeyboardInterrupt  # the process dies between writing and renaming

    monkeypatch.setattr(Path, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomically(path, json.dumps({"preset": "base", "seed": 1}))
    monkeypatch.undo()
    assert not path.exists() and read_result(study, Run("base", 1)) is None
    assert (Run("base", 1), False) in pending_runs(study) and load_results(study.results_dir) == []
    write_text_atomically(path, json.dumps({"preset": "base", "seed": 1}))
    assert json.loads(path.read_text()) == {"preset": "base", "seed": 1}


def wait_for(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(0.1)


def fake_apertium(folder: Path) -> Path:
    """An `apertium` that knows the eng-deu pair and returns its input unchanged."""
    folder.mkdir()
    script = folder / "apertium"
    script.write_text('#!/bin/sh\nif [ "$1" = "-l" ]; then echo eng-deu; else cat; fi\n')
    script.chmod(0o755)
    return folder


def test_a_killed_study_resumes_from_its_checkpoint_and_writes_every_result(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_apertium(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}")
    # Runs evaluate on validation every 15 steps as well (the spec's own options): the validation curve.
    spec = write_spec(
        tmp_path, baselines=["apertium"], arguments=dict(TOY_ARGUMENTS, eval_strategy="steps", eval_steps=15)
    )
    study = load_study(spec)
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO_ROOT))
    command = [sys.executable, str(REPO_ROOT / "studies" / "run_study.py"), str(spec), "--jobs", "2", "--no_analyses"]
    log = tmp_path / "runner.log"
    with log.open("w") as output:
        runner = subprocess.Popen(command, env=env, start_new_session=True, stdout=output, stderr=subprocess.STDOUT)
    checkpoint_state = study.runs_dir / "base--seed1" / "checkpoint-10" / "trainer_state.json"
    try:
        wait_for(lambda: checkpoint_state.is_file() or runner.poll() is not None, timeout=240)
        assert checkpoint_state.is_file(), log.read_text()[-3000:]
    finally:
        os.killpg(runner.pid, signal.SIGKILL)  # the machine stops: runner and training processes die at once
        runner.wait()
    assert not result_path(study, Run("base", 1)).exists()

    written = run_study(study, jobs=2, poll_seconds=0.5)
    assert sorted(path.name for path in written) == ["base--seed1.json", "hc-sa--seed1.json"]
    result = json.loads(result_path(study, Run("base", 1)).read_text())
    assert result["resumed_from_step"] >= 10
    assert result["steps"] == 30
    assert {
        "study",
        "preset",
        "seed",
        "task",
        "parameters",
        "train_seconds",
        "validation",
        "test",
        "learning_rate",
        "loss_curve",
        "signatures",
    } <= set(result)
    assert set(result["test"]) == {"bleu", "chrf"} and set(result["validation"]) == {"bleu", "chrf"}
    assert result["parameters"] > 0 and result["train_seconds"] > 0 and result["learning_rate"] == 1e-3
    assert [step for step, _ in result["loss_curve"]] == [5, 10, 15, 20, 25, 30]
    assert [step for step, _ in result["validation_curve"]] == [15, 30]
    assert result["validation_curve"][-1][1] == result["validation"]
    assert result["signatures"]["bleu_signature"].startswith("nrefs:1|case:mixed")
    predictions = result_path(study, Run("base", 1)).with_suffix(".test.txt").read_text().splitlines()
    sources, references = evaluation_texts(study)
    assert len(predictions) == len(references) == len(sources) == 12
    assert result["test"]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(predictions, [references]).score, abs=1e-3)
    assert result["command"][:2] == ["python", "training/run_translation.py"]
    assert result["command"][result["command"].index("--output_dir") + 1] == f"{tmp_path.name}/runs/toy/base--seed1"

    # The run's model card carries its study results (replaced, not repeated, when collected again).
    card = (study.runs_dir / "base--seed1" / "README.md").read_text()
    assert card.count("## Study") == 1 and "| study | `toy` |" in card
    assert f"| test | bleu {result['test']['bleu']:.2f}, chrf {result['test']['chrf']:.2f} |" in card
    assert "| options | the study's shared arguments |" in card
    assert f"`{tmp_path.name}/results/toy/base--seed1.json`" in card

    # The outside baseline (here a system that copies the English source) is scored on the same split.
    baseline = json.loads((study.results_dir / "baselines" / "apertium.json").read_text())
    assert baseline["test"]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(sources, [references]).score, abs=1e-3)
    assert baseline["signatures"] == result["signatures"]

    # A finished study trains nothing again; the summary reads what it wrote.
    assert run_study(study, jobs=2, poll_seconds=0.5) == []
    readme = summarize(study).read_text()
    assert "| base | 1 |" in readme and "| hc-sa | 1 |" in readme
    assert "| apertium (outside baseline) | - |" in readme and "p vs apertium (bleu)" in readme
    tests = json.loads((study.results_dir / "significance.json").read_text())
    assert set(tests) == {"base", "apertium"} and set(tests["apertium"]) == {"base", "hc-sa"}

    # Runs trained without analyses get them on the next start; a failing analysis is logged, not fatal.
    analysed = []

    def analyze(study, run, path):
        analysed.append(run.name)
        if run.preset == "hc-sa":
            raise RuntimeError("broken analysis")
        path.with_suffix(".analysis.json").write_text("{}")

    study.analyses = True
    assert run_study(study, jobs=2, poll_seconds=0.1, analyze=analyze) == []
    assert analysed == ["base--seed1", "hc-sa--seed1"]
    assert len(load_results(study.results_dir)) == 2  # analysis files are not results
    assert (study.results_dir / "loss_curves.png").stat().st_size > 0
    assert (study.results_dir / "scores.png").stat().st_size > 0


REFERENCES = [f"the {animal} sat on the mat number {n} today" for n in range(40) for animal in ("cat",)]


def test_paired_bootstrap_separates_a_clear_difference_from_a_small_one():
    good = list(REFERENCES)
    bad = [text.replace("sat on the mat", "stood near a chair") for text in REFERENCES]
    nearly = good[:-1] + ["the dog sat on a mat number 39 today"]

    clear = paired_bootstrap(bad, good, REFERENCES)
    assert clear["bleu"]["score"] == pytest.approx(100.0)
    assert clear["bleu"]["baseline"] == pytest.approx(sacrebleu.corpus_bleu(bad, [REFERENCES]).score, abs=1e-3)
    assert clear["chrf"]["baseline"] == pytest.approx(sacrebleu.corpus_chrf(bad, [REFERENCES]).score, abs=1e-3)
    assert clear["bleu"]["p_value"] < 0.05 and clear["chrf"]["p_value"] < 0.05

    small = paired_bootstrap(good, nearly, REFERENCES)
    assert small["bleu"]["p_value"] > 0.05
    assert small == paired_bootstrap(good, nearly, REFERENCES)  # a fixed seed: the same figures every time

    same = paired_bootstrap(good, list(good), REFERENCES)
    assert same["bleu"]["p_value"] == 1.0 and same["bleu"]["score"] == same["bleu"]["baseline"]


@pytest.mark.parametrize("spec", sorted((REPO_ROOT / "studies").glob("*.json")), ids=lambda path: path.stem)
def test_every_committed_study_spec_loads_and_its_script_accepts_every_option(spec):
    study = load_study(spec)
    assert study.name == spec.stem
    check_script_options(study)


def test_a_run_another_runner_trains_is_left_to_it(tmp_path, monkeypatch, caplog):
    """The same study started twice: each run is trained by one runner only, never into one folder by two."""
    study = load_study(write_spec(tmp_path))
    held_elsewhere = FileLock(study.runs_dir / "base--seed1.lock", timeout=0)
    study.runs_dir.mkdir(parents=True)
    started = []

    class FailedProcess:
        returncode = 1

        def poll(self):
            return self.returncode

    def train(study, run):
        started.append(run.name)
        return FailedProcess()

    monkeypatch.setattr("hf_simple_attn.studies.runner.train", train)
    caplog.set_level("INFO", logger="hf_simple_attn.studies.runner")
    with held_elsewhere, pytest.raises(RuntimeError, match=r"1 run\(s\) failed: \['hc-sa--seed1'\]"):
        run_study(study, jobs=2, poll_seconds=0, retries=0)
    assert started == ["hc-sa--seed1"]
    messages = [record.getMessage() for record in caplog.records]
    assert "base--seed1 is being trained by another runner; its result is collected once it ends" in messages
    # released when its process ended: the next runner may train it
    with FileLock(study.runs_dir / "hc-sa--seed1.lock", timeout=0):
        pass


def test_a_failed_run_is_started_again_up_to_the_retries_then_reported(tmp_path, monkeypatch, caplog):
    """A run killed mid-way (a transient failure) continues from its checkpoint in the same invocation; one that
    keeps failing, or ends without its results, is given up after `retries` restarts."""
    study = load_study(write_spec(tmp_path))
    started, collected = [], []

    class EndedProcess:
        def __init__(self, returncode):
            self.returncode = returncode

        def poll(self):
            return self.returncode

    def train(study, run):
        started.append(run.name)
        if run.preset == "hc-sa":  # exits 0 every time, but writes no results
            return EndedProcess(0)
        if started.count(run.name) == 1:  # base: killed the first time, finishes the second
            return EndedProcess(-9)
        run_dir = study.runs_dir / run.name
        run_dir.mkdir(parents=True)
        (run_dir / "all_results.json").write_text(json.dumps({"predict_runtime": 1.0}))
        return EndedProcess(0)

    def collect(study, run, sweep):
        collected.append(run.name)
        result = {"preset": run.preset, "seed": run.seed, "run": run.name, "validation": {}, "test": {}}
        result_path(study, run).parent.mkdir(parents=True, exist_ok=True)
        result_path(study, run).write_text(json.dumps(result))
        return result

    monkeypatch.setattr("hf_simple_attn.studies.runner.train", train)
    monkeypatch.setattr("hf_simple_attn.studies.runner.collect", collect)
    caplog.set_level("INFO", logger="hf_simple_attn.studies.runner")
    with pytest.raises(RuntimeError, match=r"1 run\(s\) failed: \['hc-sa--seed1'\]"):
        run_study(study, jobs=2, poll_seconds=0, retries=2)
    assert sorted(started) == ["base--seed1"] * 2 + ["hc-sa--seed1"] * 3
    assert collected == ["base--seed1"]
    messages = [record.getMessage() for record in caplog.records]
    base_log, hc_sa_log = (study.runs_dir / name / "train.log" for name in ("base--seed1", "hc-sa--seed1"))
    assert (
        f"base--seed1 failed (exit -9) (see {base_log}); starting it again from its last checkpoint, retry 1 of 2"
    ) in messages
    assert (
        f"hc-sa--seed1 ended without its results (see {hc_sa_log}); starting it again from its last checkpoint, "
        "retry 2 of 2"
    ) in messages
    assert messages[-1] == f"hc-sa--seed1 ended without its results: see {hc_sa_log}"


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            {"arguments": dict(TOY_ARGUMENTS, learnig_rate=1e-3)},
            "run base--seed1: training/run_translation.py has no option --learnig_rate 0.001",
        ),
        (
            {"preset_arguments": {"hc-sa": {"num_beems": 4}}},
            "run hc-sa--num_beems4--seed1: training/run_translation.py has no option --num_beems 4",
        ),
        (
            {"sweep": {"settings": [{"warmup_steps": "many"}], "groups": {"g": ["base"]}}},
            "refuses its options: argument --warmup_steps/--warmup-steps: invalid float value: 'many'",
        ),
        ({"arguments": dict(TOY_ARGUMENTS, train_sampling_strategy="longest")}, "invalid choice: 'longest'"),
    ],
)
def test_options_a_script_would_refuse_stop_the_study_before_any_run(tmp_path, fields, message, monkeypatch):
    study = load_study(write_spec(tmp_path, **fields))
    monkeypatch.setattr("hf_simple_attn.studies.runner.train", lambda *args: pytest.fail("a run was started"))
    with pytest.raises(StudyError) as error:
        run_study(study, jobs=1, poll_seconds=0)
    assert message in str(error.value) and "toy.json" in str(error.value)
    assert not study.runs_dir.exists()


def test_the_difference_from_base_pairs_each_run_with_base_of_its_seed(tmp_path):
    from hf_simple_attn.studies.summary import results_table

    study = load_study(write_spec(tmp_path, presets=["base", "hc-sa", "sh-x"]))

    def result(preset, seed, bleu):
        scores = {"bleu": bleu, "chrf": 50.0}
        return {"preset": preset, "seed": seed, "test": scores, "validation": scores}

    common = {"learning_rate": 1e-3, "parameters": 1000, "train_seconds": 60.0}
    runs = [result("base", 1, 30.0), result("base", 2, 31.0), result("base", 3, 35.0)]  # mean 32
    runs += [result("hc-sa", 1, 33.0), result("sh-x", 1, 31.0), result("sh-x", 2, 33.0)]
    rows = results_table(study, [dict(run, **common) for run in runs], {}, []).splitlines()
    assert rows[0].split(" | ")[4] == "Δ vs base (bleu)"
    differences = {row.split(" | ")[0][2:]: row.split(" | ")[4] for row in rows[2:]}
    # hc-sa: 33 - 30 (base at seed 1), not 33 - 32; sh-x: mean of 31 - 30 and 33 - 31
    assert differences == {"base": "-", "hc-sa": "+3.00", "sh-x": "+1.50"}


def test_the_readme_block_of_a_study_is_replaced_and_nothing_else():
    from hf_simple_attn.studies.summary import replace_block

    text = "intro\n<!-- study:toy -->\nold table\n<!-- /study:toy -->\nafter\n<!-- study:other -->\nkeep\n<!-- /study:other -->\n"
    updated = replace_block(text, "toy", "| new | table |")
    assert updated == text.replace("old table", "| new | table |")
    with pytest.raises(ValueError, match="no <!-- study:absent -->"):
        replace_block(text, "absent", "x")
