"""Shared pieces of the benchmark scripts: model sizes, models, timing, memory, statistics, output.

Every script measures its models in one process, interleaved: each repeat runs every model once,
in an order rotated by one from the previous repeat, so that a slow spell of a shared machine
falls on all models alike. Ratios are always to a model of the same run.
"""

import datetime
import json
import os
import platform
import statistics
import sys
import time

import sacrebleu
import torch
import transformers
from torch.profiler import ProfilerActivity, profile
from transformers import BertConfig, BertModel, MarianConfig, MarianMTModel

from hf_simple_attn import SimpleAttnBertConfig, SimpleAttnBertModel, SimpleAttnMarianConfig, SimpleAttnMarianMTModel
from hf_simple_attn.modeling.attention import set_attention_fast_paths
from hf_simple_attn.recipes.sizes import bert_size, marian_size


RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

# The sizes the benchmarks run at (hf_simple_attn.recipes.sizes.SIZES: d_model, layers, heads, feed-forward,
# vocabulary).
BENCHMARK_SIZES = ("opus-mt", "opus-mt-vocab8k", "small", "tiny")
MARIAN = "MarianMTModel"  # transformers' own models, measured beside the presets
BERT = "BertModel"
REFERENCE_SUFFIX = ":reference"  # `hc-sa:reference`: the preset with its attention fast paths off


def split_model_name(name: str) -> tuple[str, bool]:
    """`hc-sa:reference` -> ("hc-sa", True); `hc-sa` -> ("hc-sa", False)."""
    if name.endswith(REFERENCE_SUFFIX):
        return name[: -len(REFERENCE_SUFFIX)], True
    return name, False


def marian_kwargs(size: str, max_positions: int = 512) -> dict:
    return marian_size(size) | dict(max_position_embeddings=max_positions, eos_token_id=0, forced_eos_token_id=None)


def build_seq2seq(name: str, size: str, max_positions: int = 512, seed: int = 0):
    """transformers' MarianMTModel (name `MarianMTModel`) or our model with preset `name`
    (`name:reference`: fast paths off), in eval mode."""
    torch.manual_seed(seed)
    kwargs = marian_kwargs(size, max_positions)
    preset, reference = split_model_name(name)
    if preset == MARIAN:
        model = MarianMTModel(MarianConfig(**kwargs))
    else:
        model = SimpleAttnMarianMTModel(SimpleAttnMarianConfig.from_preset(preset, **kwargs))
        set_attention_fast_paths(model, not reference)
    return model.eval()


def build_encoder(name: str, size: str, max_positions: int, seed: int = 0):
    """transformers' BertModel (name `BertModel`) or our BERT-style encoder with preset `name`
    (`name:reference`: fast paths off), in eval mode; no pooler."""
    torch.manual_seed(seed)
    kwargs = bert_size(size) | dict(max_position_embeddings=max_positions)
    preset, reference = split_model_name(name)
    if preset == BERT:
        model = BertModel(BertConfig(**kwargs), add_pooling_layer=False)
    else:
        model = SimpleAttnBertModel(SimpleAttnBertConfig.from_preset(preset, **kwargs), add_pooling_layer=False)
        set_attention_fast_paths(model, not reference)
    return model.eval()


LENGTH_CONTROLS = ("no-eos", "min-new-tokens")


def exact_length(new_tokens: int, control: str = "no-eos") -> dict:
    """`generate` options that decode exactly `new_tokens` tokens. `no-eos` (default): no end-of-sentence token;
    `min-new-tokens`: `min_new_tokens`, whose logits processor (a clone and a `where` over batch x beams x vocabulary
    scores at every step: 14-36 % of a beam-4 call at batch 64 and opus-mt size,
    benchmarks/results/profile_beam_min_new_tokens.json) is not part of a translation's normal work."""
    if control == "min-new-tokens":
        return dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    return dict(max_new_tokens=new_tokens, eos_token_id=None)


def timed(function) -> tuple[float, float]:
    """(wall seconds, process CPU seconds over all threads) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    function()
    return time.perf_counter() - wall, time.process_time() - cpu


def peak_tensor_bytes(function) -> int:
    """Peak of the CPU tensor memory allocated by `function` above what was live before it.

    Read from the PyTorch profiler's allocation events (`profile_memory=True`): each allocation
    and free of the CPU allocator is an event with a signed size; the peak of their running sum in
    time order is the most tensor memory the call held at once (the CPU analogue of CUDA's
    `max_memory_allocated`; allocator caching and fragmentation are not counted).
    """
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        function()
    events = sorted(
        (event.start_ns(), event.nbytes())
        for event in prof.profiler.kineto_results.events()
        if event.name() == "[memory]"
    )
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def summary(values: list[float]) -> dict:
    """Median and spread of repeated measurements."""
    ordered = sorted(values)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else [ordered[0]] * 3
    return {
        "median": statistics.median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "q1": quartiles[0],
        "q3": quartiles[2],
        "n": len(ordered),
        "values": values,
    }


def interleaved(calls: dict, repeats: int, label: str, sentences: int) -> tuple[dict, dict, dict]:
    """Run each function of `calls` ({name: function}) `repeats` times, the names in an order rotated each repeat;
    ({name: wall seconds per run}, {name: process CPU seconds per run}, {name: the last run's result}), with one
    progress line per repeat in sentences/s (`sentences` per run)."""
    walls, cpus, outputs = {name: [] for name in calls}, {name: [] for name in calls}, {}
    for repeat in range(repeats):
        for name in rotated(list(calls), repeat):
            wall, cpu = time.perf_counter(), time.process_time()
            outputs[name] = calls[name]()
            walls[name].append(time.perf_counter() - wall)
            cpus[name].append(time.process_time() - cpu)
        progress(
            f"{label} repeat {repeat + 1}: "
            + ", ".join(f"{name} {sentences / walls[name][-1]:.2f}" for name in calls)
            + " sent/s"
        )
    return walls, cpus, outputs


def rotated(names: list[str], repeat: int) -> list[str]:
    """The model order of one repeat: rotated by one each repeat."""
    shift = repeat % len(names)
    return names[shift:] + names[:shift]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment(threads: int) -> dict:
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": threads,
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
    }


def setup_threads(threads: int) -> None:
    torch.set_num_threads(threads)


def write_json(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    data["environment"]["load_average_at_end"] = os.getloadavg()
    with open(path, "w") as handle:
        json.dump(data, handle, indent=1)
    print(f"wrote {path}")


def result_header(benchmark: str, args) -> dict:
    """The start of a benchmark's JSON: its name, the settings it ran with and the environment."""
    return {
        "benchmark": benchmark,
        "settings": {key: value for key, value in vars(args).items() if key not in ("output", "chart")},
        "environment": environment(args.threads),
    }


def write_results(data: dict, args, chart) -> None:
    """Print the target checks, draw `chart(data, path)` next to the JSON (or at `--chart`), write the JSON."""
    for check in data.get("targets", []):
        print(
            f"{check['check']}: {check['measured']:.3f}x (target {check['target']}x) {'ok' if check['reached'] else 'MISSED'}"
        )
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    data["chart"] = chart(data, args.chart or os.path.splitext(args.output)[0] + ".png")
    write_json(args.output, data)


def save_chart(plt, figure, path: str) -> str:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    print(f"wrote {path}")
    return path


def pyplot():
    """matplotlib's pyplot with a file backend, or None when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no chart (pip install matplotlib)")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def translation_scores(predictions: list[str], references: list[str], reference_predictions: list[str]) -> dict:
    """SacreBLEU BLEU and chrF of `predictions`, and the share of them identical to `reference_predictions` (the
    reference engine's translations of the same sources)."""
    predictions = [text.strip() for text in predictions]
    return {
        "bleu": sacrebleu.corpus_bleu(predictions, [references]).score,
        "chrf": sacrebleu.corpus_chrf(predictions, [references]).score,
        "identical": sum(a == b.strip() for a, b in zip(predictions, reference_predictions)) / len(predictions),
    }


def top_operators(prof, count: int = 12) -> list[dict]:
    """The operators that took most self CPU time in a profile, with their share and FLOPs."""
    averages = prof.key_averages()
    total = sum(event.self_cpu_time_total for event in averages) or 1
    ranked = sorted(averages, key=lambda event: event.self_cpu_time_total, reverse=True)[:count]
    return [
        {
            "operator": event.key,
            "calls": event.count,
            "self_cpu_ms": event.self_cpu_time_total / 1000,
            "share": event.self_cpu_time_total / total,
            "gflops": (event.flops or 0) / 1e9,
        }
        for event in ranked
    ]


def profiled(function, count: int = 12) -> dict:
    """Top operators and total matrix-multiply GFLOPs of one call under the PyTorch profiler."""
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        function()
    gflops = sum((event.flops or 0) for event in prof.key_averages()) / 1e9
    return {"total_gflops": gflops, "top_operators": top_operators(prof, count)}
