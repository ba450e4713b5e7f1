"""Decoding speed: sentences per second of `generate` (greedy and beam), ours against `base` and Marian.

Every model decodes the same random sources (length `--source-length`, no padding) for exactly
`--new-tokens` tokens (min_new_tokens = max_new_tokens), so all decode the same length. For each
(size, batch size, beam size) cell the models run interleaved, `--repeats` times each, after one
warm-up call each. Batch size 1 decodes `--single-sentences` sentences one after the other per
measurement. Ratios to `base` are ratios of median times in the same cell.

    PYTHONPATH=. python benchmarks/bench_decoding.py --sizes opus-mt small --repeats 3
"""

import argparse
import os

import torch

from hf_simple_attn.recipes.sizes import SIZES

import common


DEFAULT_MODELS = [common.MARIAN, "base", "hc-sa", "hc-sa:reference", "hc-sa-conv", "sh-x", "ran-all", "hard-dec"]
# The papers' decoding claims (sentences/s relative to `base`), checked at opus-mt size, greedy, batch 64.
TARGETS = {common.MARIAN: 1 / 1.0, "hard-dec": 1.43, "sh-x": 1.30, "ran-all": 1.20, "hc-sa": 1.06}
TARGET_CELL = ("opus-mt", 64, 1)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["opus-mt", "small"], choices=common.BENCHMARK_SIZES)
    parser.add_argument(
        "--models",
        nargs="+",
        default=DEFAULT_MODELS,
        help=f"presets, {common.MARIAN}, or preset{common.REFERENCE_SUFFIX} (fast paths off)",
    )
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 64])
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--source-length", type=int, default=25)
    parser.add_argument("--new-tokens", type=int, default=30)
    parser.add_argument("--single-sentences", type=int, default=4, help="sentences per measurement at batch size 1")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile one call per model in each opus-mt batch-64 greedy cell (top operators, GFLOPs)",
    )
    parser.add_argument("--output", default=os.path.join(common.RESULTS_DIR, "decoding.json"))
    parser.add_argument("--chart", default=None, help="PNG path (default: the output path with .png)")
    return parser.parse_args(argv)


def sources(vocab_size: int, sentences: int, length: int, seed: int = 0) -> torch.Tensor:
    """Random token ids ending in </s> (id 0), as a tokenizer would give them."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, vocab_size - 1, (sentences, length), generator=generator)
    ids[:, -1] = 0
    return ids


def decoder(model, batches: list[torch.Tensor], num_beams: int, new_tokens: int):
    """A function that decodes each batch of `batches` with `generate`."""
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, num_beams=num_beams, do_sample=False)

    def run():
        with torch.inference_mode():
            for batch in batches:
                output = model.generate(input_ids=batch, attention_mask=torch.ones_like(batch), **kwargs)
                assert output.shape == (batch.shape[0], new_tokens + 1), output.shape

    return run


def measure_cell(models: dict, size: str, batch_size: int, num_beams: int, args) -> dict:
    sentences = args.single_sentences if batch_size == 1 else batch_size
    source = sources(SIZES[size]["vocab_size"], sentences, args.source_length)
    batches = list(source.split(batch_size))
    runs = {name: decoder(model, batches, num_beams, args.new_tokens) for name, model in models.items()}
    names = list(models)
    for name in names:
        runs[name]()  # warm-up: memoised tables, allocator, first-call overheads
    walls, cpus, _ = common.interleaved(runs, args.repeats, f"{size} batch {batch_size} beams {num_beams}", sentences)
    results = {}
    for name in names:
        results[name] = {
            "sentences_per_second": common.summary([sentences / wall for wall in walls[name]]),
            "wall_seconds": common.summary(walls[name]),
            "cpu_seconds": common.summary(cpus[name]),
        }
    for reference in ("base", common.MARIAN):
        if reference not in walls:
            continue
        for name in names:
            paired = [ref / own for ref, own in zip(walls[reference], walls[name])]
            results[name][f"speedup_vs_{reference}"] = {
                "ratio_of_medians": common.summary(walls[reference])["median"] / common.summary(walls[name])["median"],
                "cpu_ratio_of_medians": common.summary(cpus[reference])["median"]
                / common.summary(cpus[name])["median"],
                "paired": common.summary(paired),
            }
    cell = {"size": size, "batch_size": batch_size, "num_beams": num_beams, "sentences": sentences, "models": results}
    if args.profile and (size, batch_size, num_beams) == TARGET_CELL:
        cell["profiles"] = {}
        for name in names:
            cell["profiles"][name] = common.profiled(runs[name])
            common.progress(f"profiled {name}: {cell['profiles'][name]['total_gflops']:.1f} GFLOPs")
    return cell


def check_targets(cells: list[dict]) -> list[dict]:
    checks = []
    for cell in cells:
        if (cell["size"], cell["batch_size"], cell["num_beams"]) != TARGET_CELL:
            continue
        for name, target in TARGETS.items():
            if name in cell["models"] and "speedup_vs_base" in cell["models"][name]:
                speedup = cell["models"][name]["speedup_vs_base"]
                if name == common.MARIAN:  # the target is base >= 1.0x Marian
                    measured, target, label = 1 / speedup["ratio_of_medians"], 1.0, "base vs MarianMTModel"
                else:
                    measured, label = speedup["ratio_of_medians"], f"{name} vs base"
                checks.append({"check": label, "target": target, "measured": measured, "reached": measured >= target})
    return checks


def chart(data: dict, path: str) -> str | None:
    plt = common.pyplot()
    if plt is None:
        return None
    sizes = list(dict.fromkeys(cell["size"] for cell in data["cells"]))  # one row per size
    rows = [[cell for cell in data["cells"] if cell["size"] == size] for size in sizes]
    columns = max(len(row) for row in rows)
    figure, axes = plt.subplots(
        len(rows), columns, figsize=(3.4 * columns + 1, 4.2 * len(rows)), squeeze=False, sharey=True
    )
    for axis, cell in ((axes[r][c], cell) for r, row in enumerate(rows) for c, cell in enumerate(row)):
        names = [name for name in cell["models"] if "speedup_vs_base" in cell["models"][name]]
        medians = [cell["models"][name]["speedup_vs_base"]["ratio_of_medians"] for name in names]
        low = [m - cell["models"][n]["speedup_vs_base"]["paired"]["min"] for m, n in zip(medians, names)]
        high = [cell["models"][n]["speedup_vs_base"]["paired"]["max"] - m for m, n in zip(medians, names)]
        axis.bar(
            range(len(names)),
            medians,
            yerr=[[max(0, v) for v in low], [max(0, v) for v in high]],
            color=["#999999" if n in ("base", common.MARIAN) else "#3b75af" for n in names],
            capsize=3,
        )
        axis.axhline(1.0, color="black", linewidth=0.8)
        axis.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=8)
        beams = "greedy" if cell["num_beams"] == 1 else f"beam {cell['num_beams']}"
        axis.set_title(f"{cell['size']}\nbatch {cell['batch_size']}, {beams}", fontsize=9)
    for row in axes:
        row[0].set_ylabel("sentences/s relative to base")
    settings, threads = data["settings"], data["environment"]["torch_threads"]
    figure.suptitle(
        f"Decoding speed, CPU, {threads} thread(s): source {settings['source_length']} tokens,\n"
        f"{settings['new_tokens']} new tokens; median of {settings['repeats']} interleaved repeats\n"
        f"(bars: min-max of the per-repeat ratios)",
        fontsize=9,
    )
    return common.save_chart(plt, figure, path)


def main(argv=None):
    args = parse_args(argv)
    common.setup_threads(args.threads)
    data = {
        **common.result_header("decoding", args),
        "cells": [],
    }
    for size in args.sizes:
        common.progress(f"building {len(args.models)} models at size {size}")
        models = {name: common.build_seq2seq(name, size) for name in args.models}
        for batch_size in args.batch_sizes:
            for num_beams in args.beams:
                data["cells"].append(measure_cell(models, size, batch_size, num_beams, args))
        del models
    data["targets"] = check_targets(data["cells"])
    common.write_results(data, args, chart)
    return data


if __name__ == "__main__":
    main()
