"""Where one beam-search `generate` call spends its time: the decoder (ONNX graph or PyTorch forward) against each
step of the beam bookkeeping around it, measured with cProfile on one call after a warm-up.

The engines are bench_deployment's (same sizes, random weights, synthetic shortlist, sources of exactly
`--source-length` tokens decoded for exactly `--new-tokens` tokens); `ctranslate2-fp32` is timed as a whole (its
loop is C++), for the gap. Each engine is first timed without the profiler, then profiled; the sections are the
cumulative times of the functions named in SECTIONS, as shares of the profiled call (cProfile adds a little to
every Python call, so shares, not seconds, are the result).

    PYTHONPATH=. python benchmarks/profile_beam.py                                   # sh-x, onnx + shortlist, b64 beam 4
    PYTHONPATH=. python benchmarks/profile_beam.py --size tiny --batch-size 4 --engines onnx eager   # a smoke run
"""

import argparse
import cProfile
import pstats
import tempfile
import time

import torch

from hf_simple_attn.recipes.sizes import SIZES

import bench_deployment
import common


# (label, end of the file's path, function name): the section is the largest cumulative time among the matches
# (a processor list's `__call__` holds its processors'). Indented labels are parts of the label above them.
SECTIONS = [
    ("encoder graph", "hf_simple_attn/deploy/export.py", "encode"),
    ("decoder step (graphs + logits)", "hf_simple_attn/deploy/export.py", "step"),
    ("  decoder step graph", "hf_simple_attn/deploy/onnx_decoding.py", "step"),
    ("  output layer graph", "hf_simple_attn/deploy/onnx_decoding.py", "logits"),
    ("search head (ONNX: log-softmax, top-k)", "hf_simple_attn/deploy/onnx_decoding.py", "continuations"),
    ("  processors' step bias", "hf_simple_attn/deploy/onnx_decoding.py", "step_bias"),
    ("model forward (PyTorch)", "modeling/modeling_simple_attn_marian.py", "forward"),
    ("  shortlist projection", "modeling/vocab_shortlist.py", "shortlist_logits"),
    ("log-softmax over the vocabulary", "torch/nn/functional.py", "log_softmax"),
    ("logits processors", "generation/logits_process.py", "__call__"),
    ("top-k continuations", "generation/utils.py", "_get_top_k_continuations"),
    ("stopping criteria", "generation/stopping_criteria.py", "__call__"),
    ("running beams for the next step", "generation/utils.py", "_get_running_beams_for_next_iteration"),
    ("finished beams", "generation/utils.py", "_update_finished_beams"),
    ("early-stop check", "generation/utils.py", "_check_early_stop_heuristic"),
    ("cache reorder (ONNX buffers)", "hf_simple_attn/deploy/onnx_decoding.py", "reorder"),
    ("cache reorder (PyTorch cache)", "modeling/cache.py", "reorder_cache"),
    ("inputs for the next step", "generation/utils.py", "prepare_inputs_for_generation"),
]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="opus-mt", choices=common.BENCHMARK_SIZES)
    parser.add_argument("--presets", nargs="+", default=["sh-x"])
    parser.add_argument(
        "--engines",
        nargs="+",
        default=["ctranslate2-fp32", "onnx", "shortlist"],
        choices=[
            "ctranslate2-fp32",
            "ctranslate2-int8",
            "ctranslate2-int8+vmap",
            "eager",
            "onnx",
            "onnx-int8",
            "int8",
            "shortlist",
            "onnx+shortlist",
            "onnx-int8+shortlist",
        ],
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--source-length", type=int, default=20)
    parser.add_argument("--new-tokens", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--length-control",
        default="no-eos",
        choices=common.LENGTH_CONTROLS,
        help="how transformers-style engines decode exactly --new-tokens (common.exact_length)",
    )
    parser.add_argument("--output", default=None, help="JSON file (default: results/profile_beam.json)")
    return parser.parse_args(argv)


def sections(profile: cProfile.Profile) -> dict[str, float]:
    """{label: cumulative seconds} of SECTIONS' functions found in the profile."""
    found = {}
    for (filename, _, function), (_, _, _, cumulative, _) in pstats.Stats(profile).stats.items():
        for label, path_end, name in SECTIONS:
            if function == name and filename.replace("\\", "/").endswith(path_end):
                found[label] = max(found.get(label, 0.0), cumulative)
    return {label: found[label] for label, _, _ in SECTIONS if label in found}


def profile_engine(decode, batch: torch.Tensor, args) -> dict:
    decode(batch, args.beams, args.new_tokens)  # warm-up
    start = time.perf_counter()
    decode(batch, args.beams, args.new_tokens)
    plain_seconds = time.perf_counter() - start
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.runcall(decode, batch, args.beams, args.new_tokens)
    profiled_seconds = time.perf_counter() - start
    parts = sections(profile)
    return {
        "seconds": plain_seconds,
        "sentences_per_second": batch.shape[0] / plain_seconds,
        "profiled_seconds": profiled_seconds,
        "sections": {label: {"seconds": value, "share": value / profiled_seconds} for label, value in parts.items()},
    }


def build(args, workdir: str) -> dict:
    deployment_args = bench_deployment.parse_args(
        [
            "--size",
            args.size,
            "--presets",
            *args.presets,
            "--threads",
            str(args.threads),
            "--length-control",
            args.length_control,
            "--engines",
            *args.engines,
        ]
    )
    return bench_deployment.build_engines(deployment_args, workdir)


def main(argv=None):
    args = parse_args(argv)
    common.setup_threads(args.threads)
    with tempfile.TemporaryDirectory() as workdir:
        if any(name.startswith("ctranslate2") for name in args.engines) and "base" not in args.presets:
            args.presets = ["base", *args.presets]
        engines = build(args, workdir)
        batch = bench_deployment.sources(SIZES[args.size]["vocab_size"], args.batch_size, args.source_length)
        results = {}
        for name, decode in engines.items():
            common.progress(f"profiling {name}")
            results[name] = profile_engine(decode, batch, args)
    data = common.result_header("profile_beam", args) | {"engines": results}
    common.write_json(args.output or f"{common.RESULTS_DIR}/profile_beam.json", data)
    for name, result in results.items():
        print(
            f"\n{name}: {result['sentences_per_second']:.2f} sentences/s ({result['seconds']:.2f} s a call; "
            f"{result['profiled_seconds']:.2f} s profiled)"
        )
        for label, part in result["sections"].items():
            print(f"  {label:<40} {part['share']:6.1%}")
    return data


if __name__ == "__main__":
    main()
