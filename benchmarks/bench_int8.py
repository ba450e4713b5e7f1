"""int8 against float32 on trained checkpoints: BLEU with beam search (as in training) and greedy speed.

For each checkpoint: PyTorch float32 and dynamic int8 (`hf_simple_attn.deploy.quantize.quantize_dynamic_int8`), ONNX
Runtime float32 and int8 (`hf_simple_attn.deploy.export.export_onnx`, `quantize_onnx_int8`, in a temporary folder);
for a `base`-layout checkpoint also CTranslate2 float32 and int8 (`hf_simple_attn.deploy.ctranslate2_export`,
converted into a temporary folder). Every engine translates the test split of the embedded corpus (`--sentences`
first ones) in batches of `--batch-size`, in the split's order: greedy `--repeats` times (timed, engines interleaved
in a rotated order after one warm-up batch each), then once with `--beams` beams. Scores: SacreBLEU BLEU and chrF of
the raw references; `identical` is the share of sentences translated exactly as the checkpoint's PyTorch float32
engine does with the same search. `--threads` is torch's thread count and CTranslate2's `intra_threads`. Speed is
given in wall time and in the process's CPU time (all threads), the steadier of the two on a machine shared with
other jobs.

    PYTHONPATH=. python benchmarks/bench_int8.py --checkpoints studies/runs/mt-families/base--lr0.001--seed1 \\
        studies/runs/mt-families/hc-sa--lr0.001--seed1
"""

import argparse
import os
import tempfile

import torch
from transformers import AutoTokenizer

from hf_simple_attn import SimpleAttnMarianMTModel
from hf_simple_attn.data import load_embedded_corpus
from hf_simple_attn.deploy.quantize import quantize_dynamic_int8

import common


FP32 = "pytorch-fp32"  # the reference engine of each checkpoint
MAX_BLEU_LOSS = 0.3  # the goal: int8 loses at most this much BLEU against float32 (beam search)
RUNS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "studies", "runs", "mt-families")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--checkpoints",
        nargs="+",
        default=[os.path.join(RUNS, name) for name in ("base--lr0.001--seed1", "hc-sa--lr0.001--seed1")],
    )
    parser.add_argument("--sentences", type=int, default=None, help="the first N test sentences (default: all)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", default=os.path.join(common.RESULTS_DIR, "int8.json"))
    return parser.parse_args(argv)


def generate_engine(model, tokenizer):
    """texts, beams -> translations with the model's `generate`, PyTorch or ONNX Runtime (max_length from the
    checkpoint's generation config)."""

    def translate(texts: list[str], num_beams: int) -> list[str]:
        batch = tokenizer(texts, return_tensors="pt", padding=True, truncation=True)
        with torch.inference_mode():
            output = model.generate(**batch, num_beams=num_beams, do_sample=False)
        return tokenizer.batch_decode(output, skip_special_tokens=True)

    return translate


def onnx_engines(path: str, workdir: str, threads: int) -> dict:
    """ONNX Runtime float32 and int8 engines of a checkpoint, through `OnnxSeq2SeqModel.generate`."""
    from hf_simple_attn.deploy.export import OnnxSeq2SeqModel, export_onnx
    from hf_simple_attn.deploy.onnx_sessions import session_options
    from hf_simple_attn.deploy.quantize import quantize_onnx_int8

    tokenizer = AutoTokenizer.from_pretrained(path)
    fp32_dir = export_onnx(path, os.path.join(workdir, "onnx-fp32"))
    int8_dir = quantize_onnx_int8(fp32_dir, os.path.join(workdir, "onnx-int8"))
    options = session_options(threads)
    return {
        f"onnx-{kind}": generate_engine(OnnxSeq2SeqModel(folder, session_options=options), tokenizer)
        for kind, folder in (("fp32", fp32_dir), ("int8", int8_dir))
    }


def ctranslate2_engine(translator):
    def translate(texts: list[str], num_beams: int) -> list[str]:
        return translator.translate(texts, num_beams=num_beams)

    return translate


def build_engines(path: str, workdir: str, threads: int) -> dict:
    """The engines of one checkpoint: PyTorch and ONNX Runtime float32 and int8, and CTranslate2's for the `base`
    layout."""
    from hf_simple_attn.deploy.ctranslate2_export import (
        CTranslate2Translator,
        check_base_layout,
        convert_to_ctranslate2,
    )

    model = SimpleAttnMarianMTModel.from_pretrained(path).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    engines = {
        FP32: generate_engine(model, tokenizer),
        "pytorch-int8": generate_engine(quantize_dynamic_int8(model), tokenizer),
    }
    engines |= onnx_engines(path, workdir, threads)
    try:
        check_base_layout(model.config, path)
    except ValueError:
        return engines
    for quantization in ("float32", "int8"):
        folder = convert_to_ctranslate2(path, os.path.join(workdir, quantization), quantization=quantization)
        engines[f"ctranslate2-{quantization.replace('float', 'fp')}"] = ctranslate2_engine(
            CTranslate2Translator(folder, intra_threads=threads)
        )
    return engines


def translate_all(engine, sources: list[str], batch_size: int, num_beams: int):
    """A function that translates `sources` with `engine`, batch after batch."""

    def translate() -> list[str]:
        return [
            text
            for first in range(0, len(sources), batch_size)
            for text in engine(sources[first : first + batch_size], num_beams)
        ]

    return translate


def measure_checkpoint(path: str, sources: list[str], references: list[str], args) -> dict:
    name = os.path.basename(os.path.normpath(path))
    with tempfile.TemporaryDirectory() as workdir:
        engines = build_engines(path, workdir, args.threads)
        names = list(engines)
        for engine in engines.values():
            engine(sources[: args.batch_size], 1)  # warm-up
        walls, cpus, greedy = common.interleaved(
            {engine: translate_all(engines[engine], sources, args.batch_size, 1) for engine in names},
            args.repeats,
            f"{name} greedy",
            len(sources),
        )
        beam_walls, _, beam = common.interleaved(
            {engine: translate_all(engines[engine], sources, args.batch_size, args.beams) for engine in names},
            1,
            f"{name} beam {args.beams}",
            len(sources),
        )
    results = {}
    for engine in names:
        results[engine] = {
            "greedy": {
                **common.translation_scores(greedy[engine], references, greedy[FP32]),
                "sentences_per_second": common.summary([len(sources) / wall for wall in walls[engine]]),
                "sentences_per_cpu_second": common.summary([len(sources) / cpu for cpu in cpus[engine]]),
            },
            "beam": {
                **common.translation_scores(beam[engine], references, beam[FP32]),
                "sentences_per_second": len(sources) / beam_walls[engine][0],
            },
        }
    reference = results[FP32]["greedy"]
    for engine in names:
        greedy = results[engine]["greedy"]
        results[engine]["vs_pytorch_fp32"] = {
            "beam_bleu_change": results[engine]["beam"]["bleu"] - results[FP32]["beam"]["bleu"],
            "greedy_bleu_change": greedy["bleu"] - reference["bleu"],
            "greedy_speedup": greedy["sentences_per_second"]["median"] / reference["sentences_per_second"]["median"],
            "greedy_cpu_speedup": greedy["sentences_per_cpu_second"]["median"]
            / reference["sentences_per_cpu_second"]["median"],
        }
    return {"name": name, "path": path, "engines": results}


def int8_checks(checkpoints: list[dict]) -> list[dict]:
    """Each int8 engine against its own float32 engine (PyTorch or CTranslate2), beam search BLEU."""
    checks = []
    for checkpoint in checkpoints:
        engines = checkpoint["engines"]
        for engine in engines:
            if engine.endswith("int8"):
                fp32 = engines[engine.replace("int8", "fp32")]["beam"]["bleu"]
                loss = fp32 - engines[engine]["beam"]["bleu"]
                checks.append(
                    {
                        "check": f"{checkpoint['name']} {engine}",
                        "bleu_lost": loss,
                        "target": MAX_BLEU_LOSS,
                        "reached": loss <= MAX_BLEU_LOSS,
                    }
                )
    return checks


def table(checkpoints: list[dict], beams: int) -> list[str]:
    lines = [
        f"| checkpoint | engine | BLEU beam {beams} | Δ | identical | BLEU greedy | Δ | identical | "
        "greedy sent/s | × | × CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for checkpoint in checkpoints:
        for engine, entry in checkpoint["engines"].items():
            beam, greedy, ratio = entry["beam"], entry["greedy"], entry["vs_pytorch_fp32"]
            lines.append(
                f"| {checkpoint['name']} | {engine} | {beam['bleu']:.2f} | {ratio['beam_bleu_change']:+.2f} | "
                f"{beam['identical']:.1%} | {greedy['bleu']:.2f} | {ratio['greedy_bleu_change']:+.2f} | "
                f"{greedy['identical']:.1%} | {greedy['sentences_per_second']['median']:.1f} | "
                f"{ratio['greedy_speedup']:.2f} | {ratio['greedy_cpu_speedup']:.2f} |"
            )
    return lines


def main(argv=None):
    import ctranslate2

    args = parse_args(argv)
    common.setup_threads(args.threads)
    test = load_embedded_corpus()["test"]
    pairs = test["translation"][: args.sentences]
    sources, references = [pair["en"] for pair in pairs], [pair["de"] for pair in pairs]
    data = common.result_header("int8", args)
    data["environment"]["ctranslate2"] = ctranslate2.__version__
    data["sentences"] = len(sources)
    data["checkpoints"] = [measure_checkpoint(path, sources, references, args) for path in args.checkpoints]
    data["checks"] = int8_checks(data["checkpoints"])
    print("\n".join(table(data["checkpoints"], args.beams)))
    print(
        "(Δ: BLEU against the checkpoint's pytorch-fp32; identical: share of sentences equal to its output; "
        "×: greedy speed ratio to it, medians of wall time and of process CPU time)"
    )
    for check in data["checks"]:
        print(
            f"{check['check']}: {check['bleu_lost']:.2f} BLEU lost (goal <= {check['target']}) "
            f"{'ok' if check['reached'] else 'MISSED'}"
        )
    common.write_json(args.output, data)
    return data


if __name__ == "__main__":
    main()
