"""The distillation study's summary (`hf_simple_attn.studies.distillation`, `studies/distill_summary.py`) on small
result files written here: a teacher, two layouts, two seeds, three conditions with some runs missing."""

import importlib.util
import json
from functools import partial
from pathlib import Path

import pytest
import sacrebleu

from hf_simple_attn.studies.distillation import (
    CONDITIONS,
    TEACHER_STUDY,
    decoding_speeds,
    distillation_summary,
    engine_ratio,
    load_distillation_studies,
    teacher_bootstrap,
    write_summary,
)
from hf_simple_attn.studies.distillation import curve_table as curve_table_of
from hf_simple_attn.studies.distillation import report as report_of
from hf_simple_attn.studies.distillation import results_table as results_table_of
from hf_simple_attn.studies.runner import StudyError
from hf_simple_attn.studies.summary import paired_bootstrap


REPO = Path(__file__).resolve().parent.parent
REFERENCES = [f"the cat number {n} sat on the mat today" for n in range(6)]
TEACHER_PREDICTIONS = [f"the cat number {n} sat on a mat today" for n in range(6)]
# (condition, layout, seed): (validation BLEU at steps 500, 1,000 and 1,500; test BLEU; test chrF). The teacher has
# validation BLEU 20, so 98 % of it is 19.6.
RUNS = {
    ("fine-tuned", "hc-sa", 1): ([18.0, 19.6, 21.0], 28.0, 49.0),  # reaches 19.6 at 1,000 (equal counts)
    ("fine-tuned", "hc-sa", 2): ([19.0, 19.5, 19.58], 26.0, 47.0),  # never reaches it
    ("fine-tuned", "sh-x", 1): ([19.7, 20.0, 20.5], 30.0, 50.0),  # the teacher's own predictions
    ("fine-tuned", "sh-x", 2): ([15.0, 16.0, 17.0], 24.0, 45.0),
    ("distilled", "hc-sa", 1): ([19.6, 20.0, 20.0], 29.0, 49.5),
    ("distilled", "hc-sa", 2): ([18.0, 18.0, 19.7], 29.5, 49.5),
    ("distilled", "sh-x", 1): ([10.0, 12.0, 14.0], 20.0, 40.0),  # seed 2 missing
    ("from scratch", "hc-sa", 1): ([5.0, 8.0, 10.0], 12.0, 30.0),  # seed 2 missing, sh-x missing
}
SPEEDS = {
    "cpu": {"hc-sa": "1.05× (0.90-1.20)", "sh-x": "-"},
    "engine": {"hc-sa": "1.10× (1.08-1.12)", "sh-x": "1.52× (1.50-1.55)"},
    "gpu": {"hc-sa": "0.89×", "sh-x": "1.24×"},
    "sources": [],
}


def predictions_of(condition: str, layout: str, seed: int) -> list[str]:
    if (condition, layout, seed) == ("fine-tuned", "sh-x", 1):
        return list(TEACHER_PREDICTIONS)
    return [f"{condition} {layout} {seed} cat number {n} on the mat" for n in range(6)]


def write_run(results_dir: Path, preset: str, seed: int, curve, test_bleu, test_chrf, predictions, steps=1500):
    results_dir.mkdir(parents=True, exist_ok=True)
    result = {
        "preset": preset,
        "seed": seed,
        "steps": steps,
        "validation": {"bleu": curve[-1], "chrf": 40.0},
        "test": {"bleu": test_bleu, "chrf": test_chrf},
        "validation_curve": [[500 * (index + 1), {"bleu": bleu, "chrf": 40.0}] for index, bleu in enumerate(curve)],
    }
    (results_dir / f"{preset}--seed{seed}.json").write_text(json.dumps(result), encoding="utf-8")
    (results_dir / f"{preset}--seed{seed}.test.txt").write_text("\n".join(predictions) + "\n", encoding="utf-8")


@pytest.fixture
def studies_dir(tmp_path):
    """The four specs and their results under tmp_path/studies."""
    folder = tmp_path / "studies"
    folder.mkdir()
    arguments = {"dataset_name": "embedded", "max_steps": 1500}
    specs = {TEACHER_STUDY: (["base"], [1])} | {name: (["hc-sa", "sh-x"], [1, 2]) for name in CONDITIONS.values()}
    for name, (presets, seeds) in specs.items():
        spec = {"name": name, "task": "translation", "arguments": arguments, "presets": presets, "seeds": seeds}
        (folder / f"{name}.json").write_text(json.dumps(spec), encoding="utf-8")
    results = folder / "results"
    write_run(results / TEACHER_STUDY, "base", 1, [20.0], 30.0, 50.0, TEACHER_PREDICTIONS, steps=15000)
    for (condition, layout, seed), (curve, bleu, chrf) in RUNS.items():
        predictions = predictions_of(condition, layout, seed)
        write_run(results / CONDITIONS[condition], layout, seed, curve, bleu, chrf, predictions)
    return folder


def fake_test(calls: list):
    """A paired test that records its (baseline, system) pair and gives p = 0.5."""

    def test(baseline, system):
        calls.append((baseline, system))
        return {
            name: {"baseline": 1.0, "score": 2.0, "mean": 2.0, "ci": 0.5, "p_value": 0.5} for name in ("bleu", "chrf")
        }

    return test


def test_steps_to_98_percent_means_and_missing_runs(studies_dir):
    summary = distillation_summary(load_distillation_studies(studies_dir))
    assert summary["target_bleu"] == pytest.approx(19.6)
    fine_tuned = summary["layouts"]["hc-sa"]["fine-tuned"]
    assert fine_tuned["seeds"] == [1, 2]
    assert fine_tuned["steps_to_target"] == [[1, 1000], [2, None]]  # 19.6 counts as reached; 19.58 does not
    assert fine_tuned["test"]["bleu"]["mean"] == 27.0
    assert fine_tuned["test"]["bleu"]["std"] == pytest.approx(2**0.5, abs=1e-4)  # sample std of 28 and 26
    assert fine_tuned["validation_curve"] == [[500, 18.5], [1000, 19.55], [1500, 20.29]]
    assert summary["layouts"]["sh-x"]["fine-tuned"]["steps_to_target"] == [[1, 500], [2, None]]
    assert summary["layouts"]["hc-sa"]["distilled"]["steps_to_target"] == [[1, 500], [2, 1500]]
    assert summary["layouts"]["sh-x"]["distilled"]["seeds"] == [1]
    assert summary["layouts"]["sh-x"]["distilled"]["test"]["bleu"]["std"] is None
    assert "from scratch" not in summary["layouts"]["sh-x"]  # no run at all: no row, not a row of zeros
    missing = [(run["study"], run["layout"], run["seed"]) for run in summary["missing"]]
    assert missing == [
        ("mt-distill-kd", "sh-x", 2),
        ("mt-distill-scratch", "hc-sa", 2),
        ("mt-distill-scratch", "sh-x", 1),
        ("mt-distill-scratch", "sh-x", 2),
    ]


def test_the_tables_text(studies_dir):
    studies = load_distillation_studies(studies_dir)
    summary = distillation_summary(studies, teacher_bootstrap(studies, fake_test([])), SPEEDS)
    table = results_table_of(summary).splitlines()
    assert table[0] == (
        "| layout | condition | seeds | test bleu | test chrf | Δ vs teacher (bleu) | steps to 98 % of the teacher | "
        "p vs teacher (bleu) | CPU eager vs base | CPU engine vs base | GPU decoding vs base |"
    )
    assert table[2] == (
        "| `hc-sa` | fine-tuned | 1,2 | 27.00 ± 1.41 | 48.00 ± 1.41 | -3.00 | 1,000, not reached | 0.500, 0.500 | "
        "1.05× (0.90-1.20) | 1.10× (1.08-1.12) | 0.89× |"
    )
    assert table[5] == (
        "| `sh-x` | fine-tuned | 1,2 | 27.00 ± 4.24 | 47.50 ± 3.54 | -3.00 | 500, not reached | 0.500, 0.500 | - | "
        "1.52× (1.50-1.55) | 1.24× |"
    )
    assert table[6] == (
        "| `sh-x` | distilled | 1 | 20.00 | 40.00 | -10.00 | not reached | 0.500 | - | 1.52× (1.50-1.55) | 1.24× |"
    )
    assert len(table) == 2 + 5  # hc-sa in three conditions, sh-x in two
    curves = curve_table_of(summary).splitlines()
    assert curves[0] == "| layout | condition | 500 | 1,000 | 1,500 |"
    assert curves[2] == "| `hc-sa` | fine-tuned | 18.50 | 19.55 | 20.29 |"
    text = report_of(summary, "results/")
    assert (
        "Teacher: `base` (`mt-distill-teacher`, seed 1, 15,000 steps), validation BLEU 20.00, test BLEU 30.00, test "
        "chrF 50.00; 98 % of its validation BLEU: 19.60." in text
    )
    assert (
        "Runs without results yet (4): `mt-distill-kd`: `sh-x` seed 2; `mt-distill-scratch`: `hc-sa` seed 2, `sh-x` "
        "seeds 1, 2." in text
    )
    assert "![validation BLEU against steps](results/validation_bleu.png)" in text


def test_the_bootstrap_compares_every_run_with_the_teacher(studies_dir):
    studies = load_distillation_studies(studies_dir)
    calls = []
    tests = teacher_bootstrap(studies, fake_test(calls))
    assert all(baseline == TEACHER_PREDICTIONS for baseline, _ in calls)
    assert sorted(system for _, system in calls) == sorted(predictions_of(*run) for run in RUNS)
    assert {
        label: {layout: [t["seed"] for t in runs] for layout, runs in layouts.items()}
        for label, layouts in tests.items()
    } == {
        "fine-tuned": {"hc-sa": [1, 2], "sh-x": [1, 2]},
        "distilled": {"hc-sa": [1, 2], "sh-x": [1]},
        "from scratch": {"hc-sa": [1]},
    }
    real = teacher_bootstrap(studies, partial(paired_bootstrap, references=REFERENCES))
    teacher_bleu = sacrebleu.corpus_bleu(TEACHER_PREDICTIONS, [REFERENCES]).score
    identical = real["fine-tuned"]["sh-x"][0]  # the teacher's own predictions: p = 1 (paired_bootstrap's contract)
    assert identical["seed"] == 1 and identical["bleu"]["p_value"] == 1.0
    assert identical["bleu"]["baseline"] == identical["bleu"]["score"] == pytest.approx(teacher_bleu, abs=1e-4)
    different = real["fine-tuned"]["hc-sa"][0]
    assert different["bleu"]["baseline"] == pytest.approx(teacher_bleu, abs=1e-4)
    assert different["bleu"]["p_value"] < 1.0


def test_without_the_teacher_nothing_is_invented(studies_dir):
    (studies_dir / "results" / TEACHER_STUDY / "base--seed1.json").unlink()
    (studies_dir / "results" / TEACHER_STUDY / "base--seed1.test.txt").unlink()
    studies = load_distillation_studies(studies_dir)
    assert teacher_bootstrap(studies, fake_test([])) == {}
    summary = distillation_summary(studies, {}, SPEEDS)
    assert summary["teacher"] is None and summary["target_bleu"] is None
    assert summary["missing"][0] == {"study": TEACHER_STUDY, "condition": "teacher", "layout": "base", "seed": 1}
    assert results_table_of(summary).splitlines()[2] == (
        "| `hc-sa` | fine-tuned | 1,2 | 27.00 ± 1.41 | 48.00 ± 1.41 | - | - | - | 1.05× (0.90-1.20) | "
        "1.10× (1.08-1.12) | 0.89× |"
    )
    assert report_of(summary, "").startswith("The teacher has no result yet")


def test_conditions_must_be_scored_on_the_teachers_test_split(studies_dir):
    spec_path = studies_dir / "mt-distill-kd.json"
    spec = json.loads(spec_path.read_text())
    spec["arguments"]["dataset_config_name"] = "fr"
    spec_path.write_text(json.dumps(spec))
    with pytest.raises(StudyError, match="mt-distill-kd: evaluated on .*'fr'"):
        load_distillation_studies(studies_dir)


def test_decoding_speeds_are_the_committed_cells():
    speeds = decoding_speeds(["sh-x", "ran-d"])
    cpu = json.loads((REPO / "benchmarks" / "results" / "decoding_target.json").read_text(encoding="utf-8"))
    cell = next(c for c in cpu["cells"] if (c["size"], c["batch_size"], c["num_beams"]) == ("opus-mt", 64, 1))
    median = cell["models"]["sh-x"]["speedup_vs_base"]["ratio_of_medians"]
    assert speeds["cpu"]["sh-x"].startswith(f"{median:.2f}× (")
    assert speeds["cpu"]["ran-d"] == "-"  # not in that benchmark
    gpu = json.loads((REPO / "benchmarks" / "results" / "gpu.json").read_text(encoding="utf-8"))
    decoding = next(c for c in gpu["decoding"]["cells"] if (c["batch_size"], c["num_beams"]) == (64, 1))
    assert speeds["gpu"]["sh-x"] == f"{decoding['models']['sh-x']['eager']['vs_base']['ratio_of_medians']:.2f}×"
    engine = json.loads((REPO / "benchmarks" / "results" / "deployment_layouts.json").read_text(encoding="utf-8"))
    cell = next(c for c in engine["cells"] if (c["batch_size"], c["num_beams"]) == (64, 4))
    ours, base = (cell["engines"][f"{name}/onnx-int8+shortlist"]["sentences_per_second"] for name in ("ran-d", "base"))
    assert speeds["engine"]["ran-d"].startswith(f"{ours['median'] / base['median']:.2f}× (")
    assert len(speeds["sources"]) == 3
    assert decoding_speeds(["sh-x"], REPO / "no-such-folder") == {
        "cpu": {"sh-x": "-"},
        "engine": {"sh-x": "-"},
        "gpu": {"sh-x": "-"},
        "sources": [],
    }


def test_engine_ratio_pairs_the_repeats():
    def speeds(*values):
        return {"sentences_per_second": {"median": sorted(values)[1], "values": list(values)}}

    cell = {"batch_size": 64, "num_beams": 4, "engines": {"base/e": speeds(10, 20, 40), "sh-x/e": speeds(15, 30, 40)}}
    data = {"cells": [cell]}
    assert engine_ratio(data, "e", 64, 4, "sh-x") == "1.50× (1.00-1.50)"  # medians 30 / 20; repeats 1.5, 1.5, 1.0
    assert engine_ratio(data, "e", 64, 1, "sh-x") == "-"  # no such cell
    assert engine_ratio(data, "e", 64, 4, "ran-d") == "-"  # not measured


def distill_summary_script():
    spec = importlib.util.spec_from_file_location("distill_summary", REPO / "studies" / "distill_summary.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_write_summary_and_the_docs_block_check(studies_dir, tmp_path):
    studies = load_distillation_studies(studies_dir)
    readme = write_summary(studies, fake_test([]), SPEEDS)
    assert (readme.parent / "validation_bleu.png").is_file()
    saved = json.loads((readme.parent / "summary.json").read_text(encoding="utf-8"))
    assert saved["bootstrap"]["from scratch"]["hc-sa"][0]["bleu"]["p_value"] == 0.5
    assert "## Paired bootstrap against the teacher (test split)" in readme.read_text(encoding="utf-8")
    script = distill_summary_script()
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- study:mt-distill -->\nThe study is running.\n<!-- /study:mt-distill -->\nafter\n")
    arguments = ["--studies", str(studies_dir), "--page", str(page)]
    assert script.main([*arguments, "--check"]) == 1
    assert script.main([*arguments, "--docs-only"]) == 0
    assert script.main([*arguments, "--check"]) == 0
    text = page.read_text(encoding="utf-8")
    assert "| `hc-sa` | fine-tuned | 1,2 | 27.00 ± 1.41 |" in text and text.endswith(
        "<!-- /study:mt-distill -->\nafter\n"
    )
    assert "(../studies/results/mt-distill/README.md)" in text
    (studies_dir / "results" / "mt-distill-kd" / "sh-x--seed1.json").unlink()  # the results changed: stale
    assert script.main([*arguments, "--check"]) == 1


def test_no_results_keep_the_placeholder(studies_dir, tmp_path):
    for path in (studies_dir / "results").rglob("*.json"):
        path.unlink()
    page = tmp_path / "page.md"
    page.write_text("<!-- study:mt-distill -->\nThe study is running.\n<!-- /study:mt-distill -->\n")
    script = distill_summary_script()
    assert script.main(["--studies", str(studies_dir), "--page", str(page)]) == 0
    assert "The study is running." in page.read_text(encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="no results of mt-distill-teacher"):
        write_summary(load_distillation_studies(studies_dir), fake_test([]), SPEEDS)
