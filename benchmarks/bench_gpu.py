"""One GPU, one run of under 8 minutes: training speed, peak memory, tokens per batch and decoding speed of the
headline presets against `base` and transformers' MarianMTModel, eager and `torch.compile`d.

Sections, run in this order, each within its share of `--time-budget` seconds (SECTION_SHARES; what a section
leaves unused goes to the later ones; a section that would overrun skips its remaining models or cells and says
so in the JSON, which is written after every section, so that a run stopped from outside keeps what it measured):

- training: one optimizer step = forward with labels, backward and a fused AdamW step, under bf16 autocast
  (fp32 weights), train mode, `--batch-size` sentences of `--source-length` + `--target-length` random tokens
  (no padding). Every model takes `--warmup-steps` steps; then, while the budget lasts, models in
  COMPILE_ORDER are `torch.compile`d (the model's forward, default mode; AOTAutograd compiles the backward) and
  take their warm-up steps, the first of which is reported as the compile time; then eager and compiled models
  take `--steps` timed steps each, interleaved (the order rotated each step), the device synchronised before
  each clock reading. Speed in target tokens per second.
- memory: each model in turn, eager: the peak memory of one step at `--batch-size` (`torch.cuda.max_memory_allocated`
  less what the device held before the model: its parameters, gradients, AdamW state and activations; on the
  CPU the peak of live tensor bytes, `common.peak_tensor_bytes`), and the largest batch whose step peaks within
  `--memory-cap-gib` (the papers' "max tokens per batch"): the batch doubled until the cap is passed, then
  bisected to `--memory-granularity` sentences. Tokens per batch count source and target tokens.
- decoding: `generate` with bf16 weights, eval mode, on `--decode-source-length` random source tokens, exactly
  `--new-tokens` new tokens (`common.exact_length`), greedy and beam search at each of `--decode-batch-sizes`
  (batch 1: `--single-sentences` sentences one after the other). Every model decodes each cell once eagerly;
  then, while the budget lasts, a compiled copy (our models: `generate` with a `CompileConfig`, which compiles the
  decoding steps with dynamic shapes; transformers' models on CUDA: `cache_implementation="static"` and a
  `CompileConfig`; else the forward compiled with dynamic shapes) decodes each cell once, which compiles it (first call time and the share of sentences identical to
  the eager output reported); then eager and compiled models decode each cell `--decode-repeats` times,
  interleaved.

Ratios are to `base` and to `MarianMTModel` of the same run and mode (eager to eager, compiled to compiled;
for decoding also each model's fastest of eager and compiled), as ratios of medians with the per-repeat
ratios' spread. A model that fails records its error and the run goes on. The issue's targets are checked
at whatever size and device the run had: they mean something at Transformer-base size on an H100.

    python3 benchmarks/bench_gpu.py --output $OUT/gpu.json                  # on a GPU machine, one call
    PYTHONPATH=. python benchmarks/bench_gpu.py --device cpu --size tiny --no-compile --batch-size 4 \
        --memory-cap-gib 0.01 --memory-granularity 2 --decode-batch-sizes 4 1 --new-tokens 5 --output /tmp/gpu.json
"""

import argparse
import copy
import gc
import os
import time

import torch
from transformers import CompileConfig

from hf_simple_attn import SimpleAttnMarianMTModel
from hf_simple_attn.training.sizes import SIZES

import bench_decoding
import common
import count_ops
import summarize


# The Transformer-base of "Attention is all you need" with a 32k vocabulary; `tiny` and others for smoke runs.
GPU_SIZES = {"transformer-base": dict(d_model=512, layers=6, heads=8, ffn_dim=2048, vocab_size=32000), **SIZES}
HEADLINE = ["hc-sa", "sh-x", "ran-d", "ran-all", "syn-r", "local-all", "gmm", "hard-dec"]
DEFAULT_MODELS = [common.MARIAN, "base", *HEADLINE]
# Which models are compiled first while the budget lasts: base, then those with decoding targets.
COMPILE_ORDER = ["base", "sh-x", "hc-sa", "ran-all", "hard-dec", common.MARIAN, "ran-d", "syn-r", "local-all", "gmm"]
SECTION_SHARES = {"training": 0.40, "memory": 0.15, "decoding": 0.45}  # of --time-budget, in run order
# The targets, each at least this ratio to base: training tokens/s (eager), greedy decoding at batch 64
# (each model's fastest of eager and compiled), max tokens per batch.
TRAINING_TARGETS = {"hc-sa": 1.0, "sh-x": 1.0, "ran-d": 1.0, "ran-all": 1.0, "syn-r": 1.0, "local-all": 1.0}
TRAINING_TARGETS |= {"gmm": 0.9, "hard-dec": 0.9}
DECODING_TARGETS = {"sh-x": 1.30, "hc-sa": 1.06, "ran-all": 1.24, "hard-dec": 1.43}
DECODING_TARGET_CELL = (64, 1)  # batch size, beams
MEMORY_TARGETS = {"sh-x": 1.26, "hc-sa": 1.17}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", default="transformer-base", choices=list(GPU_SIZES))
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS, help=f"presets or {common.MARIAN}")
    parser.add_argument("--sections", nargs="+", default=list(SECTION_SHARES), choices=list(SECTION_SHARES))
    parser.add_argument("--time-budget", type=float, default=420, help="seconds for all sections together")
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    parser.add_argument(
        "--compile-models",
        nargs="+",
        default=None,
        help="compile only these of --models (default: all of them, in COMPILE_ORDER while the budget lasts)",
    )
    parser.add_argument("--batch-size", type=int, default=128, help="sentences per training step")
    parser.add_argument("--source-length", type=int, default=48)
    parser.add_argument("--target-length", type=int, default=48)
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per model")
    parser.add_argument("--memory-cap-gib", type=float, default=8.0)
    parser.add_argument("--memory-granularity", type=int, default=8, help="sentences: the batch search's precision")
    parser.add_argument("--memory-max-sentences", type=int, default=16384, help="the batch search stops here")
    parser.add_argument("--decode-batch-sizes", nargs="+", type=int, default=[64, 1])
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--decode-source-length", type=int, default=25)
    parser.add_argument("--new-tokens", type=int, default=30)
    parser.add_argument("--single-sentences", type=int, default=2, help="sentences per measurement at batch size 1")
    parser.add_argument("--decode-repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=os.path.join(common.RESULTS_DIR, "gpu.json"))
    return parser.parse_args(argv)


class Budget:
    """The sections' deadlines: each section may use its seconds and whatever the sections before it left."""

    def __init__(self, seconds: dict[str, float]):
        self.start = time.perf_counter()
        self.ends, total = {}, 0.0
        for section, section_seconds in seconds.items():
            total += section_seconds
            self.ends[section] = total

    def left(self, section: str) -> float:
        return self.ends[section] - (time.perf_counter() - self.start)


def describe(error: Exception) -> str:
    """An error as recorded in the JSON (compilers' messages can run to pages)."""
    return f"{type(error).__name__}: {error}"[:1000]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free_memory(device: torch.device) -> None:
    """Free the device memory of the models no longer used (dynamo's compiled code holds on to its models)."""
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def compile_order(names: list[str], chosen: list[str] | None) -> list[str]:
    """`names` that are to be compiled (those in `chosen`, all when it is None), in the order they are compiled
    while the budget lasts."""
    names = [name for name in names if chosen is None or name in chosen]
    return [name for name in COMPILE_ORDER if name in names] + [name for name in names if name not in COMPILE_ORDER]


def speed_ratio(walls: dict[str, list[float]], name: str, reference: str) -> dict:
    """Speed of `name` relative to `reference` from their times in the same interleaved loop."""
    return {
        "ratio_of_medians": common.summary(walls[reference])["median"] / common.summary(walls[name])["median"],
        "paired": common.summary([ref / own for ref, own in zip(walls[reference], walls[name])]),
    }


def add_speed_ratios(results: dict, walls: dict[str, list[float]], mode: str) -> None:
    """`vs_base` and `vs_MarianMTModel` of each model's `mode` ("eager", "compiled") entry, to the reference's
    entry of the same mode; compiled entries also get `vs_eager`."""
    suffix = "" if mode == "eager" else "/compiled"
    for name, entry in results.items():
        if name + suffix not in walls:
            continue
        for reference in ("base", common.MARIAN):
            if reference + suffix in walls:
                entry[mode][f"vs_{reference}"] = speed_ratio(walls, name + suffix, reference + suffix)
        if mode == "compiled" and name in walls:
            entry[mode]["vs_eager"] = speed_ratio(walls, name + suffix, name)


class Trainer:
    """One model on the device, its fused AdamW, and a training step under bf16 autocast."""

    def __init__(self, model, args, device: torch.device):
        # What the device held before this model (earlier models not yet freed): not part of its peak.
        self.held_before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        self.model = model.to(device).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=True)
        self.args, self.device = args, device
        self.train_batch = self.make_batch(args.batch_size)

    def make_batch(self, sentences: int) -> dict:
        generator = torch.Generator().manual_seed(sentences)
        vocab_size = self.model.config.vocab_size
        ids = torch.randint(2, vocab_size - 1, (sentences, self.args.source_length), generator=generator)
        labels = torch.randint(2, vocab_size - 1, (sentences, self.args.target_length), generator=generator)
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
        return {key: value.to(self.device) for key, value in batch.items()}

    def step(self, batch: dict, compiled=None) -> None:
        """One optimizer step, with the `compiled` model when given (it shares the eager model's parameters)."""
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            loss = (self.model if compiled is None else compiled)(**batch).loss
        loss.backward()
        self.optimizer.step()

    def stepper(self, compiled=None):
        """A function that takes one step on the training batch and waits for the device, as a clock sees it."""

        def run():
            self.step(self.train_batch, compiled)
            synchronize(self.device)

        return run

    def peak_bytes(self, sentences: int) -> int | None:
        """Peak memory of one step of `sentences` sentences: this model's parameters, AdamW state, gradients and
        activations (not what the device held before the model); None when the device ran out of memory."""
        self.optimizer.zero_grad(set_to_none=True)
        batch = self.make_batch(sentences)
        if self.device.type != "cuda":
            state = [t for s in self.optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
            held = common.tensor_bytes([*self.model.parameters(), *self.model.buffers(), *state, *batch.values()])
            return held + common.peak_tensor_bytes(lambda: self.step(batch))
        synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        try:
            self.step(batch)
            synchronize(self.device)
            return torch.cuda.max_memory_allocated(self.device) - self.held_before
        except torch.OutOfMemoryError:
            pass
        # Out of memory: free what the failed step left, which its traceback held until the except clause ended.
        self.optimizer.zero_grad(set_to_none=True)
        free_memory(self.device)
        return None


def timed(function, device: torch.device) -> float:
    """Wall seconds of `function()`, the device synchronised before and after."""
    synchronize(device)
    start = time.perf_counter()
    function()
    synchronize(device)
    return time.perf_counter() - start


def measure_training(models: dict, args, device: torch.device, budget: Budget, section: dict) -> dict:
    results, trainers, steps, warm_step_seconds = {}, {}, {}, {}
    for name, model in models.items():
        try:
            trainer = Trainer(copy.deepcopy(model), args, device)
            warmup = [timed(trainer.stepper(), device) for _ in range(args.warmup_steps)]
        except Exception as error:
            results[name] = {"eager": {"error": describe(error)}}
            common.progress(f"training {name}: {describe(error)}")
            continue
        trainers[name], steps[name], warm_step_seconds[name] = trainer, trainer.stepper(), min(warmup)
        results[name] = {"parameters": trainer.model.num_parameters(), "eager": {"warmup_seconds": warmup}}

    compile_seconds = []
    for name in [] if args.no_compile else compile_order(list(trainers), args.compile_models):
        needed = args.steps * sum(warm_step_seconds.values()) + max(compile_seconds, default=0.0)
        if budget.left("training") < needed:
            section["skipped"].append(f"compiled training of {name} ({budget.left('training'):.0f} s left)")
            continue
        start = time.perf_counter()
        try:
            stepper = trainers[name].stepper(torch.compile(trainers[name].model))
            warmup = [timed(stepper, device) for _ in range(args.warmup_steps)]
        except Exception as error:
            results[name]["compiled"] = {"error": describe(error)}
            common.progress(f"compiled training {name}: {describe(error)}")
        else:
            results[name]["compiled"] = {"compile_seconds": warmup[0], "warmup_seconds": warmup}
            steps[f"{name}/compiled"], warm_step_seconds[f"{name}/compiled"] = stepper, min(warmup)
            common.progress(f"compiled training {name}: first step {warmup[0]:.1f} s")
        compile_seconds.append(time.perf_counter() - start)

    walls, _, _ = common.interleaved(steps, args.steps, "training", args.batch_size)
    target_tokens = args.batch_size * args.target_length
    for variant, variant_walls in walls.items():
        name, _, compiled = variant.partition("/")
        results[name]["compiled" if compiled else "eager"].update(
            target_tokens_per_second=common.summary([target_tokens / wall for wall in variant_walls]),
            step_seconds=common.summary(variant_walls),
        )
    for mode in ("eager", "compiled"):
        add_speed_ratios(results, walls, mode)
    return {"target_tokens_per_step": target_tokens, "models": results}


def largest_batch(trainer: Trainer, cap: int, args) -> dict:
    """The step's peak at the training batch size, and the largest batch whose step peaks within `cap`: the batch
    doubled from the training batch size until it does not fit, then bisected to `--memory-granularity`."""
    peaks = {}

    def fits(sentences: int) -> bool:
        peaks[sentences] = trainer.peak_bytes(sentences)
        return peaks[sentences] is not None and peaks[sentences] <= cap

    granularity, low, high = args.memory_granularity, 0, args.batch_size
    while high <= args.memory_max_sentences and fits(high):
        low, high = high, 2 * high
    reached_limit = high > args.memory_max_sentences
    while not reached_limit and high - low > granularity:
        middle = low + max(granularity, (high - low) // (2 * granularity) * granularity)
        low, high = (middle, high) if fits(middle) else (low, middle)
    tokens_per_sentence = args.source_length + args.target_length
    return {
        "peak_bytes": peaks[args.batch_size],
        "max_sentences": low,
        "max_tokens": low * tokens_per_sentence,
        "search_limit_reached": reached_limit,
        "peaks": [[sentences, peak] for sentences, peak in sorted(peaks.items())],
    }


def measure_memory(models: dict, args, device: torch.device, budget: Budget, section: dict) -> dict:
    cap = int(args.memory_cap_gib * 2**30)
    results, durations = {}, []
    for name, model in models.items():
        if budget.left("memory") < max(durations, default=0.0):
            section["skipped"].append(f"memory of {name} ({budget.left('memory'):.0f} s left)")
            continue
        start, trainer = time.perf_counter(), None
        try:
            trainer = Trainer(copy.deepcopy(model), args, device)
            trainer.step(trainer.train_batch)  # creates the AdamW state, which every later step holds
            results[name] = largest_batch(trainer, cap, args)
            common.progress(
                f"memory {name}: {results[name]['peak_bytes'] / 2**30:.2f} GiB at {args.batch_size} sentences, "
                f"{results[name]['max_sentences']} sentences in {args.memory_cap_gib} GiB"
            )
        except Exception as error:
            results[name] = {"error": describe(error)}
            common.progress(f"memory {name}: {describe(error)}")
        trainer = None
        free_memory(device)
        durations.append(time.perf_counter() - start)
    for reference in ("base", common.MARIAN):
        if results.get(reference, {}).get("max_tokens"):
            for entry in results.values():
                if "error" not in entry:
                    entry[f"vs_{reference}"] = {
                        "tokens_per_batch_ratio": entry["max_tokens"] / results[reference]["max_tokens"],
                        "peak_ratio": entry["peak_bytes"] / results[reference]["peak_bytes"],
                    }
    return {"cap_bytes": cap, "tokens_per_sentence": args.source_length + args.target_length, "models": results}


def decoder(model, batches: list[torch.Tensor], num_beams: int, args, device: torch.device, options: dict):
    """A function that decodes each batch of `batches` with `generate` (`options` added), waits for the device and
    returns the output ids."""
    lengths = common.exact_length(args.new_tokens)

    def run() -> torch.Tensor:
        with torch.inference_mode():
            outputs = [
                model.generate(
                    input_ids=batch,
                    attention_mask=torch.ones_like(batch),
                    num_beams=num_beams,
                    do_sample=False,
                    **lengths,
                    **options,
                )
                for batch in batches
            ]
        synchronize(device)
        return torch.cat(outputs)

    return run


def compiled_variants(model, device: torch.device):
    """The ways to decode with a compiled model, in the order they are tried, each made when it is asked for:
    (method, model, `generate` options)."""
    if isinstance(model, SimpleAttnMarianMTModel):  # compiles its decoding steps, with dynamic shapes, when asked
        # On a GPU, CUDA graphs first: one graph per decoded length, recorded in the first call and replayed in the
        # timed ones, so that a step launches no kernels one by one; then without them.
        for mode in ("reduce-overhead", "default") if device.type == "cuda" else ("default",):
            config = CompileConfig(fullgraph=True, dynamic=True, mode=mode)
            yield (
                f"generate(compile_config=CompileConfig(fullgraph=True, dynamic=True, mode={mode!r}))",
                model,
                {"compile_config": config},
            )
    elif device.type == "cuda":  # transformers' models compile `generate` on GPUs, with a static cache only
        static = dict(cache_implementation="static", compile_config=CompileConfig())
        yield "generate(cache_implementation='static', compile_config=CompileConfig())", model, static
    compiled = copy.deepcopy(model)
    compiled.forward = torch.compile(compiled.forward, dynamic=True)
    yield "model.forward = torch.compile(model.forward, dynamic=True)", compiled, {}


class DecodingCell:
    """One (batch size, beams) cell: its source batches and, per variant (`name` or `name/compiled`), a function
    that decodes them, with its first call's seconds and output."""

    def __init__(self, batch_size: int, num_beams: int, vocab_size: int, args, device: torch.device):
        self.batch_size, self.num_beams, self.args, self.device = batch_size, num_beams, args, device
        self.sentences = args.single_sentences if batch_size == 1 else batch_size
        source = bench_decoding.sources(vocab_size, self.sentences, args.decode_source_length, args.seed)
        self.batches = list(source.to(device).split(batch_size))
        self.runs, self.first_call_seconds, self.outputs = {}, {}, {}
        self.compile_errors = {}  # name: {method: error}

    def add(self, variant: str, model, options: dict) -> None:
        """Decode once with `variant` (which compiles a compiled one) and keep it for the timed repeats."""
        run = decoder(model, self.batches, self.num_beams, self.args, self.device, options)
        start = time.perf_counter()
        self.outputs[variant] = run()
        self.first_call_seconds[variant] = time.perf_counter() - start
        self.runs[variant] = run

    def timing_estimate(self) -> float:
        """Seconds of the timed repeats of every variant, a compiled one taken as fast as its eager one."""
        eager = [self.first_call_seconds[variant.partition("/")[0]] for variant in self.runs]
        return self.args.decode_repeats * sum(eager)

    def label(self) -> str:
        beams = "greedy" if self.num_beams == 1 else f"beam {self.num_beams}"
        return f"batch {self.batch_size} {beams}"


def measure_decoding(models: dict, args, device: torch.device, budget: Budget, section: dict) -> dict:
    vocab_size = next(iter(models.values())).config.vocab_size
    cells = [DecodingCell(b, beams, vocab_size, args, device) for b in args.decode_batch_sizes for beams in args.beams]
    errors, eager = {}, {}
    for name, model in models.items():
        try:
            eager[name] = copy.deepcopy(model).to(device, torch.bfloat16).eval()
        except Exception as error:
            errors[name] = describe(error)

    # Every model decodes each cell once; a cell that would not fit with the timing of the cells before it is left out.
    kept, warmup_seconds = [], []
    for cell in cells:
        needed = sum(kept_cell.timing_estimate() for kept_cell in kept) + max(warmup_seconds, default=0.0)
        if budget.left("decoding") < needed:
            section["skipped"].append(f"decoding {cell.label()} ({budget.left('decoding'):.0f} s left)")
            continue
        start = time.perf_counter()
        for name, model in eager.items():
            try:
                cell.add(name, model, {})
            except Exception as error:
                errors[name] = describe(error)
                common.progress(f"decoding {cell.label()} {name}: {describe(error)}")
        kept.append(cell)
        warmup_seconds.append(time.perf_counter() - start)
    for name in errors:
        eager.pop(name, None)

    # Compiled copies, the target cell's first, while the budget lasts; a model keeps the first method that works.
    compiled, failed, compile_seconds = {}, set(), []
    for cell in [] if args.no_compile else kept:
        for name in compile_order(
            [name for name in eager if name in cell.runs and name not in failed], args.compile_models
        ):
            needed = sum(kept_cell.timing_estimate() for kept_cell in kept) + max(compile_seconds, default=0.0)
            if budget.left("decoding") < needed:
                section["skipped"].append(f"compiled decoding {cell.label()} of {name}")
                continue
            start = time.perf_counter()
            for method, model, options in (
                [compiled[name]] if name in compiled else compiled_variants(eager[name], device)
            ):
                try:
                    cell.add(f"{name}/compiled", model, options)
                except Exception as error:
                    cell.compile_errors.setdefault(name, {})[method] = describe(error)
                    common.progress(f"compiled decoding {cell.label()} {name}, {method}: {describe(error)}")
                    continue
                compiled[name] = method, model, options
                seconds = cell.first_call_seconds[f"{name}/compiled"]
                common.progress(f"compiled decoding {cell.label()} {name}: first call {seconds:.1f} s")
                break
            else:  # no method worked
                failed.add(name)
            compile_seconds.append(time.perf_counter() - start)

    results = []
    for cell in kept:
        walls, _, _ = common.interleaved(cell.runs, args.decode_repeats, f"decoding {cell.label()}", cell.sentences)
        models_results = {}
        for variant, variant_walls in walls.items():
            name, _, is_compiled = variant.partition("/")
            entry = {
                "sentences_per_second": common.summary([cell.sentences / wall for wall in variant_walls]),
                "first_call_seconds": cell.first_call_seconds[variant],
            }
            if is_compiled:
                identical = (cell.outputs[variant] == cell.outputs[name]).all(dim=-1).float().mean().item()
                entry |= {"method": compiled[name][0], "identical_to_eager": identical}
            models_results.setdefault(name, {})["compiled" if is_compiled else "eager"] = entry
        for name, method_errors in cell.compile_errors.items():
            models_results[name]["compile_errors"] = method_errors
        for mode in ("eager", "compiled"):
            add_speed_ratios(models_results, walls, mode)
        add_best(models_results, walls)
        results.append(
            {
                "batch_size": cell.batch_size,
                "num_beams": cell.num_beams,
                "sentences": cell.sentences,
                "models": models_results,
            }
        )
    return {"cells": results, "errors": errors}


def add_best(results: dict, walls: dict[str, list[float]]) -> None:
    """Each model's fastest of eager and compiled (`best`), with its ratios to base's and MarianMTModel's fastest."""
    fastest = {}
    for name, entry in results.items():
        modes = [mode for mode in ("eager", "compiled") if mode in entry]
        mode = max(modes, key=lambda mode: entry[mode]["sentences_per_second"]["median"])
        fastest[name] = name if mode == "eager" else f"{name}/compiled"
        entry["best"] = {"mode": mode, "sentences_per_second": entry[mode]["sentences_per_second"]["median"]}
    for name, entry in results.items():
        for reference in ("base", common.MARIAN):
            if reference in fastest:
                entry["best"][f"vs_{reference}"] = speed_ratio(walls, fastest[name], fastest[reference])


def check_targets(data: dict) -> list[dict]:
    """The issue's targets that this run measured, each a ratio that should be at least `target`."""
    checks = []

    def check(label: str, target: float, comparison: dict | None, key: str = "ratio_of_medians") -> None:
        if comparison is not None:
            measured = comparison[key]
            checks.append({"check": label, "target": target, "measured": measured, "reached": measured >= target})

    training = data.get("training", {}).get("models", {})
    for name, target in TRAINING_TARGETS.items():
        check(
            f"{name} training tokens/s (eager) vs base", target, training.get(name, {}).get("eager", {}).get("vs_base")
        )
    check(
        f"base training tokens/s (eager) vs {common.MARIAN}",
        1.0,
        training.get("base", {}).get("eager", {}).get(f"vs_{common.MARIAN}"),
    )
    for cell in data.get("decoding", {}).get("cells", []):
        if (cell["batch_size"], cell["num_beams"]) == DECODING_TARGET_CELL:
            for name, target in DECODING_TARGETS.items():
                fastest = cell["models"].get(name, {}).get("best", {}).get("vs_base")
                check(f"{name} greedy decoding at batch 64 (fastest of eager, compiled) vs base", target, fastest)
    memory = data.get("memory", {}).get("models", {})
    for name, target in MEMORY_TARGETS.items():
        check(
            f"{name} tokens per batch vs base", target, memory.get(name, {}).get("vs_base"), "tokens_per_batch_ratio"
        )
    return checks


def device_description(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"type": device.type, "name": common.cpu_model()}
    properties = torch.cuda.get_device_properties(device)
    return {
        "type": "cuda",
        "name": properties.name,
        "memory_bytes": properties.total_memory,
        "capability": f"{properties.major}.{properties.minor}",
        "cuda": torch.version.cuda,
    }


MEASURES = {"training": measure_training, "memory": measure_memory, "decoding": measure_decoding}


def main(argv=None):
    args = parse_args(argv)
    not_measured = sorted(set(args.compile_models or []) - set(args.models))
    if not_measured:
        raise SystemExit(f"--compile-models: {', '.join(not_measured)} not among --models ({', '.join(args.models)})")
    common.setup_threads(args.threads)
    device = torch.device(args.device)
    if not args.no_compile:
        # Every preset compiles the same forward code: dynamo's default of 8 graphs per function would run the
        # later models eagerly without saying so in the results.
        torch._dynamo.config.recompile_limit = 256
    shares = {name: share for name, share in SECTION_SHARES.items() if name in args.sections}
    budget = Budget({name: share / sum(shares.values()) * args.time_budget for name, share in shares.items()})
    size = GPU_SIZES[args.size]
    data = {**common.result_header("gpu", args), "size_fields": size, "sections": {}, "build_errors": {}}
    data["environment"]["device"] = device_description(device)
    common.progress(
        f"building {len(args.models)} models at size {args.size} for {data['environment']['device']['name']}"
    )
    models = {}
    for name in args.models:
        try:
            models[name] = count_ops.build("seq2seq", name, size, args.seed)
        except Exception as error:
            data["build_errors"][name] = describe(error)
    for name in budget.ends:
        start = time.perf_counter()
        section = {"seconds_left_at_start": budget.left(name), "skipped": []}
        common.progress(f"{name}: {section['seconds_left_at_start']:.0f} s left")
        data[name] = MEASURES[name](models, args, device, budget, section)
        section["seconds"] = time.perf_counter() - start
        data["sections"][name] = section
        data["targets"] = check_targets(data)
        free_memory(device)
        common.write_json(args.output, data)  # after every section: a run stopped later keeps this one
    print("\n".join(summarize.gpu(data)))
    for check in data["targets"]:
        print(
            f"{check['check']}: {check['measured']:.3f}x (at least {check['target']}x) "
            f"{'reached' if check['reached'] else 'NOT reached'}"
        )
    return data


if __name__ == "__main__":
    main()
