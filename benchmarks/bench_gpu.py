"""One GPU, one run of under 10 minutes: training speed, peak memory, tokens per batch and decoding speed of the
headline presets against `base` and transformers' MarianMTModel, eager and `torch.compile`d, as users run them.

Sections, run in this order, each within its share of `--time-budget` seconds (SECTION_SHARES; what a section
leaves unused goes to the later ones; a section that would overrun skips its remaining models or cells and says
so in the JSON, which is written after every section, so that a run stopped from outside keeps what it measured):

- training: one optimizer step = forward with labels, backward and a fused AdamW step, under bf16 autocast
  (fp32 weights), train mode, on random tokens without padding: `--batch-size` sentences (default: as many as
  make `--train-target-tokens` target tokens, a realistic batch) of `--source-length` + `--target-length` tokens.
  Every model takes `--warmup-steps` steps, then `--steps` timed steps each, interleaved (the order rotated each
  step), the device synchronised before each clock reading. Speed in target tokens per second.
- compiled-training: the same step with the model `torch.compile`d (default mode; AOTAutograd compiles the
  backward), for the models of COMPILE_ORDER (or `--compile-models`) while the section's budget lasts, each timed
  interleaved with its eager step; the first warm-up step is reported as the compile time. A section of its own, so
  that compiling every headline model fits a budget (`--sections compiled-training` runs it alone).
- memory: each model in turn, eager: the peak memory of one step at `--batch-size` (`torch.cuda.max_memory_allocated`
  less what the device held before the model: its parameters, gradients, AdamW state and activations; on the
  CPU the peak of live tensor bytes, `common.peak_tensor_bytes`), and the largest batch whose step peaks within
  `--memory-cap-gib` (the papers' "max tokens per batch"): the batch doubled until the cap is passed, then
  bisected to `--memory-granularity` sentences. Tokens per batch count source and target tokens.
- decoding: `generate` with bf16 weights, eval mode, on `--decode-source-length` random source tokens, exactly
  `--new-tokens` new tokens (`common.exact_length`), greedy and beam search at each of `--decode-batch-sizes`
  (batch 1: `--single-sentences` sentences one after the other). Every model decodes each cell once eagerly (its
  default, dynamic cache); then, while the budget lasts, compiled as users compile `generate`, the same for our
  models and MarianMTModel (the anchor): `cache_implementation="static"` and `CompileConfig(fullgraph=True,
  dynamic=False)`, with CUDA graphs on a GPU (`mode="reduce-overhead"`, else `"default"` where that fails) and
  `mode="default"` on a CPU. The first compiled call of a cell compiles it (one graph per batch, beams and length:
  its time and the graphs dynamo compiled are reported, and the graphs compiled in the timed repeats, which should
  be none). transformers 5.24 runs beam search's steps eagerly (`compile_config` compiles greedy and sampling
  steps only): a beam cell's compiled variant is the static cache with eager steps. Then eager and compiled
  decode each cell `--decode-repeats` times, interleaved. The compiled output is compared with the eager one
  sentence by sentence: in bf16 in every cell, and in float32 at the first greedy cell (an extra compile).

Ratios are to `base` and to `MarianMTModel` of the same run and mode (eager to eager, compiled to compiled;
for decoding also to base's fastest of eager and compiled, and each model's fastest to theirs), as ratios of
medians with the per-repeat ratios' spread. On CUDA each model's training steps and its decoding calls of the first
cell are profiled once (`profile_gpu.device_busy`: kernel ms / wall ms, the share of the time the device is busy);
on a CPU that is not applicable and recorded so. A model that fails records its error and the run goes on. The
issue's targets are checked at whatever size and device the run had: they mean something at Transformer-base size
on an H100.

    python3 benchmarks/bench_gpu.py --output $OUT/gpu.json                  # on a GPU machine, one call
    PYTHONPATH=. python benchmarks/bench_gpu.py --device cpu --size tiny --models base sh-x --compile-models base \
        --compile-backend aot_eager --batch-size 4 --memory-cap-gib 0.01 --memory-granularity 2 \
        --decode-batch-sizes 4 1 --new-tokens 5 --output /tmp/gpu.json
"""

import argparse
import copy
import math
import os
import statistics
import time

import torch
from transformers import CompileConfig

import bench_decoding
import common
import count_ops
import gpu_common
import profile_gpu
import summarize


HEADLINE = ["hc-sa", "sh-x", "ran-d", "ran-all", "syn-r", "local-all", "gmm", "hard-dec"]
DEFAULT_MODELS = [common.MARIAN, "base", *HEADLINE]
# Which models are compiled first while the budget lasts: base, then those with decoding targets.
COMPILE_ORDER = ["base", "sh-x", "hc-sa", "ran-all", "hard-dec", common.MARIAN, "ran-d", "syn-r", "local-all", "gmm"]
# Of --time-budget, in run order.
SECTION_SHARES = {"training": 0.12, "compiled-training": 0.28, "memory": 0.10, "decoding": 0.50}
# The targets, each at least this ratio to base: training tokens/s (eager), greedy decoding at batch 64
# (each model's fastest of eager and compiled), max tokens per batch.
TRAINING_TARGETS = {"hc-sa": 1.0, "sh-x": 1.0, "ran-d": 1.0, "ran-all": 1.0, "syn-r": 1.0, "local-all": 1.0}
TRAINING_TARGETS |= {"gmm": 0.9, "hard-dec": 0.9}
DECODING_TARGETS = {"sh-x": 1.30, "hc-sa": 1.06, "ran-all": 1.24, "hard-dec": 1.43}
DECODING_TARGET_CELL = (64, 1)  # batch size, beams
MEMORY_TARGETS = {"sh-x": 1.26, "hc-sa": 1.17}
BEAM_NOTE = (
    "transformers 5.24 runs beam search's steps eagerly: compile_config compiles greedy and sampling steps only, so "
    "a beam cell's compiled variant is the static cache with eager steps"
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", default="transformer-base", choices=list(gpu_common.GPU_SIZES))
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS, help=f"presets or {common.MARIAN}")
    parser.add_argument("--sections", nargs="+", default=list(SECTION_SHARES), choices=list(SECTION_SHARES))
    parser.add_argument("--time-budget", type=float, default=480, help="seconds for all sections together")
    parser.add_argument("--no-compile", action="store_true", help="eager only (no compiled-training section)")
    parser.add_argument(
        "--compile-models",
        nargs="+",
        default=None,
        help="compile only these of --models (default: all of them, in COMPILE_ORDER while the budget lasts)",
    )
    parser.add_argument(
        "--compile-backend", default="inductor", help="torch.compile's backend (aot_eager: quick smoke runs)"
    )
    parser.add_argument("--batch-size", type=int, default=None, help="sentences per training step")
    parser.add_argument(
        "--train-target-tokens", type=int, default=25000, help="target tokens per step, without --batch-size"
    )
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
    parser.add_argument("--decode-repeats", type=int, default=7, help="interleaved timed calls per decoding cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=os.path.join(common.RESULTS_DIR, "gpu.json"))
    args = parser.parse_args(argv)
    if args.batch_size is None:
        args.batch_size = math.ceil(args.train_target_tokens / args.target_length)
    return args


def compile_options(args, cuda_graphs: bool = False) -> dict:
    """torch.compile's backend and mode: inductor's default mode (with CUDA graphs: "reduce-overhead"); another
    backend takes no mode."""
    if args.compile_backend != "inductor":
        return {"backend": args.compile_backend, "mode": None}
    return {"backend": "inductor", "mode": "reduce-overhead" if cuda_graphs else "default"}


def graphs_compiled() -> int:
    """Graphs dynamo has compiled in this process so far."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def add_device_busy(entry: dict, function, walls: list[float], device: torch.device) -> None:
    """`entry["device_busy"]`: profile_gpu's kernel ms / wall ms of one more call of `function`, against the median
    of its timed `walls` (seconds)."""
    try:
        entry["device_busy"] = profile_gpu.device_busy(function, 1000 * statistics.median(walls), device)
    except Exception as error:
        entry["device_busy"] = {"error": gpu_common.describe(error)}


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


def timed_training(results: dict, steps: dict, args, device: torch.device) -> None:
    """`--steps` interleaved timed steps of each of `steps` (`name` or `name/compiled`), their speeds, ratios and
    device-busy shares into `results`."""
    walls, _, _ = common.interleaved(steps, args.steps, "training", args.batch_size)
    target_tokens = args.batch_size * args.target_length
    for variant, variant_walls in walls.items():
        name, _, compiled = variant.partition("/")
        entry = results[name]["compiled" if compiled else "eager"]
        entry.update(
            target_tokens_per_second=common.summary([target_tokens / wall for wall in variant_walls]),
            step_seconds=common.summary(variant_walls),
        )
        add_device_busy(entry, steps[variant], variant_walls, device)
    for mode in ("eager", "compiled"):
        add_speed_ratios(results, walls, mode)


def measure_training(models: dict, args, device: torch.device, budget: Budget, section: dict) -> dict:
    results, steps = {}, {}
    for name, model in models.items():
        try:
            trainer = gpu_common.Trainer(copy.deepcopy(model), args, device)
            warmup = [gpu_common.timed(trainer.stepper(), device) for _ in range(args.warmup_steps)]
        except Exception as error:
            results[name] = {"eager": {"error": gpu_common.describe(error)}}
            common.progress(f"training {name}: {gpu_common.describe(error)}")
            continue
        steps[name] = trainer.stepper()
        results[name] = {"parameters": trainer.model.num_parameters(), "eager": {"warmup_seconds": warmup}}
    timed_training(results, steps, args, device)
    return {"target_tokens_per_step": args.batch_size * args.target_length, "models": results}


def measure_compiled_training(models: dict, args, device: torch.device, budget: Budget, section: dict) -> dict:
    """Each model of `compile_order` compiled while the budget lasts, timed interleaved with its eager step."""
    results, steps, step_seconds, compile_seconds = {}, {}, [], []
    options = compile_options(args)
    for name in compile_order(list(models), args.compile_models):
        needed = 2 * args.steps * sum(step_seconds) + max(compile_seconds, default=0.0)
        if budget.left("compiled-training") < needed:
            section["skipped"].append(f"compiled training of {name} ({budget.left('compiled-training'):.0f} s left)")
            continue
        start = time.perf_counter()
        try:
            trainer = gpu_common.Trainer(copy.deepcopy(models[name]), args, device)
            eager_warmup = [gpu_common.timed(trainer.stepper(), device) for _ in range(args.warmup_steps)]
            stepper = trainer.stepper(torch.compile(trainer.model, **options))
            warmup = [gpu_common.timed(stepper, device) for _ in range(args.warmup_steps)]
        except Exception as error:
            results[name] = {"compiled": {"error": gpu_common.describe(error)}}
            common.progress(f"compiled training {name}: {gpu_common.describe(error)}")
            continue
        finally:
            compile_seconds.append(time.perf_counter() - start)
        steps[name], steps[f"{name}/compiled"] = trainer.stepper(), stepper
        step_seconds.append(min(eager_warmup))
        results[name] = {
            "eager": {"warmup_seconds": eager_warmup},
            "compiled": {"method": f"torch.compile(model, {options})", "compile_seconds": warmup[0]}
            | {"warmup_seconds": warmup},
        }
        common.progress(f"compiled training {name}: first step {warmup[0]:.1f} s")
    timed_training(results, steps, args, device)
    return {"target_tokens_per_step": args.batch_size * args.target_length, "models": results}


def largest_batch(trainer: gpu_common.Trainer, cap: int, args) -> dict:
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
            trainer = gpu_common.Trainer(copy.deepcopy(model), args, device)
            trainer.step(trainer.train_batch)  # creates the AdamW state, which every later step holds
            results[name] = largest_batch(trainer, cap, args)
            common.progress(
                f"memory {name}: {results[name]['peak_bytes'] / 2**30:.2f} GiB at {args.batch_size} sentences, "
                f"{results[name]['max_sentences']} sentences in {args.memory_cap_gib} GiB"
            )
        except Exception as error:
            results[name] = {"error": gpu_common.describe(error)}
            common.progress(f"memory {name}: {gpu_common.describe(error)}")
        trainer = None
        gpu_common.free_memory(device)
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


def compiled_variants(args, device: torch.device):
    """The ways to decode compiled, in the order they are tried: (method, `generate` options). The same for our
    models and transformers' (the anchor): the static cache, whose steps have one shape, and a `CompileConfig`."""
    for cuda_graphs in (True, False) if device.type == "cuda" else (False,):
        options = compile_options(args, cuda_graphs)
        config = CompileConfig(fullgraph=True, dynamic=False, **options)
        config._compile_all_devices = True  # transformers' models compile `generate` on GPUs only unless told
        method = f"generate(cache_implementation='static', compile_config=CompileConfig(fullgraph=True, {options}))"
        yield method, {"cache_implementation": "static", "compile_config": config}


class DecodingCell:
    """One (batch size, beams) cell: its source batches and, per variant (`name` or `name/compiled`), a function
    that decodes them, with its first call's seconds, graphs compiled and output."""

    def __init__(self, batch_size: int, num_beams: int, vocab_size: int, args, device: torch.device):
        self.batch_size, self.num_beams, self.args, self.device = batch_size, num_beams, args, device
        self.sentences = args.single_sentences if batch_size == 1 else batch_size
        source = bench_decoding.sources(vocab_size, self.sentences, args.decode_source_length, args.seed)
        self.batches = list(source.to(device).split(batch_size))
        self.runs, self.first_call_seconds, self.first_call_graphs, self.outputs = {}, {}, {}, {}
        self.compile_errors = {}  # name: {method: error}

    def decode(self, model, options: dict) -> tuple:
        """A decoder of this cell and its first call: (decoder, output ids, seconds, graphs compiled)."""
        run = gpu_common.decoder(model, self.batches, self.num_beams, self.args, self.device, options)
        start, graphs = time.perf_counter(), graphs_compiled()
        output = run()
        return run, output, time.perf_counter() - start, graphs_compiled() - graphs

    def add(self, variant: str, model, options: dict) -> None:
        """Decode once with `variant` (which compiles a compiled one) and keep it for the timed repeats."""
        run, self.outputs[variant], seconds, graphs = self.decode(model, options)
        self.first_call_seconds[variant], self.first_call_graphs[variant] = seconds, graphs
        self.runs[variant] = run

    def timing_estimate(self) -> float:
        """Seconds of the timed repeats of every variant, a compiled one taken as fast as its eager one."""
        eager = [self.first_call_seconds[variant.partition("/")[0]] for variant in self.runs]
        return self.args.decode_repeats * sum(eager)

    def label(self) -> str:
        beams = "greedy" if self.num_beams == 1 else f"beam {self.num_beams}"
        return f"batch {self.batch_size} {beams}"


def identical(output: torch.Tensor, reference: torch.Tensor) -> float:
    """The share of sentences (rows) of `output` that are those of `reference`."""
    return (output == reference).all(dim=-1).float().mean().item()


def measure_decoding(models: dict, args, device: torch.device, budget: Budget, section: dict) -> dict:
    vocab_size = next(iter(models.values())).config.vocab_size
    cells = [DecodingCell(b, beams, vocab_size, args, device) for b in args.decode_batch_sizes for beams in args.beams]
    errors, eager = {}, {}
    for name, model in models.items():
        try:
            eager[name] = copy.deepcopy(model).to(device, torch.bfloat16).eval()
        except Exception as error:
            errors[name] = gpu_common.describe(error)

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
                errors[name] = gpu_common.describe(error)
                common.progress(f"decoding {cell.label()} {name}: {gpu_common.describe(error)}")
        kept.append(cell)
        warmup_seconds.append(time.perf_counter() - start)
    for name in errors:
        eager.pop(name, None)

    # Compiled decoding, cell by cell, while the budget lasts; a model keeps the first method that works.
    compiled, failed, compile_seconds = {}, set(), []

    def fits(label: str) -> bool:
        needed = sum(kept_cell.timing_estimate() for kept_cell in kept) + max(compile_seconds, default=0.0)
        if budget.left("decoding") < needed:
            section["skipped"].append(f"{label} ({budget.left('decoding'):.0f} s left)")
        return budget.left("decoding") >= needed

    for cell in [] if args.no_compile else kept:
        for name in compile_order([name for name in eager if name in cell.runs], args.compile_models):
            if name in failed or not fits(f"compiled decoding {cell.label()} of {name}"):
                continue
            start = time.perf_counter()
            for method, options in [compiled[name]] if name in compiled else compiled_variants(args, device):
                try:
                    cell.add(f"{name}/compiled", eager[name], options)
                except Exception as error:
                    cell.compile_errors.setdefault(name, {})[method] = gpu_common.describe(error)
                    common.progress(f"compiled decoding {cell.label()} {name}, {method}: {gpu_common.describe(error)}")
                    continue
                compiled[name] = method, options
                seconds = cell.first_call_seconds[f"{name}/compiled"]
                common.progress(f"compiled decoding {cell.label()} {name}: first call {seconds:.1f} s")
                break
            else:  # no method worked
                failed.add(name)
            compile_seconds.append(time.perf_counter() - start)

    # Sentences identical to eager: bf16 from each cell's first calls, float32 at the first greedy cell.
    identity = {}
    greedy = next((cell for cell in kept if cell.num_beams == 1), None)
    for name, (method, options) in compiled.items():
        if greedy is None or f"{name}/compiled" not in greedy.outputs:
            continue
        entry = identity[name] = {"cell": greedy.label(), "sentences": greedy.sentences, "method": method}
        entry["bfloat16"] = identical(greedy.outputs[f"{name}/compiled"], greedy.outputs[name])
        if not fits(f"float32 identity of {name}"):
            continue
        start = time.perf_counter()
        try:
            model = copy.deepcopy(models[name]).to(device).eval()
            _, reference, _, _ = greedy.decode(model, {})
            _, output, _, _ = greedy.decode(model, options)
            entry["float32"] = identical(output, reference)
        except Exception as error:
            entry["float32_error"] = gpu_common.describe(error)
        model = None
        compile_seconds.append(time.perf_counter() - start)

    results = []
    for index, cell in enumerate(kept):
        graphs = graphs_compiled()
        walls, _, _ = common.interleaved(cell.runs, args.decode_repeats, f"decoding {cell.label()}", cell.sentences)
        models_results = {}
        for variant, variant_walls in walls.items():
            name, _, is_compiled = variant.partition("/")
            entry = {
                "sentences_per_second": common.summary([cell.sentences / wall for wall in variant_walls]),
                "first_call_seconds": cell.first_call_seconds[variant],
            }
            if is_compiled:
                entry |= {
                    "method": compiled[name][0],
                    "first_call_graphs": cell.first_call_graphs[variant],
                    "identical_to_eager": identical(cell.outputs[variant], cell.outputs[name]),
                }
            if index == 0:
                add_device_busy(entry, cell.runs[variant], variant_walls, device)
            models_results.setdefault(name, {})["compiled" if is_compiled else "eager"] = entry
        for name, method_errors in cell.compile_errors.items():
            models_results[name]["compile_errors"] = method_errors
        for mode in ("eager", "compiled"):
            add_speed_ratios(models_results, walls, mode)
        add_best(models_results, walls)
        result = {"batch_size": cell.batch_size, "num_beams": cell.num_beams, "sentences": cell.sentences}
        result["graphs_compiled_in_repeats"] = graphs_compiled() - graphs
        if cell.num_beams > 1:
            result["note"] = BEAM_NOTE
        results.append(result | {"models": models_results})
    return {"cells": results, "identical_to_eager": identity, "errors": errors}


def add_best(results: dict, walls: dict[str, list[float]]) -> None:
    """Each model's fastest of eager and compiled (`best`), with its ratios to base's and MarianMTModel's fastest,
    and each mode's ratio to base's fastest (`vs_base_fastest`)."""
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
        for mode in ("eager", "compiled") if "base" in fastest else ():
            if mode in entry:
                variant = name if mode == "eager" else f"{name}/compiled"
                entry[mode]["vs_base_fastest"] = speed_ratio(walls, variant, fastest["base"])


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


MEASURES = {
    "training": measure_training,
    "compiled-training": measure_compiled_training,
    "memory": measure_memory,
    "decoding": measure_decoding,
}


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
    sections = [name for name in args.sections if not (args.no_compile and name == "compiled-training")]
    shares = {name: share for name, share in SECTION_SHARES.items() if name in sections}
    budget = Budget({name: share / sum(shares.values()) * args.time_budget for name, share in shares.items()})
    size = gpu_common.GPU_SIZES[args.size]
    data = {**common.result_header("gpu", args), "size_fields": size, "sections": {}, "build_errors": {}}
    data["environment"]["device"] = gpu_common.device_description(device)
    common.progress(
        f"building {len(args.models)} models at size {args.size} for {data['environment']['device']['name']}"
    )
    models = {}
    for name in args.models:
        try:
            models[name] = count_ops.build("seq2seq", name, size, args.seed)
        except Exception as error:
            data["build_errors"][name] = gpu_common.describe(error)
    for name in budget.ends:
        start = time.perf_counter()
        section = {"seconds_left_at_start": budget.left(name), "skipped": []}
        common.progress(f"{name}: {section['seconds_left_at_start']:.0f} s left")
        data[name] = MEASURES[name](models, args, device, budget, section)
        section["seconds"] = time.perf_counter() - start
        data["sections"][name] = section
        data["targets"] = check_targets(data)
        gpu_common.free_memory(device)
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
