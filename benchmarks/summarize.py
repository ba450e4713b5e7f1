"""Markdown tables from the benchmark JSON files (the documentation's benchmark and deployment pages embed them at
build time, docs/hooks.py).

    python benchmarks/summarize.py benchmarks/results/decoding.json benchmarks/results/training.json \\
        benchmarks/results/length_scaling.json
"""

import argparse
import json


def ratio(entry: dict) -> str:
    """'1.12× (1.05-1.20)': ratio of medians and the min-max of the per-repeat ratios."""
    paired = entry["paired"] if "paired" in entry else entry["speed_paired"]
    median = entry["ratio_of_medians"] if "ratio_of_medians" in entry else entry["speed_ratio_of_medians"]
    return f"{median:.2f}× ({paired['min']:.2f}-{paired['max']:.2f})"


# The CPU decoding figure the documentation quotes per preset ("Which family when", the from-pretrained guide): the
# cell (results file, size, batch size, beams) of bench_decoding.py's results that `decoding_cell` finds.
CPU_DECODING_CELL = ("decoding_target.json", "opus-mt", 64, 1)


def decoding_cell(data: dict, size: str, batch_size: int, num_beams: int) -> dict | None:
    """The cell of bench_decoding.py's results measured at `size`, `batch_size` and `num_beams`; None if none was."""
    return next(
        (
            cell
            for cell in data["cells"]
            if (cell["size"], cell["batch_size"], cell["num_beams"]) == (size, batch_size, num_beams)
        ),
        None,
    )


def decoding(data: dict) -> list[str]:
    lines = []
    for cell in data["cells"]:
        beams = "greedy" if cell["num_beams"] == 1 else f"beam {cell['num_beams']}"
        lines += [
            f"**{cell['size']}, batch {cell['batch_size']}, {beams}**",
            "",
            "| model | sentences/s (median, min-max) | vs base | vs MarianMTModel |",
            "|---|---|---|---|",
        ]
        for name, entry in cell["models"].items():
            speed = entry["sentences_per_second"]
            lines.append(
                f"| {name} | {speed['median']:.2f} ({speed['min']:.2f}-{speed['max']:.2f}) | "
                f"{ratio(entry['speedup_vs_base'])} | {ratio(entry['speedup_vs_MarianMTModel'])} |"
            )
        lines.append("")
        if "profiles" in cell:
            lines += profile_table(cell["profiles"])
    return lines


SHORT_NAMES = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "sdpa",
    "aten::mm": "mm (output projection)",
    "aten::addmm": "addmm (linear layers)",
}


def profile_table(profiles: dict) -> list[str]:
    """Where one `generate` call spends its time: matrix-multiply GFLOPs (the profiler does not count
    SDPA's; the ratio to base bounds a compute-bound speed-up) and the operators with the largest
    share of CPU time."""
    base_gflops = profiles["base"]["total_gflops"] if "base" in profiles else None
    lines = [
        "| model | GFLOPs | base GFLOPs / model GFLOPs | top operators (share of CPU time) |",
        "|---|---|---|---|",
    ]
    for name, profile in profiles.items():
        bound = f"{base_gflops / profile['total_gflops']:.2f}×" if base_gflops else "-"
        operators = ", ".join(
            f"{SHORT_NAMES.get(op['operator'], op['operator'].removeprefix('aten::'))} {100 * op['share']:.0f}%"
            for op in profile["top_operators"][:6]
        )
        lines.append(f"| {name} | {profile['total_gflops']:.1f} | {bound} | {operators} |")
    return lines + [""]


def training(data: dict) -> list[str]:
    budget = data["settings"]["memory_budget_gib"]
    lines = []
    for entry in data["sizes"]:
        lines += [
            f"**{entry['size']}**",
            "",
            f"| model | parameters | tokens/s (median, min-max) | vs base | KiB per token | max tokens per batch "
            f"in {budget} GiB | vs base | vs MarianMTModel |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, model in entry["models"].items():
            speed, memory = model["tokens_per_second"], model["memory"]
            vs_marian = model.get("vs_MarianMTModel")
            lines.append(
                f"| {name} | {model['parameters'] / 1e6:.1f}M | {speed['median']:.0f} ({speed['min']:.0f}-{speed['max']:.0f}) "
                f"| {ratio(model['vs_base'])} | {memory['fit_bytes_per_token'] / 2**10:.0f} | "
                f"{memory['max_tokens_per_batch']} | {model['vs_base']['tokens_per_batch_ratio']:.3f}× | "
                + (f"{vs_marian['tokens_per_batch_ratio']:.3f}× |" if vs_marian else "- |")
            )
        lines.append("")
    return lines


def length_scaling(data: dict) -> list[str]:
    lengths = sorted({n for entry in data["models"].values() for n in entry["lengths"]})
    lines = [
        "| model | " + " | ".join(str(n) for n in lengths) + " | time ~ n^k | memory ~ n^k |",
        "|---|" + "---|" * (len(lengths) + 2),
    ]
    for name, entry in data["models"].items():
        cells = []
        for n in lengths:
            if n in entry["lengths"]:
                i = entry["lengths"].index(n)
                cells.append(f"{entry['seconds'][i]['median']:.2f} s / {entry['peak_bytes'][i] / 2**20:.0f} MiB")
            else:
                cells.append("-")
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | {entry['time_exponent']:.2f} | {entry['memory_exponent']:.2f} |"
        )
    return lines + [""]


def deployment(data: dict) -> list[str]:
    """The table `bench_deployment.py` stores with its results (sentences/s, ratio to CTranslate2 fp32)."""
    return data["table"] + [""]


def count_ops(data: dict) -> list[str]:
    """Operators per training step and per cached decoding step, with the operators that differ most from base."""
    size, settings = data["size_fields"], data["settings"]
    lines = []
    for kind, reference in (("seq2seq", "MarianMTModel"), ("encoder", "BertModel")):
        decoding = kind == "seq2seq"
        lines += [
            f"**{kind}: operators per step** (d_model {size['d_model']}, {size['layers']} layers per stack, "
            f"{size['heads']} heads, batch {settings['batch_size']} x {settings['source_length']}"
            + (f"+{settings['target_length']} tokens)" if decoding else " tokens)"),
            "",
            f"| model | training step | vs base | vs {reference} |"
            + (
                f" decoding step | vs base | vs {reference} | static decoding step | vs base | vs {reference} |"
                if decoding
                else ""
            )
            + " most different operators vs base (training step) |",
            "|---|---|---|---|" + ("---|---|---|---|---|---|" if decoding else "") + "---|",
        ]
        for name, model in data[kind].items():
            if "error" in model:
                lines.append(f"| {name} | {model['error']} |")
                continue
            cells = [name]
            for step in ("training_step", "decoding_step", "static_decoding_step") if decoding else ("training_step",):
                if step not in model:  # runs made before count_ops counted static steps
                    cells += ["-", "-", "-"]
                    continue
                cells.append(str(model[step]["total"]))
                for vs in ("base", reference):
                    comparison = model.get(f"vs_{vs}", {}).get(step)
                    cells.append(f"{comparison['ratio']:.2f}×" if comparison else "-")
            top = model.get("vs_base", {}).get("training_step", {}).get("differences", [])[:4]
            cells.append(", ".join(f"{row['operator'].removeprefix('aten.')} {row['difference']:+d}" for row in top))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        lines += count_ops_by_module(data[kind])
    return lines


def count_ops_by_module(models: dict) -> list[str]:
    """Where each model's training step differs from base's: the modules (all layers together) whose operators differ
    most, forward and backward; absent from runs made before count_ops named modules."""
    rows = []
    for name, model in models.items():
        top = model.get("vs_base", {}).get("training_step", {}).get("module_differences", [])[:3]
        if top:
            cells = [
                f"{row['module'].removeprefix('model.')} {sum(row['difference'].values()):+d} "
                f"({row['difference']['forward']:+d} / {row['difference']['backward']:+d})"
                for row in top
            ]
            rows.append(f"| {name} | " + ", ".join(cells) + " |")
    if not rows:
        return []
    header = [
        "| model | modules whose training-step operators differ most from base's, all layers (forward / backward) |",
        "|---|---|",
    ]
    return header + rows + [""]


# What the "identical to eager" share of bench_gpu.py's compiled decoding means, printed under its tables.
IDENTICAL_TO_EAGER = (
    "the share of the cell's sentences that compiled decoding gives token for token as eager decoding does, from the "
    "same bf16 weights. The models are untrained (random weights), so many next-token logits lie close together; "
    "the compiled graph fuses and orders the bf16 arithmetic differently, so rounding flips some arg-maxes, and from "
    "the first flipped token on the rest of the sentence differs. A low share is not a wrong result: "
    "tests/test_compile.py and tests/test_static_cache.py check that compiled steps give eager's logits up to "
    "rounding (float64) and its tokens; the float32 share (a table of its own, in runs that measured it) is the share "
    "without bf16's rounding. On trained checkpoints (benchmarks/compiled_agreement.py, CPU inductor) every float32 "
    "sentence is eager's, and every bf16 difference is a flip of tokens whose exact logits lie within rounding."
)


def gpu(data: dict) -> list[str]:
    """bench_gpu.py: training (eager and compiled), memory, and decoding per cell (medians, min-max), with ratios to
    base and MarianMTModel, the device-busy shares, the compiled outputs identical to eager, and what the time budget
    left out (also the JSON of earlier runs, which compiled training in the training section)."""
    device, settings = data["environment"]["device"], data["settings"]

    def versus(entry: dict | None, key: str) -> str:
        return f"{entry[key]['ratio_of_medians']:.2f}×" if entry and key in entry else "-"

    def speed(entry: dict | None, key: str, scale: float = 1.0, digits: int = 0) -> list[str]:
        """The figure's median (min-max) and its ratios to base and MarianMTModel, or the error, or dashes."""
        if not entry or key not in entry:
            return [entry["error"][:60] if entry and "error" in entry else "-", "-", "-"]
        figure = entry[key]
        spread = f"{figure['median'] / scale:.{digits}f} ({figure['min'] / scale:.{digits}f}-{figure['max'] / scale:.{digits}f})"
        return [spread, versus(entry, "vs_base"), versus(entry, "vs_MarianMTModel")]

    def versus_base_fastest(entry: dict | None) -> str:
        """The ratio to base's fastest mode; in runs made before it was measured, to base's same mode, marked so."""
        if entry and "vs_base_fastest" not in entry and "vs_base" in entry:
            return versus(entry, "vs_base") + " (same mode)"
        return versus(entry, "vs_base_fastest")

    def busy(entry: dict | None) -> str:
        share = (entry or {}).get("device_busy", {}).get("share")
        return f"{share:.0%}" if share is not None else "-"

    lines = [f"**{device['name']}, size {settings['size']}**", ""]
    training, memory = data.get("training", {}).get("models", {}), data.get("memory", {}).get("models", {})
    compiled_training = data.get("compiled-training", {}).get("models", {})
    if training or memory or compiled_training:
        cap = settings["memory_cap_gib"]
        lines += [
            f"Training step (bf16 autocast, fused AdamW, {settings['batch_size']} sentences x {settings['source_length']}"
            f"+{settings['target_length']} tokens): target tokens/s (thousands), median (min-max); busy: kernel ms / "
            "wall ms",
            "",
            "| model | eager | vs base | vs MarianMTModel | busy | compiled | vs base | vs MarianMTModel | vs eager "
            f"| compile s | busy | peak GiB | max tokens per batch in {cap} GiB | vs base | vs MarianMTModel |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name in dict.fromkeys([*training, *compiled_training, *memory]):
            eager = training.get(name, {}).get("eager")
            compiled = compiled_training.get(name, {}).get("compiled") or training.get(name, {}).get("compiled")
            cells = [name, *speed(eager, "target_tokens_per_second", 1000, 1), busy(eager)]
            cells += speed(compiled, "target_tokens_per_second", 1000, 1) + [versus(compiled, "vs_eager")]
            cells.append(f"{compiled['compile_seconds']:.0f}" if compiled and "compile_seconds" in compiled else "-")
            cells.append(busy(compiled))
            fit = memory.get(name, {})
            if "max_tokens" in fit:
                cells += [f"{fit['peak_bytes'] / 2**30:.2f}", str(fit["max_tokens"])]
                cells += [
                    f"{fit[f'vs_{ref}']['tokens_per_batch_ratio']:.2f}×" if f"vs_{ref}" in fit else "-"
                    for ref in ("base", "MarianMTModel")
                ]
            else:
                cells += [fit.get("error", "-")[:60], "-", "-", "-"]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    for cell in data.get("decoding", {}).get("cells", []):
        beams = "greedy" if cell["num_beams"] == 1 else f"beam {cell['num_beams']}"
        lines += [
            f"Decoding (bf16 weights, {settings['new_tokens']} new tokens), batch {cell['batch_size']}, {beams}: "
            "sentences/s, median (min-max); ratios to base's fastest mode; busy: kernel ms / wall ms",
            "",
            "| model | eager | vs base fastest | busy | compiled | vs base fastest | vs eager | busy | fastest vs base "
            "| fastest vs MarianMTModel | compiled: first call s, graphs, identical to eager |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, model in cell["models"].items():
            eager, compiled = model["eager"], model.get("compiled")
            cells = [name, speed(eager, "sentences_per_second", digits=1)[0], versus_base_fastest(eager)]
            cells += [busy(eager), speed(compiled, "sentences_per_second", digits=1)[0]]
            cells += [versus_base_fastest(compiled), versus(compiled, "vs_eager"), busy(compiled)]
            cells += [versus(model["best"], "vs_base"), versus(model["best"], "vs_MarianMTModel")]
            if compiled:
                graphs = f"{compiled['first_call_graphs']} graphs, " if "first_call_graphs" in compiled else ""
                cells.append(
                    f"{compiled['first_call_seconds']:.0f} s, {graphs}{100 * compiled['identical_to_eager']:.0f}%"
                )
            else:
                cells.append("; ".join(model.get("compile_errors", {}).values())[:80] or "-")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        if cell.get("graphs_compiled_in_repeats"):
            lines += [f"- {cell['graphs_compiled_in_repeats']} graphs compiled in the timed repeats (recompiles)", ""]
        if "note" in cell:
            lines += [f"- {cell['note']}", ""]
    cells = data.get("decoding", {}).get("cells", [])
    if any("compiled" in model for cell in cells for model in cell["models"].values()):
        lines += [f"- identical to eager: {IDENTICAL_TO_EAGER}", ""]
    identity = data.get("decoding", {}).get("identical_to_eager", {})
    if identity:
        lines += [
            "Compiled decoding: sentences identical to eager",
            "",
            "| model | cell | float32 | bf16 |",
            "|---|---|---|---|",
        ]
        for name, entry in identity.items():
            float32 = f"{entry['float32']:.1%}" if "float32" in entry else entry.get("float32_error", "-")[:60]
            lines.append(f"| {name} | {entry['cell']} | {float32} | {entry['bfloat16']:.1%} |")
        lines.append("")
    notes = {
        entry["device_busy"]["note"]
        for section in (training, compiled_training)
        for model in section.values()
        for entry in model.values()
        if isinstance(entry, dict) and "note" in entry.get("device_busy", {})
    }
    lines += [f"- busy: {note}" for note in sorted(notes)]
    for name, section in data["sections"].items():
        if section["skipped"]:
            lines.append(f"- {name}: over its time budget, skipped " + ", ".join(section["skipped"]))
    return lines + [""]


GPU_PRESET_COLUMNS = (
    "training tokens/s, eager",
    "compiled",
    "tokens per batch",
    "greedy, batch 64, eager",
    "greedy, batch 64, compiled",
    "beam 4, batch 64, eager",
    "greedy, batch 1, eager",
)


def gpu_preset_cells(data: dict, names: list[str]) -> dict[str, dict[str, str]]:
    """bench_gpu.py's results for `names`, each figure as a ratio to `base`'s in the same mode of the same run (eager
    to eager, compiled to compiled), `-` where not measured: {name: {column of `GPU_PRESET_COLUMNS`: cell}}."""
    training, memory = data.get("training", {}).get("models", {}), data.get("memory", {}).get("models", {})
    compiled_training = data.get("compiled-training", {}).get("models", {})
    cells = {
        (cell["batch_size"], cell["num_beams"]): cell["models"] for cell in data.get("decoding", {}).get("cells", [])
    }
    unknown = [name for name in names if name not in {*training, *memory, *(m for c in cells.values() for m in c)}]
    if unknown:
        raise ValueError(f"not measured in this run: {unknown}")

    def versus_base(entry: dict | None) -> str:
        return f"{entry['vs_base']['ratio_of_medians']:.2f}×" if entry and "vs_base" in entry else "-"

    def decoding_cell(name: str, batch_size: int, num_beams: int, mode: str) -> str:
        return versus_base(cells.get((batch_size, num_beams), {}).get(name, {}).get(mode))

    rows = {}
    for name in names:
        compiled = compiled_training.get(name, {}).get("compiled") or training.get(name, {}).get("compiled")
        fit = memory.get(name, {})
        figures = [
            versus_base(training.get(name, {}).get("eager")),
            versus_base(compiled),
            f"{fit['vs_base']['tokens_per_batch_ratio']:.2f}×" if "vs_base" in fit else "-",
            decoding_cell(name, 64, 1, "eager"),
            decoding_cell(name, 64, 1, "compiled"),
            decoding_cell(name, 64, 4, "eager"),
            decoding_cell(name, 1, 1, "eager"),
        ]
        rows[name] = dict(zip(GPU_PRESET_COLUMNS, figures))
    return rows


def gpu_presets(data: dict, names: list[str]) -> list[str]:
    """A short table of bench_gpu.py's results for `names` (the family pages), from `gpu_preset_cells`."""
    device, settings = data["environment"]["device"], data["settings"]
    lines = [
        f"{device['name']}, {settings['size']}, bf16; ratios to `base` in the same run and mode (eager to eager, "
        "compiled to compiled; `-`: not measured):",
        "",
        "| model | training tokens/s, eager | compiled | tokens per batch | greedy, batch 64, eager | compiled "
        "| beam 4, batch 64, eager | greedy, batch 1, eager |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in gpu_preset_cells(data, names).items():
        lines.append("| " + " | ".join([f"`{name}`", *row.values()]) + " |")
    return lines


def int8(data: dict) -> list[str]:
    """bench_int8.py: BLEU of each engine and precision on trained checkpoints, and the share of sentences
    translated exactly as PyTorch float32 does (speeds are in the JSON; on a shared machine they are noisy)."""
    lines = [
        f"{data['sentences']} test sentences, batch {data['settings']['batch_size']}, beam {data['settings']['beams']}",
        "",
        "| checkpoint | engine | BLEU beam | vs PyTorch fp32 | identical to PyTorch fp32 | BLEU greedy | vs PyTorch fp32 "
        "| identical to PyTorch fp32 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for checkpoint in data["checkpoints"]:
        for engine, entry in checkpoint["engines"].items():
            change = entry["vs_pytorch_fp32"]
            lines.append(
                f"| {checkpoint['name']} | {engine} | {entry['beam']['bleu']:.2f} | {change['beam_bleu_change']:+.2f} "
                f"| {100 * entry['beam']['identical']:.1f}% | {entry['greedy']['bleu']:.2f} | "
                f"{change['greedy_bleu_change']:+.2f} | {100 * entry['greedy']['identical']:.1f}% |"
            )
    lines.append("")
    for check in data.get("checks", []):
        lines.append(
            f"- {check['check']}: {check['bleu_lost']:+.2f} BLEU lost (target at most {check['target']})"
            f"{'' if check['reached'] else ' — not reached'}"
        )
    return lines + [""]


def compiled_agreement(data: dict) -> list[str]:
    """compiled_agreement.py: per checkpoint and dtype, the sentences compiled (and eager static-cache) decoding gives
    as eager decoding does, the differing ones whose first different token is a rounding flip, and each way's logit
    error against the float64 model (median and largest over the steps)."""

    def error(way: dict) -> str:
        return f"{way['logit_error']['median']:.2g}, {way['logit_error']['max']:.2g}"

    settings = data["settings"]
    lines = [
        f"{settings['sentences']} test sentences of {settings['dataset_name']}, greedy, batch {settings['batch_size']}, "
        f"compiled with {settings['backend']}",
        "",
        "| checkpoint | preset | dtype | static eager identical | compiled identical | differing | rounding flips | "
        "identical but rounding | logit error eager / compiled (median, max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, result in data["checkpoints"].items():
        for dtype_name, ways in result["dtypes"].items():
            compiled = ways["compiled"]
            lines.append(
                f"| {name} | {result['preset']} | {dtype_name} | {ways['static_eager']['identical']:.1%} | "
                f"{compiled['identical']:.1%} | {compiled['differing']} | {compiled['rounding_flips']} | "
                f"{compiled['identical_but_rounding']:.1%} | {error(ways['eager'])} / {error(compiled)} |"
            )
    return lines + [""]


def shortlist(data: dict) -> list[str]:
    """bench_shortlist.py: coverage of the shortlist on trained checkpoints, BLEU and speed with and without it, and
    the output projection and decoding at a large vocabulary."""
    lines = []
    names = {"full": "full vocabulary", "shortlist": "shortlist", "own": "each sentence's own candidates"}
    for checkpoint in data["checkpoints"]:
        built = checkpoint["shortlist"]
        lines += [
            f"**{checkpoint['name']}**: top {built['top_k']}, {built['always_allowed']} tokens always allowed, built in "
            f"{built['build_seconds']:.0f} s from {built['training_pairs']:,} training pairs",
            "",
            "| split | reference tokens covered | sentences covered | candidates per sentence | candidates per batch |",
            "|---|---|---|---|---|",
        ]
        for split in ("validation", "test"):
            cover = built[split]
            lines.append(
                f"| {split} | {100 * cover['coverage']:.1f}% | {100 * cover['sentences_covered']:.1f}% | "
                f"{cover['candidates_per_sentence']:.0f} | {cover['candidates_per_batch']:.0f} "
                f"({100 * cover['vocabulary_share_per_batch']:.0f}% of the vocabulary) |"
            )
        lines += [
            "",
            "| decoding | search | BLEU | vs full | identical to full | sentences/s | × wall | × CPU |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for mode in ("greedy", "beam"):
            for name, entry in checkpoint.get(mode, {}).items():
                versus = entry["vs_full"]
                lines.append(
                    f"| {names.get(name, name)} | {mode} | {entry['bleu']:.2f} | {versus['bleu_change']:+.2f} | "
                    f"{100 * entry['identical']:.1f}% | {entry['sentences_per_second']['median']:.1f} | "
                    f"{versus['speedup']:.2f} | {versus['cpu_speedup']:.2f} |"
                )
        lines.append("")
    large = data.get("large_vocabulary")
    if large:
        lines += [
            f"**{large['size']}, {large['vocab_size']:,}-token vocabulary, untrained weights**: {large['sentences']} "
            f"sentences, {large['candidates']:,} candidates",
            "",
            "| measured | full sentences/s | shortlist sentences/s | × wall | × CPU |",
            "|---|---|---|---|---|",
        ]
        for key, label in (("projection", "output projection of one step"), ("greedy", "greedy decoding")):
            if key in large:
                full, short = large[key]["full"], large[key]["shortlist"]
                lines.append(
                    f"| {label} | {full['sentences_per_second']['median']:.2f} | "
                    f"{short['sentences_per_second']['median']:.2f} | {short['vs_full']['speedup']:.2f} | "
                    f"{short['vs_full']['cpu_speedup']:.2f} |"
                )
        lines.append("")
    return lines


def profile_beam(data: dict) -> list[str]:
    """profile_beam.py: where one beam-search call spends its time, per engine (seconds under cProfile); sections
    under 2 % of every call are summed into "rest"."""
    settings, engines = data["settings"], data["engines"]
    names = dict.fromkeys(name for entry in engines.values() for name in entry["sections"])
    shown = [n for n in names if max(e["sections"].get(n, {}).get("share", 0) for e in engines.values()) >= 0.02]
    lines = [
        f"{settings['size']}, batch {settings['batch_size']}, beam {settings['beams']}, {settings['source_length']}-token "
        f"sources, {settings['new_tokens']} new tokens, length control `{settings['length_control']}`: seconds of one "
        "call under cProfile",
        "",
        "| engine | call | " + " | ".join(n.strip() for n in shown) + " | rest |",
        "|---|---|" + "---|" * (len(shown) + 1),
    ]
    for name, entry in engines.items():
        seconds = [entry["sections"][n]["seconds"] if n in entry["sections"] else None for n in shown]
        rest = entry["profiled_seconds"] - sum(s for s in seconds if s is not None)
        cells = ["-" if s is None else f"{s:.2f}" for s in seconds] + [f"{rest:.2f}"]
        lines.append(f"| {name} | {entry['profiled_seconds']:.2f} | " + " | ".join(cells) + " |")
    return lines + [""]


def profile_gpu_table(data: dict) -> list[str]:
    """profile_gpu.py's table per phase: times, counts, the device-busy share (kernel ms / wall ms, CUDA) and kernel
    (on a CPU operator) ratios to base."""
    cuda, args = data["cuda"], data["settings"]
    headings = {
        "training": f"training step: {args['batch_size']} sentences x {args['source_length']}+{args['target_length']}"
        " tokens, bf16 autocast, fused AdamW",
        "decoding": f"greedy generate: {args['decode_batch_size']} sentences x {args['decode_source_length']} "
        f"tokens, {args['new_tokens']} new tokens, bf16 weights",
    }
    count_field = "device_kernels" if cuda else "operator_calls"
    columns = f"{'model':<14} {'wall ms':>9} {'self CPU ms':>11} {'ATen ops':>9}"
    if cuda:
        columns += f" {'kernels':>8} {'kernel ms':>9} {'busy':>5} {'waits':>6}"
    columns += f" {'vs base':>8} {'vs Marian':>9}"
    lines = [f"{data['environment']['device']['name']}, size {args['size']}; wall ms: median of timed runs"]
    if cuda:
        lines += [
            "busy: kernel ms / wall ms; waits: CUDA runtime calls that block the host or copy; ratios: of device kernels",
            f"the harness's in every profile: {data['profiler_baseline']['host_waits_and_copies']}",
        ]
    else:
        lines.append(f"{data['note']}; ratios: of ATen operator calls")
    for phase in headings:
        lines += ["", headings[phase], columns]
        for name, entry in data["models"].items():
            if "error" in entry:
                lines.append(f"{name:<14} {entry['error'][:100]}")
                continue
            result = entry[phase]
            row = f"{name:<14} {result['wall_ms']:9.1f} {result['self_cpu_ms']:11.1f} {result['operator_calls']:9d}"
            if cuda:
                row += f" {result['device_kernels']:8d} {result['device_kernel_ms']:9.1f}"
                row += f" {result['device_kernel_ms'] / result['wall_ms']:5.0%} {result['host_waits']:6d}"
            for reference in ("base", "MarianMTModel"):
                ratio = result.get(f"vs_{reference}", {}).get(count_field)
                row += f" {ratio:8.2f}x" if ratio is not None else f" {'':>9}"
            lines.append(row)
    return lines


def profile_gpu(data: dict) -> list[str]:
    """profile_gpu.py: kernels, device and host time of a training step and a greedy generate, per model."""
    return ["```", *profile_gpu_table(data), "```", ""]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    for path in args.files:
        with open(path) as handle:
            data = json.load(handle)
        tables = {
            "decoding": decoding,
            "training": training,
            "length_scaling": length_scaling,
            "deployment": deployment,
            "count_ops": count_ops,
            "gpu": gpu,
            "int8": int8,
            "compiled_agreement": compiled_agreement,
            "shortlist": shortlist,
            "profile_beam": profile_beam,
            "profile_gpu": profile_gpu,
        }[data["benchmark"]]
        print("\n".join(tables(data)))
        for check in data.get("targets", []):
            print(
                f"- {check['check']}: {check['measured']:.3f}× (target {check['target']}×): "
                f"{'reached' if check['reached'] else 'not reached'}, {check['measured'] / check['target'] - 1:+.2%}"
            )
        print()


if __name__ == "__main__":
    main()
