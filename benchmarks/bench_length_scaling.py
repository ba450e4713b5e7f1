"""Length scaling: encoder forward time and peak memory from 128 to 4096 tokens.

BERT-style encoders (ours with encoder presets, and transformers' `BertModel` of the same size)
run one inference forward (`torch.inference_mode`, batch `--batch-size`, no padding) per length;
the models are interleaved within each repeat. Peak memory is the peak of CPU tensor bytes
allocated during the forward (see `common.peak_tensor_bytes`; parameters excluded). The growth
exponent is the least-squares slope of log(time) and log(memory) against log(length) over the
lengths >= `--slope-from` (1 = linear, 2 = quadratic).

    PYTHONPATH=. python benchmarks/bench_length_scaling.py --repeats 3
"""

import argparse
import math
import os

import torch

from hf_simple_attn.recipes.sizes import SIZES

import common


DEFAULT_MODELS = [common.BERT, "base", "hc-sa", "hc-sa-conv", "hc-sa-conv:reference", "hc-sa-index"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--size",
        default="opus-mt",
        choices=common.BENCHMARK_SIZES,
        help="encoder size: d_model, layers and heads of the seq2seq size of that name",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=DEFAULT_MODELS,
        help=f"encoder presets, {common.BERT}, or preset{common.REFERENCE_SUFFIX} (fast paths off)",
    )
    parser.add_argument("--lengths", nargs="+", type=int, default=[128, 256, 512, 1024, 2048, 4096])
    parser.add_argument(
        "--reference-max-length",
        type=int,
        default=2048,
        help="longest input for `:reference` models (their n×n tables grow quadratically)",
    )
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--slope-from", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", default=os.path.join(common.RESULTS_DIR, "length_scaling.json"))
    parser.add_argument("--chart", default=None, help="PNG path (default: the output path with .png)")
    return parser.parse_args(argv)


def log_slope(lengths: list[int], values: list[float]) -> float | None:
    """Least-squares slope of log(value) against log(length)."""
    points = [(math.log(n), math.log(v)) for n, v in zip(lengths, values) if v > 0]
    if len(points) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)


def main(argv=None):
    args = parse_args(argv)
    common.setup_threads(args.threads)
    vocab_size = SIZES[args.size]["vocab_size"]
    common.progress(f"building {len(args.models)} encoders at size {args.size}")
    models = {name: common.build_encoder(name, args.size, max_positions=max(args.lengths)) for name in args.models}
    names = list(models)
    results = {name: {"lengths": [], "seconds": [], "peak_bytes": []} for name in names}
    for length in args.lengths:
        ids = torch.randint(2, vocab_size - 1, (args.batch_size, length), generator=torch.Generator().manual_seed(0))
        active = [n for n in names if not common.split_model_name(n)[1] or length <= args.reference_max_length]

        def forward(name):
            with torch.inference_mode():
                models[name](input_ids=ids)

        walls = {name: [] for name in active}
        for name in active:
            forward(name)  # warm-up
        for repeat in range(args.repeats):
            for name in common.rotated(active, repeat):
                walls[name].append(common.timed(lambda: forward(name))[0])
        for name in active:
            results[name]["lengths"].append(length)
            results[name]["seconds"].append(common.summary(walls[name]))
            results[name]["peak_bytes"].append(common.peak_tensor_bytes(lambda: forward(name)))
        common.progress(
            f"length {length}: "
            + ", ".join(
                f"{n} {results[n]['seconds'][-1]['median'] * 1e3:.0f} ms / {results[n]['peak_bytes'][-1] / 2**20:.0f} MiB"
                for n in active
            )
        )
    for name in names:
        entry = results[name]
        upper = [i for i, n in enumerate(entry["lengths"]) if n >= args.slope_from]
        entry["time_exponent"] = log_slope(
            [entry["lengths"][i] for i in upper], [entry["seconds"][i]["median"] for i in upper]
        )
        entry["memory_exponent"] = log_slope(
            [entry["lengths"][i] for i in upper], [entry["peak_bytes"][i] for i in upper]
        )
        print(
            f"{name}: time ~ n^{entry['time_exponent']:.2f}, memory ~ n^{entry['memory_exponent']:.2f}"
            if entry["time_exponent"] is not None
            else f"{name}: too few lengths for an exponent"
        )
    data = {
        **common.result_header("length_scaling", args),
        "memory_method": common.peak_tensor_bytes.__doc__.strip(),
        "models": results,
    }
    common.write_results(data, args, chart)
    return data


def chart(data: dict, path: str) -> str | None:
    plt = common.pyplot()
    if plt is None:
        return None
    figure, (time_axis, per_token_axis, memory_axis) = plt.subplots(1, 3, figsize=(16, 4.5))
    for name, entry in data["models"].items():
        style = "--" if name.endswith(common.REFERENCE_SUFFIX) else "-"
        medians = [s["median"] for s in entry["seconds"]]
        low = [m - s["min"] for m, s in zip(medians, entry["seconds"])]
        high = [s["max"] - m for m, s in zip(medians, entry["seconds"])]
        time_axis.errorbar(
            entry["lengths"],
            medians,
            yerr=[low, high],
            label=name,
            linestyle=style,
            marker="o",
            markersize=3,
            capsize=2,
        )
        per_token_axis.plot(
            entry["lengths"],
            [1e3 * m / n for m, n in zip(medians, entry["lengths"])],
            label=name,
            linestyle=style,
            marker="o",
            markersize=3,
        )
        memory_axis.plot(
            entry["lengths"],
            [b / 2**20 for b in entry["peak_bytes"]],
            label=name,
            linestyle=style,
            marker="o",
            markersize=3,
        )
    for axis, label in (
        (time_axis, "forward time (s, median; bars min-max)"),
        (per_token_axis, "ms per token (flat = linear in length)"),
        (memory_axis, "peak tensor memory (MiB)"),
    ):
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("tokens")
        axis.set_ylabel(label)
        axis.grid(True, which="both", alpha=0.3)
    time_axis.legend(fontsize=8)
    settings, environment = data["settings"], data["environment"]
    figure.suptitle(
        f"Encoder forward ({settings['size']} size, batch {settings['batch_size']}), CPU, "
        f"{environment['torch_threads']} thread(s)",
        fontsize=10,
    )
    return common.save_chart(plt, figure, path)


if __name__ == "__main__":
    main()
