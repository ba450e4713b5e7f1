"""Markdown tables from the benchmark JSON files (for the README).

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
        }[data["benchmark"]]
        print("\n".join(tables(data)))
        for check in data.get("targets", []):
            print(
                f"- {check['check']}: {check['measured']:.3f}× (target {check['target']}×)"
                f"{'' if check['reached'] else ' — not reached'}"
            )
        print()


if __name__ == "__main__":
    main()
