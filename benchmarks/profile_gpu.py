"""Where a training step and a greedy `generate` call spend their time on a GPU, per model, from `torch.profiler`:
how many device kernels each launches and how long they run, how much host time the operators take, and which
CUDA runtime calls make the host wait for the device or copy to and from it.

Each model (a preset or transformers' MarianMTModel, at `--size`, random weights) is measured in turn:

- training: bench_gpu's step (`gpu_common.Trainer`: forward with labels, backward and a fused AdamW step under
  bf16 autocast, fp32 weights, train mode) on `--batch-size` sentences of `--source-length` + `--target-length`
  random tokens, no padding;
- decoding: bench_gpu's greedy `generate` (`gpu_common.decoder`: bf16 weights, eval mode, inference mode) of
  `--decode-batch-size` random sources of `--decode-source-length` tokens, exactly `--new-tokens` new tokens
  (`common.exact_length`).

Each takes `--warmup-steps` untimed runs, then `--steps` timed runs (the device synchronised before and after
each; `wall_ms` is their median), then one run under the profiler (activities CPU, and CUDA on a GPU;
`profiled_wall_ms`: the profiler slows the host, so compare it only with other profiled walls). Every run ends with
one device synchronisation (`torch.cuda.synchronize`), and the profiler synchronises again when it stops:
`profiler_baseline` is a profile of that synchronisation alone, the part of each count that is the harness's.

How to read a profile (one per model and phase):

- `device_kernels`, `device_kernel_ms`: kernels the device ran and the sum of their durations (copies and memsets
  are `device_copies`, by name). At small widths a step is launch-bound: its wall time follows the kernel count,
  not the kernel time; where `device_kernel_ms` is far below `wall_ms` the device waits for the host:
  `device_busy_share` is `device_kernel_ms / wall_ms` (`device_busy`, which bench_gpu.py reports too).
- `self_cpu_ms`: the host time inside the events the profiler recorded (operators, autograd's and the optimizer's
  annotated regions, CUDA runtime calls), each instant counted once (their self times summed). Python between
  operators outside those regions is not in it.
- `operator_calls`: ATen operator events the profiler recorded, composites and what they run each counted (so
  more than benchmarks/count_ops.py's counts, which skip views and count only what runs below autograd).
- `runtime_calls`: CUDA runtime and driver calls by name (`cudaLaunchKernel` per launch, ...);
  `host_waits_and_copies`: those among them that block the host or copy memory (`cudaStreamSynchronize`,
  `cudaDeviceSynchronize`, `cudaMemcpyAsync`, ...: a `.item()`, a `.tolist()`, a tensor built from a Python list,
  a condition on a tensor's value). Ideally a training step has only the harness's (`profiler_baseline`);
  transformers' greedy loop reads the device for its stopping check at every new token, so expect about one per
  token in `generate`.
- `top_operators_by_count`, `top_operators_by_self_cpu`, `top_operators_by_device_time` (ATen operators, with the
  device time of the kernels each launched itself) and `top_kernels` (by device time): where to look first.
- `vs_base`, `vs_MarianMTModel`: each number divided by that model's in the same run (above 1: more kernels,
  more time).

On a CPU (`--device cpu`, or no GPU) there are no device kernels and no CUDA runtime: the CUDA fields are absent
(`"cuda": false` and a `note` in the JSON say so) and the rest is measured as on a GPU; that is for smoke runs,
not for conclusions about GPUs.

    python3 benchmarks/profile_gpu.py --output $OUT/profile_gpu.json            # on a GPU machine, one call
    PYTHONPATH=. python benchmarks/profile_gpu.py --device cpu --size tiny --models base hc-sa --batch-size 4 \
        --warmup-steps 1 --steps 1 --decode-batch-size 2 --new-tokens 3 --output /tmp/profile_gpu.json
"""

import argparse
import collections
import copy
import os
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

import bench_decoding
import common
import count_ops
import gpu_common
import summarize


DEFAULT_MODELS = [common.MARIAN, "base", "hc-sa", "sh-x", "ran-all", "gmm", "hard-dec", "local-all", "syn-r"]
PHASES = ("training", "decoding")
# Device events that are memory operations, not kernels (their names start with these).
DEVICE_COPIES = ("Memcpy", "Memset")
# CUDA runtime and driver calls whose name holds one of these block the host or copy memory.
HOST_WAITS_AND_COPIES = ("Synchronize", "Memcpy")
# The numbers that get ratios to base and MarianMTModel.
RATIO_FIELDS = ("wall_ms", "self_cpu_ms", "operator_calls", "device_kernels", "device_kernel_ms", "host_waits")
CPU_NOTE = "no CUDA device: device kernels, device time and CUDA runtime calls are absent, not zero"
DEVICE_BUSY_CPU_NOTE = "not applicable on a CPU: the profiler gives kernel times on CUDA only"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", default="transformer-base", choices=list(gpu_common.GPU_SIZES))
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS, help=f"presets or {common.MARIAN}")
    parser.add_argument("--batch-size", type=int, default=128, help="sentences per training step")
    parser.add_argument("--source-length", type=int, default=48)
    parser.add_argument("--target-length", type=int, default=48)
    parser.add_argument("--decode-batch-size", type=int, default=64, help="sentences per generate call")
    parser.add_argument("--decode-source-length", type=int, default=25)
    parser.add_argument("--new-tokens", type=int, default=30, help="tokens each generate call decodes")
    parser.add_argument("--warmup-steps", type=int, default=3, help="untimed runs of each phase (steps, calls)")
    parser.add_argument("--steps", type=int, default=5, help="timed runs of each phase before the profiled one")
    parser.add_argument("--top", type=int, default=12, help="operators and kernels in each top list")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=os.path.join(common.RESULTS_DIR, "profile_gpu.json"))
    return parser.parse_args(argv)


def activities(device: torch.device) -> list:
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])


def operator_entry(event, cuda: bool) -> dict:
    """One row of a top list: an ATen operator's calls and self times (averaged over its calls by key)."""
    entry = {"operator": event.key, "calls": event.count, "self_cpu_ms": event.self_cpu_time_total / 1000}
    if cuda:
        entry["self_device_ms"] = event.self_device_time_total / 1000
    return entry


def profile_summary(prof, cuda: bool, top: int) -> dict:
    """The counts and times of one profile (module docstring); CUDA fields only when `cuda`."""
    events = prof.events()
    averages = prof.key_averages()
    operators = [event for event in averages if event.key.startswith("aten::")]
    result = {
        "self_cpu_ms": sum(event.self_cpu_time_total for event in averages) / 1000,
        "operator_calls": sum(event.count for event in operators),
        "top_operators_by_count": [
            operator_entry(event, cuda) for event in sorted(operators, key=lambda event: -event.count)[:top]
        ],
        "top_operators_by_self_cpu": [
            operator_entry(event, cuda)
            for event in sorted(operators, key=lambda event: -event.self_cpu_time_total)[:top]
        ],
    }
    if not cuda:
        return result
    # The profiler also puts the annotated regions (`Optimizer.step#AdamW.step`, ...) on the device's timeline.
    device_events = [
        event
        for event in events
        if event.device_type == torch.autograd.DeviceType.CUDA and not event.is_user_annotation
    ]
    kernels = [event for event in device_events if not event.name.startswith(DEVICE_COPIES)]
    kernel_calls, kernel_us = collections.Counter(), collections.Counter()
    for kernel in kernels:
        kernel_calls[kernel.name] += 1
        kernel_us[kernel.name] += kernel.device_time_total
    runtime_calls = collections.Counter(
        event.name
        for event in events
        if event.device_type == torch.autograd.DeviceType.CPU and event.name.startswith("cu")
    )
    host_waits = {name: n for name, n in runtime_calls.items() if any(word in name for word in HOST_WAITS_AND_COPIES)}
    return result | {
        "device_kernels": len(kernels),
        "device_kernel_ms": sum(kernel_us.values()) / 1000,
        "device_copies": dict(
            collections.Counter(event.name for event in device_events if event.name.startswith(DEVICE_COPIES))
        ),
        "runtime_calls": dict(runtime_calls.most_common()),
        "host_waits": sum(host_waits.values()),
        "host_waits_and_copies": dict(sorted(host_waits.items())),
        "top_operators_by_device_time": [
            operator_entry(event, cuda)
            for event in sorted(operators, key=lambda event: -event.self_device_time_total)[:top]
        ],
        "top_kernels": [
            {"kernel": name, "calls": kernel_calls[name], "device_ms": us / 1000}
            for name, us in kernel_us.most_common(top)
        ],
    }


def profiled(function, device: torch.device, top: int) -> dict:
    """One call of `function` under the profiler: its wall time (profiled) and its counts."""
    with profile(activities=activities(device)) as prof:
        start = time.perf_counter()
        function()
        wall = time.perf_counter() - start
    return {"profiled_wall_ms": wall * 1000, **profile_summary(prof, device.type == "cuda", top)}


def device_busy(function, wall_ms: float, device: torch.device) -> dict:
    """The share of the time the device is busy: the kernel ms of one profiled call of `function` over `wall_ms`
    (an unprofiled call's: the profiler slows the host); on a CPU not applicable, and said so."""
    if device.type != "cuda":
        return {"share": None, "note": DEVICE_BUSY_CPU_NOTE}
    result = profiled(function, device, top=0)
    return {
        "share": result["device_kernel_ms"] / wall_ms,
        "device_kernel_ms": result["device_kernel_ms"],
        "wall_ms": wall_ms,
        "device_kernels": result["device_kernels"],
        "profiled_wall_ms": result["profiled_wall_ms"],
    }


def measure(function, args, device: torch.device) -> dict:
    """Warm-up runs, timed runs (their median wall time) and one profiled run of `function`, which ends with a
    device synchronisation."""
    for _ in range(args.warmup_steps):
        function()
    walls = [gpu_common.timed(function, device) * 1000 for _ in range(args.steps)]
    result = {"wall_ms": statistics.median(walls), "wall_ms_runs": walls, **profiled(function, device, args.top)}
    if "device_kernel_ms" in result:
        result["device_busy_share"] = result["device_kernel_ms"] / result["wall_ms"]
    return result


def profile_model(name: str, args, device: torch.device) -> dict:
    """The training and decoding profiles of one model."""
    model = count_ops.build("seq2seq", name, gpu_common.GPU_SIZES[args.size], args.seed)
    entry = {"parameters": model.num_parameters()}
    trainer = gpu_common.Trainer(copy.deepcopy(model), args, device)
    entry["training"] = measure(trainer.stepper(), args, device)
    trainer = None
    gpu_common.free_memory(device)
    model = model.to(device, torch.bfloat16).eval()
    source = bench_decoding.sources(
        model.config.vocab_size, args.decode_batch_size, args.decode_source_length, args.seed
    ).to(device)
    entry["decoding"] = measure(gpu_common.decoder(model, [source], 1, args, device, {}), args, device)
    return entry


def add_ratios(models: dict) -> None:
    """`vs_base` and `vs_MarianMTModel` of each phase: RATIO_FIELDS divided by the reference's (where it has them,
    not zero)."""
    for reference in ("base", common.MARIAN):
        for entry in models.values():
            for phase in PHASES:
                own, theirs = entry.get(phase), models.get(reference, {}).get(phase)
                if own is None or theirs is None:
                    continue
                own[f"vs_{reference}"] = {
                    field: own[field] / theirs[field] for field in RATIO_FIELDS if theirs.get(field) and field in own
                }


def main(argv=None):
    args = parse_args(argv)
    common.setup_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    data = {**common.result_header("profile_gpu", args), "size_fields": gpu_common.GPU_SIZES[args.size], "cuda": cuda}
    if not cuda:
        data["note"] = CPU_NOTE
    data["environment"]["device"] = gpu_common.device_description(device)
    data["profiler_baseline"] = profiled(lambda: gpu_common.synchronize(device), device, args.top)
    data["models"] = {}
    for name in args.models:
        common.progress(f"profiling {name} at size {args.size} on {data['environment']['device']['name']}")
        try:
            data["models"][name] = profile_model(name, args, device)
        except Exception as error:
            data["models"][name] = {"error": gpu_common.describe(error)}
            common.progress(f"{name}: {gpu_common.describe(error)}")
        gpu_common.free_memory(device)
        add_ratios(data["models"])
        common.write_json(args.output, data)  # after every model: a run stopped later keeps those before
    print("\n".join(summarize.profile_gpu_table(data)))
    return data


if __name__ == "__main__":
    main()
