"""A study's results as a markdown table and charts: mean ± std over seeds, paired bootstrap against `base`.

`python studies/summarize.py <study>` writes `studies/results/<study>/README.md` (the table, the sweep, the
charts) and `studies/results/<study>/*.png`. The significance test is SacreBLEU's paired bootstrap resampling
(1,000 resamples, SacreBLEU's fixed seed 12345 unless `SACREBLEU_SEED` says otherwise) on the test split, each
preset's run against `base`'s run of the same seed: `sacrebleu.significance.PairedTest` for BLEU and chrF; the
same draws and statistic (`bootstrap_test`) for ROUGE (the mean of per-summary F-measures) and for accuracy, F1 and
MCC (recomputed from each resample's confusion matrix).
"""

import json
import os
import statistics
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import numpy as np

from .runner import TASKS, Study, evaluation_labels, evaluation_texts


BOOTSTRAP_SAMPLES = 1000
SIGNIFICANCE_LEVEL = 0.05
BOOTSTRAP_DESCRIPTIONS = {  # the test of each task, for the study README
    "translation": "SacreBLEU paired bootstrap ({samples} resamples)",
    "summarization": "paired bootstrap of per-summary ROUGE F-measures (SacreBLEU's {samples} resamples and statistic)",
    "classification": "paired bootstrap, each metric recomputed on each resample (SacreBLEU's {samples} resamples and "
    "statistic)",
}


def load_results(folder: Path, pattern: str = "*--seed*.json") -> list[dict]:
    """The result files of a folder: runs (`<preset>--seed<k>.json`) by default; not their analyses, nor the
    summary's own files."""
    paths = [path for path in sorted(folder.glob(pattern)) if not path.name.endswith(".analysis.json")]
    return [json.loads(path.read_text(encoding="utf-8")) for path in paths]


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for a single value)."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def format_mean_std(values: Sequence[float], scale: float = 1) -> str:
    """Mean ± std of `values` × `scale` (a task's `display_scale`)."""
    mean, std = mean_std([value * scale for value in values])
    return f"{mean:.2f}" if std is None else f"{mean:.2f} ± {std:.2f}"


def paired_bootstrap(
    baseline: Sequence[str],
    system: Sequence[str],
    references: Sequence[str],
    metrics: Sequence[str] = ("bleu", "chrf"),
) -> dict[str, dict[str, float]]:
    """SacreBLEU's paired bootstrap of `system` against `baseline`: per metric both scores, the system's bootstrap
    mean and 95 % half-interval, and the p-value of the difference.

    Identical outputs get p = 1 (SacreBLEU's centred statistic would give 1 / (resamples + 1) there).
    """
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    scorers = {"bleu": BLEU, "chrf": CHRF}
    baseline, system, references = list(baseline), list(system), list(references)
    if system == baseline:
        scores = {name: scorers[name]().corpus_score(system, [references]).score for name in metrics}
        return {
            name: {
                "baseline": round(score, 4),
                "score": round(score, 4),
                "mean": round(score, 4),
                "ci": 0.0,
                "p_value": 1.0,
            }
            for name, score in scores.items()
        }
    test = PairedTest(
        named_systems=[("baseline", baseline), ("system", system)],
        metrics={name: scorers[name]() for name in metrics},
        references=[references],
        test_type="bs",
        n_samples=BOOTSTRAP_SAMPLES,
    )
    _, scores = test()
    columns = [column for column in scores if column != "System"]  # SacreBLEU's display names, in our order
    outcome = {}
    for name, column in zip(metrics, columns):
        baseline_result, system_result = scores[column]
        values = {
            "baseline": baseline_result.score,
            "score": system_result.score,
            "mean": system_result.mean,
            "ci": system_result.ci,
            "p_value": system_result.p_value,
        }
        outcome[name] = {key: round(float(value), 4) for key, value in values.items()}  # numpy floats inside
    return outcome


def resample_counts(size: int) -> np.ndarray:
    """How often each of `size` examples is drawn in each resample, (BOOTSTRAP_SAMPLES, size): the draws of
    SacreBLEU's paired bootstrap (its seed 12345 unless `SACREBLEU_SEED` says otherwise; "none": unseeded)."""
    seed = os.environ.get("SACREBLEU_SEED", "12345")
    rng = np.random.default_rng(None if seed.lower() == "none" else int(seed))
    draws = rng.choice(size, size=(BOOTSTRAP_SAMPLES, size), replace=True)
    draws += size * np.arange(BOOTSTRAP_SAMPLES)[:, None]  # one block of counts per resample
    return np.bincount(draws.ravel(), minlength=BOOTSTRAP_SAMPLES * size).reshape(BOOTSTRAP_SAMPLES, size)


def bootstrap_test(
    baseline_stats: np.ndarray, system_stats: np.ndarray, score: Callable[[np.ndarray], np.ndarray]
) -> dict[str, float]:
    """SacreBLEU's paired bootstrap ("bs") on per-example statistics (one row per example): `score` maps statistics
    summed over examples (any leading axes) to the metric, as SacreBLEU's metrics do. p is the share of resamples
    whose centred |system - baseline| exceeds the observed one (+1 smoothed); mean and ci (95 % half-interval) are
    the system's over the resamples. The same statistics on every example (identical outputs) get p = 1.
    """
    baseline, system = score(baseline_stats.sum(0)), score(system_stats.sum(0))
    if np.array_equal(baseline_stats, system_stats):
        return {
            "baseline": round(float(baseline), 4),
            "score": round(float(system), 4),
            "mean": round(float(system), 4),
            "ci": 0.0,
            "p_value": 1.0,
        }
    from sacrebleu.significance import estimate_ci

    counts = resample_counts(len(system_stats))
    baseline_samples, system_samples = score(counts @ baseline_stats), score(counts @ system_stats)
    mean, ci = estimate_ci(system_samples)
    differences = np.abs(system_samples - baseline_samples)
    exceeding = np.sum(differences - differences.mean() > abs(system - baseline))
    values = {
        "baseline": baseline,
        "score": system,
        "mean": mean,
        "ci": ci,
        "p_value": (exceeding + 1) / (len(differences) + 1),
    }
    return {key: round(float(value), 4) for key, value in values.items()}


def rouge_scores(summaries: Sequence[str], references: Sequence[str], metrics: Sequence[str]) -> dict[str, list]:
    """Each summary's ROUGE F-measures (stemmed), as the runs' metric computes them before taking their plain mean
    (no bootstrap aggregator). ROUGE-1/2/L ignore line breaks, so one-line summaries score as the runs' split ones."""
    from ..metrics import load_metric

    return load_metric("rouge").compute(
        predictions=list(summaries),
        references=list(references),
        rouge_types=list(metrics),
        use_aggregator=False,
        use_stemmer=True,
    )


def rouge_bootstrap(
    baseline: Sequence[str],
    system: Sequence[str],
    references: Sequence[str],
    metrics: Sequence[str] = TASKS["summarization"]["metrics"],
) -> dict[str, dict[str, float]]:
    """`bootstrap_test` of per-summary ROUGE F-measures: a resample scores their mean × 100, so the whole test split
    scores the runs' reported ROUGE."""
    baseline_scores, system_scores = (rouge_scores(outputs, references, metrics) for outputs in (baseline, system))
    return {
        name: bootstrap_test(
            np.array(baseline_scores[name]),
            np.array(system_scores[name]),
            lambda totals: 100 * totals / len(references),
        )
        for name in metrics
    }


def accuracy(confusion: np.ndarray) -> np.ndarray:
    """Accuracy of (..., reference, prediction) confusion matrices."""
    return np.trace(confusion, axis1=-2, axis2=-1) / confusion.sum((-2, -1))


def f1(confusion: np.ndarray) -> np.ndarray:
    """scikit-learn's F1 as run_glue asks for it: of class 1 with two classes, else the macro average over the
    classes that occur (0 where a class has no true positive)."""
    occurrences = confusion.sum(-1) + confusion.sum(-2)  # references + predictions of each class
    correct = 2 * np.diagonal(confusion, axis1=-2, axis2=-1)
    per_class = np.divide(correct, occurrences, out=np.zeros(occurrences.shape), where=occurrences > 0)
    if confusion.shape[-1] == 2:
        return per_class[..., 1]
    return per_class.sum(-1) / (occurrences > 0).sum(-1)


def matthews_correlation(confusion: np.ndarray) -> np.ndarray:
    """scikit-learn's (multi-class) Matthews correlation; 0 where it is undefined."""
    truth, predicted = confusion.sum(-1), confusion.sum(-2)
    total = truth.sum(-1)
    covariance = np.trace(confusion, axis1=-2, axis2=-1) * total - (truth * predicted).sum(-1)
    spread = (total**2 - (predicted**2).sum(-1)) * (total**2 - (truth**2).sum(-1))
    return np.divide(covariance, np.sqrt(spread), out=np.zeros(np.shape(spread)), where=spread > 0)


CONFUSION_SCORES = {"accuracy": accuracy, "f1": f1, "matthews_correlation": matthews_correlation}


def classification_bootstrap(
    baseline: Sequence[str],
    system: Sequence[str],
    labels: Sequence[int],
    label_names: Sequence[str],
    metrics: Sequence[str] = TASKS["classification"]["metrics"],
) -> dict[str, dict[str, float]]:
    """`bootstrap_test` of run_glue's predictions (`predict_results.txt` lines: a header, then `index<TAB>label`)
    against the test labels (ids of `label_names`): each metric recomputed from each resample's confusion matrix."""
    size = len(label_names)
    ids = {name: index for index, name in enumerate(label_names)}

    def cells(lines: Sequence[str]) -> np.ndarray:  # one-hot (reference, prediction) cell of each example
        predicted = np.array([ids[line.split("\t")[1]] for line in lines[1:]])
        return np.eye(size * size)[np.asarray(labels) * size + predicted]

    def scorer(name: str):
        return lambda totals: CONFUSION_SCORES[name](totals.reshape(*totals.shape[:-1], size, size))

    baseline_stats, system_stats = cells(baseline), cells(system)
    return {name: bootstrap_test(baseline_stats, system_stats, scorer(name)) for name in metrics}


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").removesuffix("\n").split("\n")


def reference_predictions(study: Study, results: list[dict]) -> dict[str, dict[int | None, Path]]:
    """The systems every preset is tested against: `base` (its run of the same seed) and each outside baseline
    (one output for every seed, key None)."""
    references = {}
    base = {r["seed"]: study.results_dir / f"base--seed{r['seed']}.test.txt" for r in results if r["preset"] == "base"}
    if base:
        references["base"] = base
    for path in sorted((study.results_dir / "baselines").glob("*.test.txt")):
        references[path.name.removesuffix(".test.txt")] = {None: path}
    return references


def paired_test(study: Study) -> Callable[[list[str], list[str]], dict] | None:
    """The study's paired bootstrap of a system's test outputs against a baseline's; None for a classification
    study without test labels to score (see `evaluation_labels`)."""
    if study.task == "classification":
        labelled = evaluation_labels(study)
        return (
            None
            if labelled is None
            else partial(classification_bootstrap, labels=labelled[1], label_names=labelled[0])
        )
    bootstrap = paired_bootstrap if study.task == "translation" else rouge_bootstrap
    return partial(bootstrap, references=evaluation_texts(study)[1])


def significance(study: Study, results: list[dict]) -> dict[str, dict[str, list[dict]]]:
    """{reference: {preset: [paired bootstrap per seed]}} on the test split."""
    references_by_name = reference_predictions(study, results)
    test = paired_test(study) if references_by_name else None
    if test is None:
        return {}
    tests = {}
    for name, outputs in references_by_name.items():
        for result in results:
            reference = outputs.get(result["seed"], outputs.get(None))
            if result["preset"] == name or reference is None:
                continue
            system = read_lines(study.results_dir / f"{result['preset']}--seed{result['seed']}.test.txt")
            outcome = test(read_lines(reference), system)
            tests.setdefault(name, {}).setdefault(result["preset"], []).append(dict(seed=result["seed"], **outcome))
    return tests


def results_table(
    study: Study, results: list[dict], tests: dict[str, dict[str, list[dict]]], baselines: list[dict]
) -> str:
    """One row per preset in the study's order (seeds, test metrics as mean ± std, the first one's difference from
    `base`, validation, p against each reference system), then one per outside baseline.

    The difference is paired by seed: the mean over the preset's seeds of its score minus `base`'s at that seed, so
    a preset run at seed 1 only is compared with `base`'s seed 1, not with its mean over three seeds. Seeds `base`
    lacks (and the outside baselines) are compared with `base`'s mean."""
    names, scale = TASKS[study.task]["metrics"], TASKS[study.task]["display_scale"]
    by_preset = {}
    for result in results:
        by_preset.setdefault(result["preset"], []).append(result)
    base_mean, base_by_seed = None, {}
    if "base" in by_preset:
        base_by_seed = {r["seed"]: r["test"][names[0]] * scale for r in by_preset["base"]}
        base_mean = statistics.fmean(base_by_seed.values())
    header = [
        "preset",
        "seeds",
        *(f"test {n}" for n in names),
        *([f"Δ vs base ({names[0]})"] if base_mean is not None else []),
        f"validation {names[0]}",
        "lr",
        "parameters",
        "train time",
        *(f"p vs {reference} ({names[0]})" for reference in tests),
    ]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for preset in [p for p in study.presets if p in by_preset]:
        runs = by_preset[preset]
        cells = [preset, ",".join(str(r["seed"]) for r in runs)]
        cells += [format_mean_std([r["test"][n] for r in runs], scale) for n in names]
        if base_mean is not None:
            difference = statistics.fmean(
                r["test"][names[0]] * scale - base_by_seed.get(r["seed"], base_mean) for r in runs
            )
            cells.append("-" if preset == "base" else f"{difference:+.2f}")
        cells += [format_mean_std([r["validation"][names[0]] for r in runs], scale)]
        cells += [f"{runs[0]['learning_rate']:g}", f"{runs[0]['parameters']:,}"]
        cells += [f"{statistics.fmean(r['train_seconds'] for r in runs) / 60:.1f} min"]
        for by_reference in tests.values():
            paired = by_reference.get(preset, [])
            cells.append(", ".join(f"{t[names[0]]['p_value']:.3f}" for t in paired) if paired else "-")
        rows.append("| " + " | ".join(cells) + " |")
    for baseline in baselines:
        cells = [
            f"{baseline['baseline']} (outside baseline)",
            "-",
            *(f"{baseline['test'][n] * scale:.2f}" for n in names),
            *([f"{baseline['test'][names[0]] * scale - base_mean:+.2f}"] if base_mean is not None else []),
            f"{baseline['validation'][names[0]] * scale:.2f}",
            "-",
            "-",
            "-",
            *("-" for _ in tests),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def sweep_table(study: Study, sweep: list[dict]) -> str:
    """Validation score of each representative at each setting; the chosen one in bold (once all are in)."""
    metric, scale = study.selection_metric, TASKS[study.task]["display_scale"]
    settings = [tuple(sorted(setting.items())) for setting in study.sweep_settings]
    labels = [", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in s) for s in settings]
    header = ["group", "representative", *labels]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for group, members in study.sweep_groups.items():
        scores = {}
        for result in sweep:
            if result["preset"] == members[0]:
                score = result["validation"].get(metric)
                scores[tuple(sorted(result["overrides"].items()))] = None if score is None else score * scale
        finished = len(scores) == len(settings)  # the choice is made once every setting has its score
        best = max((v for v in scores.values() if v is not None), default=None) if finished else None
        cells = [
            "-" if s not in scores else (f"**{scores[s]:.2f}**" if scores[s] == best else f"{scores[s]:.2f}")
            for s in settings
        ]
        rows.append("| " + " | ".join([group, members[0], *cells]) + " |")
    return "\n".join(rows)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(plt, figure, path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return Path(path)


def loss_chart(study: Study, results: list[dict], path: Path) -> Path:
    """Training loss against step: one panel per sweep group (one for the whole study without a sweep), a line
    per run, `base` dashed in every panel for reference."""
    plt = pyplot()
    groups = study.sweep_groups or {study.name: study.presets}
    base = [result for result in results if result["preset"] == "base"]
    columns = min(3, len(groups))
    rows = -(-len(groups) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows), squeeze=False, sharey=True)
    for axis, (group, presets) in zip(axes.flat, groups.items()):
        members = [result for result in results if result["preset"] in presets and result["preset"] != "base"]
        for result, style in [(r, "--") for r in base] + [(r, "-") for r in members]:
            steps, losses = zip(*result["loss_curve"]) if result["loss_curve"] else ((), ())
            axis.plot(steps, losses, style, label=f"{result['preset']} s{result['seed']}", linewidth=1)
        axis.set(title=group, xlabel="step", ylabel="training loss", yscale="log")
        axis.legend(fontsize=6)
    for axis in list(axes.flat)[len(groups) :]:
        axis.set_visible(False)
    return save_figure(plt, figure, path)


def score_chart(study: Study, results: list[dict], path: Path) -> Path:
    """Test score per preset (mean with min-max over seeds); base's mean as a line."""
    plt = pyplot()
    metric, scale = TASKS[study.task]["metrics"][0], TASKS[study.task]["display_scale"]
    presets = [p for p in study.presets if any(r["preset"] == p for r in results)]
    values = [[r["test"][metric] * scale for r in results if r["preset"] == p] for p in presets]
    means = [statistics.fmean(v) for v in values]
    errors = [[m - min(v) for m, v in zip(means, values)], [max(v) - m for m, v in zip(means, values)]]
    figure, axis = plt.subplots(figsize=(max(6, 0.35 * len(presets) + 2), 4.5))
    axis.bar(range(len(presets)), means, yerr=errors, color="tab:blue", capsize=2)
    if "base" in presets:
        axis.axhline(means[presets.index("base")], color="tab:red", linewidth=1, label="base")
        axis.legend()
    axis.set_xticks(range(len(presets)), presets, rotation=70, fontsize=8)
    axis.set_ylabel(f"test {metric}" + (" (%)" if scale == 100 else ""))
    axis.set_title(study.name)
    return save_figure(plt, figure, path)


def replace_block(text: str, name: str, content: str) -> str:
    """Put `content` between `<!-- study:NAME -->` and `<!-- /study:NAME -->` in `text` (the markers must exist)."""
    start, end = f"<!-- study:{name} -->", f"<!-- /study:{name} -->"
    if start not in text or end not in text:
        raise ValueError(f"the README has no {start} ... {end} block for this study's table")
    before, rest = text.split(start, 1)
    return before + start + "\n" + content.strip() + "\n" + end + rest.split(end, 1)[1]


def summarize(study: Study, readme: Path | None = None) -> Path:
    """Write the study's README.md (tables) and charts next to its results, and the table into `readme`'s block
    for this study if given; returns the study README's path."""
    results = load_results(study.results_dir)
    if not results:
        raise FileNotFoundError(f"no results in {study.results_dir}: run `python studies/run_study.py` first")
    sweep = load_results(study.results_dir / "sweep")
    baselines = load_results(study.results_dir / "baselines", "*.json")
    tests = significance(study, results)
    (study.results_dir / "significance.json").write_text(json.dumps(tests, indent=1) + "\n", encoding="utf-8")
    loss_chart(study, results, study.results_dir / "loss_curves.png")
    score_chart(study, results, study.results_dir / "scores.png")
    lines = [
        f"# Study `{study.name}`",
        "",
        study.description,
        "",
        f"{len(results)} of {sum(len(study.seeds_of(p)) for p in study.presets)} runs finished. Test metrics"
        f"{' (in percent)' if TASKS[study.task]['display_scale'] == 100 else ''}: mean ± std over seeds; p: {BOOTSTRAP_DESCRIPTIONS[study.task].format(samples=BOOTSTRAP_SAMPLES)} against "
        f"`base` of the same seed (and each outside baseline), one value per seed (p < {SIGNIFICANCE_LEVEL}: a "
        "significant difference).",
        "",
        results_table(study, results, tests, baselines),
        "",
        "![test scores](scores.png)",
        "",
        "![loss curves](loss_curves.png)",
    ]
    if sweep:
        lines += [
            "",
            f"## Sweep (validation {study.selection_metric}; the setting in bold is used)",
            "",
            sweep_table(study, sweep),
        ]
    signature = next((r["signatures"] for r in results if r["signatures"]), None)
    if signature:
        lines += ["", "Signatures: " + "; ".join(f"`{k}`: `{v}`" for k, v in sorted(signature.items()))]
    path = study.results_dir / "README.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if readme is not None:
        relative = path.parent.relative_to(readme.resolve().parent)
        table = results_table(study, results, tests, baselines)
        block = f"{table}\n\n![{study.name}]({relative}/scores.png)\n\nAll figures: [{relative}/README.md]({relative}/README.md)."
        readme.write_text(replace_block(readme.read_text(encoding="utf-8"), study.name, block), encoding="utf-8")
    return path
