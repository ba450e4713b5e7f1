"""Training cost: tokens per second of one optimizer step, its peak memory, and the tokens per batch
that fit a memory budget (the papers' "max tokens per batch"), ours against `base` and Marian.

One step = forward with labels, backward, AdamW step (train mode, Marian's default dropout 0.1),
on random sources and targets of fixed lengths (no padding). Tokens count source + target tokens.
Our models compute their loss as they train by default, in chunks of `config.loss_chunk_size`
target tokens that keep no logits for backward (`--loss-chunk-size 0`: full logits, as
`MarianMTModel`, which is measured as transformers ships it).
Speed: `--repeats` interleaved steps per model at `--batch-size` sentences, after a warm-up step.

Memory: at each of `--memory-batch-sizes` the peak of live CPU tensor bytes during forward +
backward (PyTorch profiler allocation events, see `common.peak_tensor_bytes`) plus the bytes held
before it (parameters, buffers, AdamW state; gradients are freed before each step), i.e. what a
GPU's allocator would have to hold; the optimizer step's peak is measured apart (it does not
depend on the batch). Once the batch is large enough that activations, not the gradients
allocated during backward, set that peak, it is linear in the batch size (`fixed +
per_sentence·b`, fitted by least squares; the fit's largest residual is reported), so the largest
batch within `--memory-budget-gib` is (budget - fixed) / per_sentence sentences.

    PYTHONPATH=. python benchmarks/bench_training.py --sizes opus-mt --repeats 3
"""

import argparse
import os

import torch

from hf_simple_attn.recipes.sizes import SIZES

import common


DEFAULT_MODELS = [common.MARIAN, "base", "hc-sa", "hc-sa-conv", "sh-x", "ran-all", "hard-dec"]
# The papers' memory claims (max tokens per batch relative to `base`), checked at opus-mt size.
TARGETS = {"sh-x": 1.26, "hc-sa": 1.17}
# Max tokens per batch of every preset relative to transformers' MarianMTModel (issue 14), at opus-mt size.
TARGET_VS_MARIAN = 1.5


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["opus-mt", "small"], choices=common.BENCHMARK_SIZES)
    parser.add_argument(
        "--models",
        nargs="+",
        default=DEFAULT_MODELS,
        help=f"presets, {common.MARIAN}, or preset{common.REFERENCE_SUFFIX} (fast paths off)",
    )
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per timed step")
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--target-length", type=int, default=32)
    parser.add_argument(
        "--memory-batch-sizes",
        nargs="+",
        type=int,
        default=[16, 32, 48],
        help="batch sizes of the memory fit: large enough that activations, not gradients, set the peak",
    )
    parser.add_argument(
        "--memory-budget-gib",
        type=float,
        default=11.0,
        help="memory for the tokens-per-batch figure (default: the 11 GiB of the RTX 2080 Ti "
        "the hard-coded attention paper used)",
    )
    parser.add_argument(
        "--loss-chunk-size",
        type=int,
        default=None,
        help="config.loss_chunk_size of our models (default: the config's; 0: full logits)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", default=os.path.join(common.RESULTS_DIR, "training.json"))
    parser.add_argument("--chart", default=None, help="PNG path (default: the output path with .png)")
    args = parser.parse_args(argv)
    if len(set(args.memory_batch_sizes)) < 2:
        parser.error(
            f"--memory-batch-sizes: the memory fit needs at least two different batch sizes, got "
            f"{args.memory_batch_sizes} (e.g. --memory-batch-sizes 16 32)"
        )
    return args


class Trainer:
    """One model, its AdamW optimizer and a fixed random batch per batch size."""

    def __init__(self, model, vocab_size: int, source_length: int, target_length: int):
        self.model = model.train()
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.vocab_size, self.source_length, self.target_length = vocab_size, source_length, target_length
        self.batches = {}

    def batch(self, sentences: int) -> dict:
        if sentences not in self.batches:
            generator = torch.Generator().manual_seed(sentences)
            ids = torch.randint(2, self.vocab_size - 1, (sentences, self.source_length), generator=generator)
            labels = torch.randint(2, self.vocab_size - 1, (sentences, self.target_length), generator=generator)
            self.batches[sentences] = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
        return self.batches[sentences]

    def forward_backward(self, sentences: int) -> None:
        self.model(**self.batch(sentences)).loss.backward()

    def step(self, sentences: int) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.forward_backward(sentences)
        self.optimizer.step()

    def held_bytes(self) -> int:
        """Parameters, buffers, optimizer state and gradients (when present): what lives between phases."""
        state = [t for s in self.optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        return common.tensor_bytes([*self.model.parameters(), *self.model.buffers(), *state, *grads])

    def peak_bytes(self, sentences: int) -> tuple[int, int]:
        """Peak tensor bytes of (forward + backward, optimizer step) of one training step."""
        self.optimizer.zero_grad(set_to_none=True)
        forward_backward = self.held_bytes() + common.peak_tensor_bytes(lambda: self.forward_backward(sentences))
        optimizer_step = self.held_bytes() + common.peak_tensor_bytes(self.optimizer.step)
        return forward_backward, optimizer_step


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = a + b·x: (a, b, largest |residual| / y)."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)
    intercept = mean_y - slope * mean_x
    residual = max(abs(y - intercept - slope * x) / y for x, y in zip(xs, ys))
    return intercept, slope, residual


def measure_size(size: str, args) -> dict:
    vocab_size = SIZES[size]["vocab_size"]
    tokens_per_sentence = args.source_length + args.target_length
    common.progress(f"building {len(args.models)} models at size {size}")
    trainers = {
        name: Trainer(common.build_seq2seq(name, size), vocab_size, args.source_length, args.target_length)
        for name in args.models
    }
    names = list(trainers)
    results = {name: {"parameters": trainers[name].model.num_parameters()} for name in names}
    for name in names:
        if name != common.MARIAN:
            config = trainers[name].model.config
            if args.loss_chunk_size is not None:
                config.loss_chunk_size = args.loss_chunk_size
            results[name]["loss_chunk_size"] = config.loss_chunk_size
    check_linear_range(args, {results[name].get("loss_chunk_size", 0) for name in names})

    # Memory first: the warm-up step creates the optimizer state, which the later steps hold.
    budget = args.memory_budget_gib * 2**30
    for name in names:
        trainer = trainers[name]
        trainer.step(min(args.memory_batch_sizes))
        peaks, optimizer_peaks = zip(*(trainer.peak_bytes(b) for b in args.memory_batch_sizes))
        # Activations grow with the batch: the forward + backward peak is linear in it; the optimizer
        # step's peak (parameters, gradients, AdamW state and temporaries) does not depend on it.
        fixed, per_sentence, residual = linear_fit(args.memory_batch_sizes, peaks)
        max_sentences = int((budget - fixed) // per_sentence) if max(optimizer_peaks) <= budget else 0
        results[name]["memory"] = {
            "batch_sizes": args.memory_batch_sizes,
            "peak_bytes": list(peaks),
            "optimizer_step_peak_bytes": list(optimizer_peaks),
            "fit_fixed_bytes": fixed,
            "fit_bytes_per_sentence": per_sentence,
            "fit_bytes_per_token": per_sentence / tokens_per_sentence,
            "fit_largest_relative_residual": residual,
            "budget_bytes": budget,
            "max_sentences_per_batch": max_sentences,
            "max_tokens_per_batch": max_sentences * tokens_per_sentence,
        }
        common.progress(
            f"{size} {name}: peak {[round(p / 2**20) for p in peaks]} MiB at {args.memory_batch_sizes} sentences, "
            f"{per_sentence / tokens_per_sentence / 2**10:.1f} KiB/token, {max_sentences * tokens_per_sentence} "
            f"tokens in {args.memory_budget_gib} GiB"
        )

    # Speed: interleaved steps.
    for name in names:
        trainers[name].step(args.batch_size)
    walls = {name: [] for name in names}
    for repeat in range(args.repeats):
        for name in common.rotated(names, repeat):
            wall, _ = common.timed(lambda: trainers[name].step(args.batch_size))
            walls[name].append(wall)
        common.progress(
            f"{size} repeat {repeat + 1}: "
            + ", ".join(f"{name} {args.batch_size * tokens_per_sentence / walls[name][-1]:.0f}" for name in names)
            + " tokens/s"
        )
    tokens = args.batch_size * tokens_per_sentence
    for name in names:
        results[name]["tokens_per_second"] = common.summary([tokens / wall for wall in walls[name]])
        results[name]["step_seconds"] = common.summary(walls[name])
    for reference in ("base", common.MARIAN):
        if reference not in names:
            continue
        reference_tokens = results[reference]["memory"]["max_tokens_per_batch"]
        for name in names:
            results[name][f"vs_{reference}"] = {
                "speed_ratio_of_medians": results[reference]["step_seconds"]["median"]
                / results[name]["step_seconds"]["median"],
                "speed_paired": common.summary([r / own for r, own in zip(walls[reference], walls[name])]),
                "tokens_per_batch_ratio": results[name]["memory"]["max_tokens_per_batch"] / reference_tokens,
                "bytes_per_token_ratio": results[reference]["memory"]["fit_bytes_per_token"]
                / results[name]["memory"]["fit_bytes_per_token"],
            }
    for reference in ("base", common.MARIAN):
        if reference in names:
            ratios = [f"{name} {results[name][f'vs_{reference}']['tokens_per_batch_ratio']:.3f}x" for name in names]
            common.progress(f"{size} max tokens per batch vs {reference}: " + ", ".join(ratios))
    return {"size": size, "tokens_per_sentence": tokens_per_sentence, "models": results}


def check_linear_range(args, loss_chunk_sizes: set[int]) -> None:
    """Warn when some memory batches fit in one loss chunk and others do not: the loss's share of the peak (one
    chunk's logits, besides the output layer's weight gradient, whose size does not depend on the batch) grows
    with the batch up to one chunk and stays constant after, so the linear fit needs every batch on one side."""
    target_tokens = [b * args.target_length for b in args.memory_batch_sizes]
    for chunk_size in sorted(loss_chunk_sizes):
        if chunk_size and min(target_tokens) <= chunk_size < max(target_tokens):
            common.progress(
                f"warning: memory batches of {target_tokens} target tokens straddle loss_chunk_size={chunk_size}; "
                "the peak is not linear across them (choose --memory-batch-sizes all above or all below it)"
            )


def check_targets(sizes: list[dict]) -> list[dict]:
    checks = []
    for entry in sizes:
        if entry["size"] != "opus-mt":
            continue
        for name, target in TARGETS.items():
            if name in entry["models"] and "vs_base" in entry["models"][name]:
                measured = entry["models"][name]["vs_base"]["tokens_per_batch_ratio"]
                checks.append(
                    {
                        "check": f"{name} tokens per batch vs base",
                        "target": target,
                        "measured": measured,
                        "reached": measured >= target,
                    }
                )
        for name, model in entry["models"].items():
            if name != common.MARIAN and f"vs_{common.MARIAN}" in model:
                measured = model[f"vs_{common.MARIAN}"]["tokens_per_batch_ratio"]
                checks.append(
                    {
                        "check": f"{name} tokens per batch vs {common.MARIAN}",
                        "target": TARGET_VS_MARIAN,
                        "measured": measured,
                        "reached": measured >= TARGET_VS_MARIAN,
                    }
                )
    return checks


def chart(data: dict, path: str) -> str | None:
    plt = common.pyplot()
    if plt is None:
        return None
    entries = data["sizes"]
    figure, axes = plt.subplots(2, len(entries), figsize=(4.5 * len(entries) + 1, 7), squeeze=False)
    for column, entry in enumerate(entries):
        names = [name for name in entry["models"] if "vs_base" in entry["models"][name]]
        colours = ["#999999" if n in ("base", common.MARIAN) else "#3b75af" for n in names]
        speed = [entry["models"][n]["vs_base"]["speed_ratio_of_medians"] for n in names]
        paired = [entry["models"][n]["vs_base"]["speed_paired"] for n in names]
        errors = [
            [max(0, s - p["min"]) for s, p in zip(speed, paired)],
            [max(0, p["max"] - s) for s, p in zip(speed, paired)],
        ]
        memory = [entry["models"][n]["vs_base"]["tokens_per_batch_ratio"] for n in names]
        for row, (values, label) in enumerate(
            [(speed, "training tokens/s vs base"), (memory, "max tokens per batch vs base")]
        ):
            axis = axes[row][column]
            axis.bar(range(len(names)), values, color=colours, yerr=errors if row == 0 else None, capsize=3)
            axis.axhline(1.0, color="black", linewidth=0.8)
            axis.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=8)
            axis.set_ylabel(label, fontsize=8)
            budget = data["settings"]["memory_budget_gib"]
            axis.set_title(entry["size"] + ("" if row == 0 else f" ({budget} GiB budget)"), fontsize=9)
    settings = data["settings"]
    figure.suptitle(
        f"One AdamW step, CPU, {data['environment']['torch_threads']} thread(s), {settings['batch_size']} sentences of "
        f"{settings['source_length']}+{settings['target_length']} tokens; memory: peak tensor bytes, linear fit",
        fontsize=9,
    )
    return common.save_chart(plt, figure, path)


def main(argv=None):
    args = parse_args(argv)
    common.setup_threads(args.threads)
    data = {
        **common.result_header("training", args),
        "memory_method": common.peak_tensor_bytes.__doc__.strip(),
        "sizes": [measure_size(size, args) for size in args.sizes],
    }
    data["targets"] = check_targets(data["sizes"])
    common.write_results(data, args, chart)
    return data


if __name__ == "__main__":
    main()
