"""The paired bootstrap of summarization and classification studies: SacreBLEU's test on per-example statistics."""

import json
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from hf_simple_attn.metrics import load_metric
from hf_simple_attn.recipes.summarization_task import split_sentences
from hf_simple_attn.studies.runner import evaluation_labels, evaluation_texts, load_study
from hf_simple_attn.studies.summary import (
    CONFUSION_SCORES,
    bootstrap_test,
    classification_bootstrap,
    load_results,
    paired_bootstrap,
    rouge_bootstrap,
    significance,
    summarize,
)


REFERENCES = [f"the cat sat on the mat number {n} today" for n in range(40)]
TEXTS = [f"Package {n} is a library. It reads mats and cats; version {n} is the fast one." for n in range(6)]
SUMMARIES = [f"library for mats, version {n}" for n in range(6)]


def mean_score(totals: np.ndarray, size: int = 4) -> np.ndarray:
    return 100 * totals / size


def test_identical_systems_get_p_one():
    stats = np.array([0.2, 0.4, 0.6, 0.8])
    assert bootstrap_test(stats, stats.copy(), mean_score) == {
        "baseline": 50.0,
        "score": 50.0,
        "mean": 50.0,
        "ci": 0.0,
        "p_value": 1.0,
    }


def test_a_system_better_on_every_example_is_significant():
    baseline, system = np.array([0.2, 0.4, 0.6, 0.8]), np.array([0.3, 0.5, 0.7, 0.9])
    outcome = bootstrap_test(baseline, system, mean_score)
    # Every resample sees the same +10 difference: no centred difference exceeds it, so p = 1 / 1001.
    assert outcome["score"] - outcome["baseline"] == pytest.approx(10.0)
    assert outcome["p_value"] == round(1 / 1001, 4)
    assert outcome["score"] - 2 * outcome["ci"] < outcome["mean"] < outcome["score"] + 2 * outcome["ci"]


@pytest.mark.parametrize("seed", [None, "7"])
def test_bootstrap_test_is_sacrebleus_paired_bootstrap(monkeypatch, seed):
    if seed is not None:
        monkeypatch.setenv("SACREBLEU_SEED", seed)
    good = REFERENCES
    nearly = good[:-3] + ["the dog sat on a mat number 37 today", "a cat sat", "the cat sat on the mat number 39"]
    bleu = sacrebleu.metrics.BLEU()

    def stats(outputs):
        return np.array(bleu._extract_corpus_statistics(outputs, [REFERENCES]), dtype=float)

    def score(totals):
        return np.apply_along_axis(lambda row: bleu._compute_score_from_stats(list(row)).score, -1, totals)

    ours = bootstrap_test(stats(good), stats(nearly), score)
    theirs = paired_bootstrap(good, nearly, REFERENCES, metrics=("bleu",))["bleu"]
    assert ours == theirs and 0.001 < ours["p_value"] < 1  # the same draws and statistic: the same figures


def test_per_summary_rouge_reproduces_the_runs_corpus_rouge():
    references = ["The cat sat on the mat. It was happy!", "Dogs run fast in parks.", "A tool to read files."]
    baseline = ["the cat sat. it sat on a mat", "dogs are running fast", "A file reader."]
    system = ["The cat sat on the mat. It was happy!", "dogs run in the park", "a tool that reads files"]
    metric = load_metric("rouge")
    outcome = rouge_bootstrap(baseline, system, references)
    for outputs, key in ((baseline, "baseline"), (system, "score")):
        # As run_summarization's compute_metrics: one sentence per line, stemmed, mean F-measure x 100.
        corpus = metric.compute(
            predictions=[split_sentences(text) for text in outputs],
            references=[split_sentences(text) for text in references],
            use_stemmer=True,
        )
        for name in ("rouge1", "rouge2", "rougeL"):
            assert outcome[name][key] == pytest.approx(round(corpus[name] * 100, 4), abs=1e-4)


def test_rouge_bootstrap_of_identical_and_clearly_better_summaries():
    copied = rouge_bootstrap(REFERENCES, list(REFERENCES), REFERENCES)
    assert copied["rouge1"] == {"baseline": 100.0, "score": 100.0, "mean": 100.0, "ci": 0.0, "p_value": 1.0}
    worse = [text.replace("sat on the mat", "stood near a chair") for text in REFERENCES]
    clear = rouge_bootstrap(worse, REFERENCES, REFERENCES)
    assert clear["rouge1"]["score"] == 100.0 and clear["rouge1"]["p_value"] < 0.05


@pytest.mark.filterwarnings("ignore:A single label was found")
@pytest.mark.parametrize("classes", [2, 3])
def test_confusion_scores_are_scikit_learns(classes):
    rng = np.random.default_rng(0)
    cases = [(rng.integers(0, classes, 50), rng.integers(0, classes, 50)) for _ in range(5)]
    cases.append((np.zeros(50, dtype=int), np.zeros(50, dtype=int)))  # one class only: F1 and MCC are 0
    cases.append((np.arange(50) % 2, np.full(50, classes - 1)))  # a class predicted but never true
    confusions = np.stack([np.bincount(r * classes + p, minlength=classes**2) for r, p in cases])
    confusions = confusions.reshape(-1, classes, classes)
    average = "binary" if classes == 2 else "macro"
    expected = {
        "accuracy": [accuracy_score(r, p) for r, p in cases],
        "f1": [f1_score(r, p, average=average, zero_division=0) for r, p in cases],
        "matthews_correlation": [matthews_corrcoef(r, p) for r, p in cases],
    }
    for name, score in CONFUSION_SCORES.items():
        assert score(confusions) == pytest.approx(expected[name])
        assert score(confusions[0]) == pytest.approx(expected[name][0])  # one matrix as well as a stack


def prediction_lines(names: list[str]) -> list[str]:
    return ["index\tprediction", *(f"{index}\t{name}" for index, name in enumerate(names))]


def test_classification_bootstrap_recomputes_each_metric():
    label_names = ["negative", "positive"]
    labels = [index % 2 for index in range(40)]
    perfect = prediction_lines([label_names[label] for label in labels])
    all_positive = prediction_lines(["positive"] * 40)
    same = classification_bootstrap(perfect, list(perfect), labels, label_names)
    assert same["accuracy"] == {"baseline": 1.0, "score": 1.0, "mean": 1.0, "ci": 0.0, "p_value": 1.0}
    clear = classification_bootstrap(all_positive, perfect, labels, label_names)
    assert clear["accuracy"]["baseline"] == 0.5 and clear["f1"]["baseline"] == round(2 / 3, 4)
    assert clear["matthews_correlation"]["baseline"] == 0.0
    assert all(clear[name]["score"] == 1.0 and clear[name]["p_value"] < 0.05 for name in clear)


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def write_study(folder: Path, task: str, arguments: dict) -> Path:
    spec = {"name": f"toy-{task}", "task": task, "arguments": arguments, "presets": ["base", "hc-sa"], "seeds": [1]}
    path = folder / f"toy-{task}.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def summarization_study(folder: Path):
    rows = [{"text": text, "summary": summary} for text, summary in zip(TEXTS, SUMMARIES)]
    files = {
        f"{split}_file": write_jsonl(folder / f"{split}.jsonl", rows) for split in ("train", "validation", "test")
    }
    return load_study(write_study(folder, "summarization", dict(files, max_predict_samples=4)))


def fake_run(study, preset: str, outputs: list[str], test: dict) -> None:
    study.results_dir.mkdir(parents=True, exist_ok=True)
    result = {
        "preset": preset,
        "seed": 1,
        "test": test,
        "validation": test,
        "learning_rate": 1e-3,
        "parameters": 10,
        "train_seconds": 60.0,
        "loss_curve": [[1, 2.0]],
        "signatures": {},
    }
    (study.results_dir / f"{preset}--seed1.json").write_text(json.dumps(result), encoding="utf-8")
    (study.results_dir / f"{preset}--seed1.test.txt").write_text("\n".join(outputs) + "\n", encoding="utf-8")


def test_a_summarization_study_is_tested_against_its_test_summaries(tmp_path):
    study = summarization_study(tmp_path)
    sources, references = evaluation_texts(study)
    assert (sources, references) == (TEXTS[:4], SUMMARIES[:4])  # --max_predict_samples, in order
    scores = {"rouge1": 50.0, "rouge2": 25.0, "rougeL": 50.0}
    fake_run(study, "base", ["a library", "version 1", "", "mats"], scores)
    fake_run(study, "hc-sa", SUMMARIES[:4], dict(scores, rouge1=62.5))
    [outcome] = significance(study, load_results(study.results_dir))["base"]["hc-sa"]
    assert outcome["seed"] == 1 and set(outcome) == {"seed", "rouge1", "rouge2", "rougeL"}
    assert outcome["rouge1"]["score"] == 100.0 and outcome["rouge1"]["baseline"] < 50
    readme = summarize(study).read_text()
    assert "p vs base (rouge1)" in readme and "paired bootstrap of per-summary ROUGE F-measures" in readme
    # The difference of the first metric's means from base's, in the table's units.
    assert "| Δ vs base (rouge1) |" in readme and "| hc-sa | 1 | 62.50 | 25.00 | 50.00 | +12.50 |" in readme


def classification_study(folder: Path, test_labels: bool = True):
    rows = [{"sentence": f"a {word} film, take {n}", "label": word} for n in range(5) for word in ("bad", "good")]
    files = {f"{split}_file": write_jsonl(folder / f"{split}.jsonl", rows) for split in ("train", "validation")}
    test_rows = rows if test_labels else [{"sentence": row["sentence"]} for row in rows]
    files["test_file"] = write_jsonl(folder / "test.jsonl", test_rows)
    return load_study(write_study(folder, "classification", dict(files, max_predict_samples=8)))


def test_a_classification_study_is_tested_against_its_test_labels(tmp_path):
    study = classification_study(tmp_path)
    names = ["bad", "good"] * 4
    assert evaluation_labels(study) == (["bad", "good"], [0, 1] * 4)
    scores = {"accuracy": 0.5, "f1": 0.5, "matthews_correlation": 0.0}
    fake_run(study, "base", prediction_lines(["good"] * 8), scores)
    fake_run(study, "hc-sa", prediction_lines(names), scores)
    [outcome] = significance(study, load_results(study.results_dir))["base"]["hc-sa"]
    assert outcome["accuracy"]["baseline"] == 0.5 and outcome["accuracy"]["score"] == 1.0
    assert outcome["matthews_correlation"]["score"] == 1.0
    # Tables show accuracy, F1 and MCC in percent (points), as GLUE reports them; the results keep fractions.
    readme = summarize(study).read_text()
    assert "Test metrics (in percent)" in readme
    assert "| hc-sa | 1 | 50.00 | 50.00 | 0.00 | +0.00 | 50.00 | 0.001 | 10 | 1.0 min |" in readme


def test_a_classification_study_without_test_labels_is_not_tested(tmp_path):
    study = classification_study(tmp_path, test_labels=False)
    assert evaluation_labels(study) is None
    fake_run(study, "base", prediction_lines(["good"] * 8), {})
    fake_run(study, "hc-sa", prediction_lines(["bad"] * 8), {})
    assert significance(study, load_results(study.results_dir)) == {}
