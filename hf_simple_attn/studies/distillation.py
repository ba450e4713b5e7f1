"""The distillation study of issue 40, summarised from its four studies: a trained `base` (the teacher, standing in for
a pretrained opus-mt model, `studies/mt-distill-teacher.json`) converted into simplified layouts and fine-tuned on the
references (`mt-distill-finetune`), the same conversions trained on the teacher's translations (`mt-distill-kd`),
and the same layouts trained from scratch as the control (`mt-distill-scratch`).

Per layout and condition: test BLEU and chrF (mean ± std over seeds), the difference from the teacher's test BLEU,
validation BLEU at each evaluated step (mean over seeds), the first evaluated step at which each seed reaches 98 % of
the teacher's validation BLEU ("not reached" when none does), SacreBLEU's paired bootstrap of each run's test
predictions against the teacher's (`summary.paired_bootstrap`), and the layout's decoding speed against `base` from
the committed benchmarks (the cells of the "Which family when" table). Runs without results are listed, not
estimated. `python studies/distill_summary.py` writes `studies/results/mt-distill/` (README.md, summary.json, the
chart) and the documentation's table.
"""

import importlib.util
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .runner import REPO_ROOT, Study, StudyError, load_study
from .summary import (
    BOOTSTRAP_SAMPLES,
    SIGNIFICANCE_LEVEL,
    format_mean_std,
    load_results,
    mean_std,
    pyplot,
    read_lines,
    reference_predictions,
    save_figure,
)


NAME = "mt-distill"
TEACHER_STUDY = "mt-distill-teacher"
CONDITIONS = {"fine-tuned": "mt-distill-finetune", "distilled": "mt-distill-kd", "from scratch": "mt-distill-scratch"}
STUDY_NAMES = (TEACHER_STUDY, *CONDITIONS.values())
TARGET_SHARE = 0.98
TARGET_LABEL = f"{TARGET_SHARE * 100:g} %"  # as the tables write it
METRICS = ("bleu", "chrf")
# The options that decide the test split: every condition is scored on the teacher's.
EVALUATION_ARGUMENTS = ("dataset_name", "dataset_config_name", "source_lang", "target_lang", "max_predict_samples")
BENCHMARK_RESULTS = REPO_ROOT / "benchmarks" / "results"
GPU_DECODING_COLUMN = "greedy, batch 64, eager"  # of benchmarks/summarize.py's `gpu_preset_cells`
# The CPU engine a layout is deployed with: bench_deployment.py's file, engine, batch size and beams.
ENGINE_DECODING_CELL = ("deployment_layouts.json", "onnx-int8+shortlist", 64, 4)
CHART = "validation_bleu.png"


@dataclass
class DistillationStudies:
    """The teacher's study and each condition's (its label: its study)."""

    teacher: Study
    conditions: dict[str, Study]

    @property
    def results_dir(self) -> Path:
        return self.teacher.home / "results" / NAME

    @property
    def layouts(self) -> list[str]:
        return list(dict.fromkeys(preset for study in self.conditions.values() for preset in study.presets))

    @property
    def teacher_run(self) -> tuple[str, int]:
        """(preset, seed) of the teacher: its study's first preset at its first seed, the run the students start
        from."""
        preset = self.teacher.presets[0]
        return preset, self.teacher.seeds_of(preset)[0]


def load_distillation_studies(folder: Path = REPO_ROOT / "studies") -> DistillationStudies:
    """The four specs of `folder`; a `StudyError` when a condition is not scored on the teacher's test split."""
    teacher = load_study(folder / f"{TEACHER_STUDY}.json")
    conditions = {label: load_study(folder / f"{name}.json") for label, name in CONDITIONS.items()}
    expected = {key: teacher.arguments.get(key) for key in EVALUATION_ARGUMENTS}
    for study in conditions.values():
        found = {key: study.arguments.get(key) for key in EVALUATION_ARGUMENTS}
        if found != expected:
            raise StudyError(f"{study.name}: evaluated on {found}, the teacher ({teacher.name}) on {expected}")
    return DistillationStudies(teacher, conditions)


def teacher_result(studies: DistillationStudies) -> dict | None:
    preset, seed = studies.teacher_run
    return next(
        (r for r in load_results(studies.teacher.results_dir) if (r["preset"], r["seed"]) == (preset, seed)), None
    )


def condition_runs(study: Study) -> tuple[dict[str, list[dict]], list[tuple[str, int]]]:
    """The study's results per preset in seed order, and the (preset, seed) runs that have none yet."""
    results = {(r["preset"], r["seed"]): r for r in load_results(study.results_dir)}
    runs, missing = {}, []
    for preset in study.presets:
        for seed in study.seeds_of(preset):
            if (preset, seed) in results:
                runs.setdefault(preset, []).append(results[(preset, seed)])
            else:
                missing.append((preset, seed))
    return runs, missing


def validation_by_step(result: dict) -> dict[int, float]:
    """{step: validation BLEU} of a run's evaluations (the last one where a step was evaluated twice)."""
    return {step: scores["bleu"] for step, scores in result.get("validation_curve", []) if "bleu" in scores}


def steps_to_target(result: dict, target: float) -> int | None:
    """The first evaluated step whose validation BLEU is `target` or more; None when none is."""
    return next((step for step, bleu in sorted(validation_by_step(result).items()) if bleu >= target), None)


def condition_summary(runs: list[dict], target: float | None) -> dict:
    """Seeds, test scores (each seed's, mean, std), the validation BLEU at each step every run evaluated (mean over
    the runs) and each seed's steps to `target` (none without a teacher)."""
    curves = [validation_by_step(result) for result in runs]
    steps = sorted(set.intersection(*(set(curve) for curve in curves)))
    test = {}
    for name in METRICS:
        values = [result["test"][name] for result in runs]
        mean, std = mean_std(values)
        test[name] = {"values": values, "mean": round(mean, 4), "std": None if std is None else round(std, 4)}
    return {
        "seeds": [result["seed"] for result in runs],
        "steps": [result["steps"] for result in runs],
        "test": test,
        "validation_curve": [[step, round(statistics.fmean(curve[step] for curve in curves), 4)] for step in steps],
        "steps_to_target": (
            [] if target is None else [[result["seed"], steps_to_target(result, target)] for result in runs]
        ),
    }


def teacher_bootstrap(
    studies: DistillationStudies, test: Callable[[list[str], list[str]], dict]
) -> dict[str, dict[str, list[dict]]]:
    """{condition: {layout: [test per seed]}}: `test(teacher's test predictions, a run's)` for every run with
    predictions (`summary.paired_test` of the teacher's study: SacreBLEU's paired bootstrap on its test split);
    empty while the teacher's predictions are missing."""
    preset, seed = studies.teacher_run
    teacher_results = load_results(studies.teacher.results_dir)
    teacher_file = reference_predictions(studies.teacher, teacher_results).get(preset, {}).get(seed)
    if teacher_file is None or not teacher_file.is_file():
        return {}
    teacher = read_lines(teacher_file)
    tests = {}
    for label, study in studies.conditions.items():
        runs, _ = condition_runs(study)
        for layout, results in runs.items():
            for result in results:
                predictions = study.results_dir / f"{layout}--seed{result['seed']}.test.txt"
                if predictions.is_file():
                    outcome = test(teacher, read_lines(predictions))
                    tests.setdefault(label, {}).setdefault(layout, []).append(dict(seed=result["seed"], **outcome))
    return tests


def benchmarks_summarize():
    """benchmarks/summarize.py, the readers of the committed benchmark results."""
    spec = importlib.util.spec_from_file_location("benchmarks_summarize", REPO_ROOT / "benchmarks" / "summarize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def decoding_speeds(layouts: list[str], results_dir: Path = BENCHMARK_RESULTS) -> dict:
    """Each layout's decoding speed against `base`: {"cpu": {layout: cell}} PyTorch eager, as the "Which family
    when" table shows it, {"engine": ...} the CPU engine (`ENGINE_DECODING_CELL`), {"gpu": ...}, and "sources" (what
    each column measured); "-" where not measured."""
    summarize = benchmarks_summarize()
    speeds = {kind: dict.fromkeys(layouts, "-") for kind in ("cpu", "engine", "gpu")} | {"sources": []}
    cpu_file, size, batch_size, num_beams = summarize.CPU_DECODING_CELL
    if (results_dir / cpu_file).is_file():
        data = json.loads((results_dir / cpu_file).read_text(encoding="utf-8"))
        cell = summarize.decoding_cell(data, size, batch_size, num_beams) or {"models": {}}
        for layout in layouts:
            if layout in cell["models"]:
                speeds["cpu"][layout] = summarize.ratio(cell["models"][layout]["speedup_vs_base"])
        environment = data["environment"]
        speeds["sources"].append(
            f"CPU: `benchmarks/results/{cpu_file}` ({environment['date'][:10]}, {environment['cpu_count']} × "
            f"{environment['cpu']}, PyTorch eager, size {size}, greedy, batch {batch_size}): sentences/s against "
            "`base`, ratio of medians (min-max of the paired ratios)"
        )
    engine_file, engine, batch_size, num_beams = ENGINE_DECODING_CELL
    if (results_dir / engine_file).is_file():
        data = json.loads((results_dir / engine_file).read_text(encoding="utf-8"))
        for layout in layouts:
            speeds["engine"][layout] = engine_ratio(data, engine, batch_size, num_beams, layout)
        environment = data["environment"]
        speeds["sources"].append(
            f"CPU engine: `benchmarks/results/{engine_file}` ({environment['date'][:10]}, {environment['cpu_count']} "
            f"× {environment['cpu']}, ONNX Runtime {engine}, size {data['settings']['size']}, beam {num_beams}, batch "
            f"{batch_size}): sentences/s against `base`'s, ratio of medians (min-max of the paired repeats)"
        )
    if (results_dir / "gpu.json").is_file():
        data = json.loads((results_dir / "gpu.json").read_text(encoding="utf-8"))
        for layout in layouts:
            try:
                speeds["gpu"][layout] = summarize.gpu_preset_cells(data, [layout])[layout][GPU_DECODING_COLUMN]
            except ValueError:  # not in that run
                continue
        speeds["sources"].append(
            f"GPU: `benchmarks/results/gpu.json` ({data['environment']['date'][:10]}, "
            f"{data['environment']['device']['name']}, size {data['settings']['size']}, bf16, {GPU_DECODING_COLUMN}, "
            f"{data['settings']['new_tokens']} new tokens): ratio of medians to `base`"
        )
    return speeds


def engine_ratio(data: dict, engine: str, batch_size: int, num_beams: int, layout: str) -> str:
    """'1.52× (1.49-1.55)': a layout's sentences/s against `base`'s with `engine` in bench_deployment.py's results,
    ratio of medians and the min-max over repeats (measured interleaved, so paired); "-" where not measured."""
    cell = next((c for c in data["cells"] if (c["batch_size"], c["num_beams"]) == (batch_size, num_beams)), None)
    if cell is None or f"{layout}/{engine}" not in cell["engines"] or f"base/{engine}" not in cell["engines"]:
        return "-"
    speed, base = (cell["engines"][f"{name}/{engine}"]["sentences_per_second"] for name in (layout, "base"))
    paired = [ours / theirs for ours, theirs in zip(speed["values"], base["values"], strict=True)]
    return f"{speed['median'] / base['median']:.2f}× ({min(paired):.2f}-{max(paired):.2f})"


def distillation_summary(studies: DistillationStudies, tests: dict | None = None, speeds: dict | None = None) -> dict:
    """Everything the tables show, from the result files: the teacher, per layout and condition its
    `condition_summary`, the runs still missing, and the given paired tests (`teacher_bootstrap`) and speeds
    (`decoding_speeds`)."""
    teacher = teacher_result(studies)
    target = None if teacher is None else round(TARGET_SHARE * teacher["validation"]["bleu"], 4)
    layouts, missing = {}, []
    for label, study in studies.conditions.items():
        runs, absent = condition_runs(study)
        missing += [{"study": study.name, "condition": label, "layout": p, "seed": s} for p, s in absent]
        for layout in studies.layouts:
            if layout in runs:
                layouts.setdefault(layout, {})[label] = condition_summary(runs[layout], target)
    if teacher is None:
        preset, seed = studies.teacher_run
        missing.insert(0, {"study": studies.teacher.name, "condition": "teacher", "layout": preset, "seed": seed})
    return {
        "teacher": None
        if teacher is None
        else {
            "study": studies.teacher.name,
            **{key: teacher[key] for key in ("preset", "seed", "steps", "validation", "test")},
        },
        "target_share": TARGET_SHARE,
        "target_bleu": target,
        "conditions": {label: study.name for label, study in studies.conditions.items()},
        "layouts": layouts,
        "missing": missing,
        "bootstrap": tests or {},
        "decoding": speeds or {},
    }


def steps_cell(steps: list) -> str:
    return ", ".join("not reached" if step is None else f"{step:,}" for _, step in steps) or "-"


def results_table(summary: dict) -> str:
    """One row per layout and condition (seeds, test scores, Δ and p against the teacher, steps to its 98 %,
    decoding speed)."""
    teacher, speeds = summary["teacher"], summary["decoding"]
    header = [
        "layout",
        "condition",
        "seeds",
        "test bleu",
        "test chrf",
        "Δ vs teacher (bleu)",
        f"steps to {TARGET_LABEL} of the teacher",
        "p vs teacher (bleu)",
        "CPU eager vs base",
        "CPU engine vs base",
        "GPU decoding vs base",
    ]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for layout, conditions in summary["layouts"].items():
        for label, entry in conditions.items():
            test = entry["test"]
            paired = summary["bootstrap"].get(label, {}).get(layout, [])
            cells = [
                f"`{layout}`",
                label,
                ",".join(str(seed) for seed in entry["seeds"]),
                *(format_mean_std(test[name]["values"]) for name in METRICS),
                "-" if teacher is None else f"{test['bleu']['mean'] - teacher['test']['bleu']:+.2f}",
                steps_cell(entry["steps_to_target"]),
                ", ".join(f"{outcome['bleu']['p_value']:.3f}" for outcome in paired) or "-",
                speeds.get("cpu", {}).get(layout, "-"),
                speeds.get("engine", {}).get(layout, "-"),
                speeds.get("gpu", {}).get(layout, "-"),
            ]
            rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def curve_table(summary: dict) -> str:
    """Validation BLEU (mean over seeds) of each layout and condition at every evaluated step; "-" where a condition
    has no evaluation at that step."""
    curves = {
        (layout, label): dict(entry["validation_curve"])
        for layout, conditions in summary["layouts"].items()
        for label, entry in conditions.items()
    }
    steps = sorted({step for curve in curves.values() for step in curve})
    header = ["layout", "condition", *(f"{step:,}" for step in steps)]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (layout, label), curve in curves.items():
        cells = [f"`{layout}`", label, *(f"{curve[step]:.2f}" if step in curve else "-" for step in steps)]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def missing_line(summary: dict) -> str | None:
    """Which runs have no result yet, grouped by study and layout; None when every run has one."""
    if not summary["missing"]:
        return None
    grouped = {}
    for run in summary["missing"]:
        grouped.setdefault(run["study"], {}).setdefault(run["layout"], []).append(str(run["seed"]))
    parts = [
        f"`{study}`: "
        + ", ".join(f"`{layout}` seed{'s' * (len(seeds) > 1)} {', '.join(seeds)}" for layout, seeds in layouts.items())
        for study, layouts in grouped.items()
    ]
    return f"Runs without results yet ({len(summary['missing'])}): " + "; ".join(parts) + "."


def teacher_line(summary: dict) -> str:
    teacher = summary["teacher"]
    if teacher is None:
        return (
            "The teacher has no result yet: the differences from it, the steps to its BLEU and the paired tests wait "
            "for it."
        )
    return (
        f"Teacher: `{teacher['preset']}` (`{teacher['study']}`, seed {teacher['seed']}, {teacher['steps']:,} steps), "
        f"validation BLEU {teacher['validation']['bleu']:.2f}, test BLEU {teacher['test']['bleu']:.2f}, test chrF "
        f"{teacher['test']['chrf']:.2f}; {TARGET_LABEL} of its validation BLEU: "
        f"{summary['target_bleu']:.2f}."
    )


def report(summary: dict, link: str) -> str:
    """The study's tables with what they measure, the chart (under `link`, the folder of the summary's files as the
    reader sees it) and the runs still missing: the README's body and the documentation's block."""
    steps = sorted({step for c in summary["layouts"].values() for entry in c.values() for step in entry["steps"]})
    explanation = (
        f"Test scores after {' or '.join(f'{step:,}' for step in steps)} steps: mean ± std over seeds. Δ: the mean "
        f"test BLEU minus the teacher's. Steps to {TARGET_LABEL} of the teacher: per seed, the first evaluated step "
        f"whose validation BLEU reaches it. p: SacreBLEU's paired bootstrap ({BOOTSTRAP_SAMPLES:,} resamples) of each "
        f"seed's test predictions against the teacher's, one value per seed (p < {SIGNIFICANCE_LEVEL}: a significant "
        "difference). Decoding: the layout's speed against `base` as the benchmarks measured it, on models of other "
        "sizes decoding a fixed number of tokens, not on these runs; `-`: not measured."
    )
    sources = "\n".join(f"- {source}." for source in summary["decoding"].get("sources", []))
    parts = [teacher_line(summary)]
    line = missing_line(summary)
    if line:
        parts.append(line)
    if summary["layouts"]:
        parts += [
            results_table(summary),
            explanation,
            *([sources] if sources else []),
            "Validation BLEU at each evaluated step, mean over seeds:",
            curve_table(summary),
            f"![validation BLEU against steps]({link}{CHART})",
        ]
    return "\n\n".join(parts)


def bootstrap_table(summary: dict) -> str:
    """Every paired test against the teacher: per run, both metrics' scores, the run's bootstrap mean ± 95 % interval,
    and p."""
    header = ["layout", "condition", "seed", *(f"{name}: teacher, run (mean ± ci), p" for name in METRICS)]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, layouts in summary["bootstrap"].items():
        for layout, outcomes in layouts.items():
            for outcome in outcomes:
                cells = [f"`{layout}`", label, str(outcome["seed"])]
                for name in METRICS:
                    test = outcome[name]
                    cells.append(
                        f"{test['baseline']:.2f}, {test['score']:.2f} ({test['mean']:.2f} ± {test['ci']:.2f}), "
                        f"{test['p_value']:.3f}"
                    )
                rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def validation_chart(summary: dict, path: Path) -> Path:
    """Validation BLEU against steps: one panel per layout, a line per condition (mean over seeds), the teacher's
    validation BLEU and its 98 % as horizontal lines."""
    plt = pyplot()
    layouts = list(summary["layouts"])
    columns = min(3, len(layouts))
    rows = -(-len(layouts) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.5 * columns, 3.4 * rows), squeeze=False, sharey=True)
    for axis, layout in zip(axes.flat, layouts):
        for label, entry in summary["layouts"][layout].items():
            steps, bleu = zip(*entry["validation_curve"]) if entry["validation_curve"] else ((), ())
            axis.plot(steps, bleu, marker="o", markersize=3, linewidth=1, label=label)
        if summary["teacher"] is not None:
            axis.axhline(summary["teacher"]["validation"]["bleu"], color="black", linewidth=1, label="teacher")
            axis.axhline(
                summary["target_bleu"], color="black", linestyle=":", linewidth=1, label=f"{TARGET_LABEL} of it"
            )
        axis.set(title=layout, xlabel="step", ylabel="validation BLEU")
        axis.legend(fontsize=6)
    for axis in list(axes.flat)[len(layouts) :]:
        axis.set_visible(False)
    return save_figure(plt, figure, path)


def write_summary(
    studies: DistillationStudies, test: Callable[[list[str], list[str]], dict], speeds: dict | None = None
) -> Path:
    """Write `studies/results/mt-distill/` (README.md, summary.json, the chart) from the four studies' results and the
    paired `test` against the teacher; returns the README's path."""
    if teacher_result(studies) is None and not any(condition_runs(s)[0] for s in studies.conditions.values()):
        raise FileNotFoundError(f"no results of {', '.join(STUDY_NAMES)} yet: run their studies first")
    speeds = decoding_speeds(studies.layouts) if speeds is None else speeds
    summary = distillation_summary(studies, teacher_bootstrap(studies, test), speeds)
    folder = studies.results_dir
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if summary["layouts"]:
        validation_chart(summary, folder / CHART)
    studies_line = ", ".join(f"{label} `{study.name}`" for label, study in studies.conditions.items())
    lines = [
        f"# The distillation study (`{NAME}`)",
        "",
        f"A trained `base` (`{studies.teacher.name}`) converted into each layout and fine-tuned on the references, "
        f"distilled from it, or the layout trained from scratch; the studies: teacher `{studies.teacher.name}`, "
        f"{studies_line} (specs in `studies/`). Written by `python studies/distill_summary.py`.",
        "",
        report(summary, ""),
    ]
    if summary["bootstrap"]:
        lines += ["", "## Paired bootstrap against the teacher (test split)", "", bootstrap_table(summary)]
    path = folder / "README.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
