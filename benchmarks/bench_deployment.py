"""Every way to deploy a model on the CPU, side by side in one run: sentences/s of greedy and beam decoding.

Engines (`--engines`; each preset gets every `ours` engine):
- `MarianMTModel`: transformers' own model holding the `base` preset's weights (`ctranslate2_export.to_marian`);
- `ctranslate2-fp32`, `ctranslate2-int8`: CTranslate2 on the same weights (`ctranslate2_export`, base layout only);
  `ctranslate2-fp32+vmap`, `ctranslate2-int8+vmap`: the same with the shortlist as its vocabulary map (`use_vmap`);
- `<preset>/eager`: our model in PyTorch; `/compile`: its forward under `torch.compile` (default mode; compiled
  during the warm-up call of each cell, not timed); `/onnx`, `/onnx-int8`: `export_onnx` graphs run by ONNX Runtime
  (`OnnxSeq2SeqModel`; int8 by `quantize_onnx_int8`); `/int8`: PyTorch dynamic int8 of the linear layers;
  `/shortlist`, `/int8+shortlist`, `/onnx+shortlist`, `/onnx-int8+shortlist`: the same with the vocabulary shortlist
  on (`generate(..., use_shortlist=True)`).

The models are initialised at random (seed 0) at `--size` (default opus-mt: 74M parameters, 58,101-token
vocabulary): speed does not depend on what the weights learned, except through the shortlist's size, so the
shortlist is synthetic: each source token lists `--shortlist-top-k` target tokens drawn from a pool of
`--shortlist-pool` ids, plus `--shortlist-frequent` frequent ones (at the defaults a batch of 64 has 4,000
candidates, one sentence about 960; a trained shortlist's own counts: benchmarks/results/shortlist.json). Every
engine decodes the same random sources (`--source-length` tokens) for exactly `--new-tokens` tokens, checked on the
output (transformers-style engines without an end-of-sentence token, `common.exact_length`; CTranslate2 with
`min_decoding_length`). Each cell (batch
size, beams) warms every engine up once, then times `--repeats` rounds, engines in an order rotated each round.
Batch size 1 decodes `--single-sentences` sentences one after the other. `--threads` is torch's thread count, ONNX
Runtime's intra-op threads and CTranslate2's intra_threads.

    PYTHONPATH=. python benchmarks/bench_deployment.py            # opus-mt size, the five presets of the targets
    PYTHONPATH=. python benchmarks/bench_deployment.py --size tiny --presets base sh-x --repeats 1   # a smoke run
"""

import argparse
import os
import tempfile

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import PreTrainedTokenizerFast

from hf_simple_attn.deploy.quantize import quantize_dynamic_int8
from hf_simple_attn.recipes.sizes import SIZES

import common


PRESETS = ["base", "hc-sa", "sh-x", "ran-all", "hard-dec"]
OURS = [
    "eager",
    "compile",
    "onnx",
    "onnx-int8",
    "int8",
    "shortlist",
    "int8+shortlist",
    "onnx+shortlist",
    "onnx-int8+shortlist",
]
REFERENCES = [common.MARIAN, "ctranslate2-fp32", "ctranslate2-int8", "ctranslate2-fp32+vmap", "ctranslate2-int8+vmap"]
SHORTLIST_ENGINES = {
    "shortlist",
    "int8+shortlist",
    "onnx+shortlist",
    "onnx-int8+shortlist",
    "ctranslate2-fp32+vmap",
    "ctranslate2-int8+vmap",
}
FP32_ENGINES = ("eager", "compile", "onnx", "shortlist", "onnx+shortlist")
INT8_ENGINES = ("int8", "onnx-int8", "int8+shortlist", "onnx-int8+shortlist")
# The papers' decoding speed-ups over `base`; our fastest path must reach them (the issue's targets).
PAPER_SPEEDUPS = {"hard-dec": 1.43, "sh-x": 1.30, "ran-all": 1.20, "hc-sa": 1.06}
TARGET_CELLS = [(64, 1), (64, 4)]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="opus-mt", choices=common.BENCHMARK_SIZES)
    parser.add_argument("--presets", nargs="+", default=PRESETS)
    parser.add_argument("--engines", nargs="+", default=REFERENCES + OURS, choices=REFERENCES + OURS)
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 64])
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--source-length", type=int, default=20)
    parser.add_argument("--new-tokens", type=int, default=20)
    parser.add_argument(
        "--length-control",
        default="no-eos",
        choices=common.LENGTH_CONTROLS,
        help="how transformers-style engines decode exactly --new-tokens (common.exact_length)",
    )
    parser.add_argument("--single-sentences", type=int, default=2, help="sentences per measurement at batch size 1")
    parser.add_argument("--shortlist-top-k", type=int, default=50)
    parser.add_argument("--shortlist-frequent", type=int, default=100)
    parser.add_argument("--shortlist-pool", type=int, default=4000, help="target ids the synthetic table draws from")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", default=os.path.join(common.RESULTS_DIR, "deployment.json"))
    parser.add_argument("--chart", default=None, help="PNG path (default: the output path with .png)")
    return parser.parse_args(argv)


def word_level_tokenizer(vocab_size: int, pad_token_id: int) -> PreTrainedTokenizerFast:
    """Token `t<i>` for id i (</s> 0, <unk> 1, <pad> last): what CTranslate2 needs to map ids to its vocabulary."""
    vocab = {f"t{index}": index for index in range(vocab_size)}
    vocab |= {"</s>": 0, "<unk>": 1, "<pad>": pad_token_id}
    vocab = {token: index for token, index in vocab.items() if token not in ("t0", "t1", f"t{pad_token_id}")}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="</s>", unk_token="<unk>", pad_token="<pad>")


def synthetic_shortlist(config, top_k: int, frequent: int, pool: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(candidates (vocabulary, top_k), frequent ids): each source token's candidates drawn from `pool` target ids."""
    generator = torch.Generator().manual_seed(1)
    pool = min(pool, config.vocab_size)
    candidates = torch.randint(2, pool, (config.vocab_size, top_k), generator=generator)
    return candidates, torch.arange(2, min(2 + frequent, config.vocab_size))


def pytorch_engine(model, length_control: str, **options):
    def decode(batch: torch.Tensor, num_beams: int, new_tokens: int) -> torch.Tensor:
        with torch.inference_mode():
            return model.generate(
                input_ids=batch,
                attention_mask=torch.ones_like(batch),
                num_beams=num_beams,
                do_sample=False,
                **common.exact_length(new_tokens, length_control),
                **options,
            )

    return decode


def onnx_engine(onnx_dir, threads: int, length_control: str, use_shortlist: bool = False):
    from hf_simple_attn.deploy.export import OnnxSeq2SeqModel
    from hf_simple_attn.deploy.onnx_sessions import session_options

    model = OnnxSeq2SeqModel(onnx_dir, session_options=session_options(threads))

    def decode(batch: torch.Tensor, num_beams: int, new_tokens: int) -> torch.Tensor:
        return model.generate(
            batch,
            torch.ones_like(batch),
            num_beams=num_beams,
            use_shortlist=use_shortlist,
            **common.exact_length(new_tokens, length_control),
        )

    return decode


def ctranslate2_engine(folder: str, threads: int, use_vmap: bool = False):
    """Decoding with a `convert_to_ctranslate2` folder (with `use_vmap`, over its vocabulary map)."""
    import ctranslate2

    translator = ctranslate2.Translator(folder, device="cpu", intra_threads=threads, inter_threads=1)

    def decode(batch: torch.Tensor, num_beams: int, new_tokens: int) -> list[list[str]]:
        tokens = [[f"t{index}" if index > 1 else "</s>" for index in row] for row in batch.tolist()]
        results = translator.translate_batch(
            tokens,
            beam_size=num_beams,
            min_decoding_length=new_tokens,
            max_decoding_length=new_tokens,
            use_vmap=use_vmap,
        )
        return [result.hypotheses[0] for result in results]

    return decode


def build_engines(args, workdir: str) -> dict:
    """{engine name: decode(batch, num_beams, new_tokens)} for every preset and reference engine asked for."""
    from hf_simple_attn.deploy.ctranslate2_export import convert_to_ctranslate2, to_marian
    from hf_simple_attn.deploy.export import export_onnx
    from hf_simple_attn.deploy.quantize import quantize_onnx_int8

    engines = {}
    for preset in args.presets:
        common.progress(f"building {preset} at size {args.size}")
        model = common.build_seq2seq(preset, args.size)
        if SHORTLIST_ENGINES & set(args.engines):
            model.set_vocab_shortlist(
                *synthetic_shortlist(model.config, args.shortlist_top_k, args.shortlist_frequent, args.shortlist_pool)
            )
        if preset == "base" and any(name in args.engines for name in REFERENCES):
            model_dir = os.path.join(workdir, "base")
            model.save_pretrained(model_dir)
            word_level_tokenizer(model.config.vocab_size, model.config.pad_token_id).save_pretrained(model_dir)
            if common.MARIAN in args.engines:
                engines[common.MARIAN] = pytorch_engine(to_marian(model), args.length_control)
            for quantization in ("float32", "int8"):
                name = f"ctranslate2-{quantization.replace('float', 'fp')}"
                if not {name, f"{name}+vmap"} & set(args.engines):
                    continue
                folder = convert_to_ctranslate2(model_dir, os.path.join(workdir, name), quantization=quantization)
                for use_vmap, engine in ((False, name), (True, f"{name}+vmap")):
                    if engine in args.engines:
                        engines[engine] = ctranslate2_engine(folder, args.threads, use_vmap)
        engines |= preset_engines(preset, model, args, workdir, export_onnx, quantize_onnx_int8)
    return engines


def preset_engines(preset: str, model, args, workdir: str, export_onnx, quantize_onnx_int8) -> dict:
    wanted, engines = set(args.engines), {}
    if "eager" in wanted:
        engines[f"{preset}/eager"] = pytorch_engine(model, args.length_control)
    if "compile" in wanted:
        compiled = common.build_seq2seq(preset, args.size)
        compiled.forward = torch.compile(compiled.forward)
        engines[f"{preset}/compile"] = pytorch_engine(compiled, args.length_control)
    onnx_kinds = {"onnx", "onnx-int8", "onnx+shortlist", "onnx-int8+shortlist"}
    if wanted & onnx_kinds:
        common.progress(f"exporting {preset} to ONNX")
        folders = {"onnx": export_onnx(model, os.path.join(workdir, f"{preset}-onnx"))}
        if wanted & {"onnx-int8", "onnx-int8+shortlist"}:
            folders["onnx-int8"] = quantize_onnx_int8(folders["onnx"], os.path.join(workdir, f"{preset}-onnx-int8"))
        for kind in sorted(wanted & onnx_kinds):
            folder, use_shortlist = folders[kind.removesuffix("+shortlist")], kind.endswith("+shortlist")
            engines[f"{preset}/{kind}"] = onnx_engine(folder, args.threads, args.length_control, use_shortlist)
    if wanted & {"int8", "int8+shortlist"}:
        quantized = quantize_dynamic_int8(model)
        if "int8" in wanted:
            engines[f"{preset}/int8"] = pytorch_engine(quantized, args.length_control)
        if "int8+shortlist" in wanted:
            engines[f"{preset}/int8+shortlist"] = pytorch_engine(quantized, args.length_control, use_shortlist=True)
    if "shortlist" in wanted:
        engines[f"{preset}/shortlist"] = pytorch_engine(model, args.length_control, use_shortlist=True)
    return engines


def sources(vocab_size: int, sentences: int, length: int, seed: int = 0) -> torch.Tensor:
    """Random token ids ending in </s> (id 0), as a tokenizer would give them."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, vocab_size - 1, (sentences, length), generator=generator)
    ids[:, -1] = 0
    return ids


def decoded_lengths(output) -> set[int]:
    """The number of new tokens of each output: generate's rows less the start token, or CTranslate2's tokens."""
    if isinstance(output, torch.Tensor):
        return {output.shape[1] - 1}
    return {len(tokens) for tokens in output}


def measure_cell(engines: dict, batch_size: int, num_beams: int, args) -> dict:
    sentences = args.single_sentences if batch_size == 1 else batch_size
    batches = list(sources(SIZES[args.size]["vocab_size"], sentences, args.source_length).split(batch_size))
    names = list(engines)

    def run(name):
        def decode_all():
            for batch in batches:
                lengths = decoded_lengths(engines[name](batch, num_beams, args.new_tokens))
                assert lengths == {args.new_tokens}, (name, lengths)

        return decode_all

    common.progress(f"measuring batch {batch_size} beams {num_beams}: warm-up")
    for name in names:
        run(name)()  # warm-up (and compilation)
    walls, cpus, _ = common.interleaved(
        {name: run(name) for name in names}, args.repeats, f"batch {batch_size} beams {num_beams}", sentences
    )
    engines_result = {
        name: {
            "sentences_per_second": common.summary([sentences / wall for wall in walls[name]]),
            "cpu_seconds": common.summary(cpus[name]),
        }
        for name in names
    }
    return {"batch_size": batch_size, "num_beams": num_beams, "sentences": sentences, "engines": engines_result}


def speed(cell: dict, name: str) -> float | None:
    engine = cell["engines"].get(name)
    return None if engine is None else engine["sentences_per_second"]["median"]


def fastest(cell: dict, preset: str, kinds: tuple[str, ...]) -> tuple[str | None, float | None]:
    """The fastest of `preset`'s engines of `kinds` in `cell`: (engine name, sentences/s)."""
    measured = [(speed(cell, f"{preset}/{kind}"), f"{preset}/{kind}") for kind in kinds]
    measured = [(value, name) for value, name in measured if value is not None]
    if not measured:
        return None, None
    value, name = max(measured)
    return name, value


def check_targets(cells: list[dict], presets: list[str]) -> list[dict]:
    """The issue's targets, in the cells of TARGET_CELLS: sh-x's fastest fp32 (int8) path against CTranslate2 fp32
    (int8) on base, and against CTranslate2 with its vocabulary map where that path uses the shortlist; each
    variant's speed-up over base in base's fastest engine kind."""
    checks = []
    for cell in cells:
        if (cell["batch_size"], cell["num_beams"]) not in TARGET_CELLS:
            continue
        where = (
            f"batch {cell['batch_size']}, {'greedy' if cell['num_beams'] == 1 else 'beam ' + str(cell['num_beams'])}"
        )
        for kinds, reference in ((FP32_ENGINES, "ctranslate2-fp32"), (INT8_ENGINES, "ctranslate2-int8")):
            name, value = fastest(cell, "sh-x", kinds)
            references = [reference] + ([f"{reference}+vmap"] if name and name.endswith("shortlist") else [])
            for reference in references:
                if name is not None and speed(cell, reference):
                    ratio = value / speed(cell, reference)
                    checks.append(check(f"{name} vs {reference} (base), {where}", ratio, 1.0))
        base_name, _ = fastest(cell, "base", FP32_ENGINES + INT8_ENGINES)
        if base_name is None:
            continue
        kind = base_name.split("/", 1)[1]
        for preset, target in PAPER_SPEEDUPS.items():
            if preset in presets and speed(cell, f"{preset}/{kind}"):
                ratio = speed(cell, f"{preset}/{kind}") / speed(cell, base_name)
                checks.append(check(f"{preset}/{kind} vs {base_name}, {where}", ratio, target))
    return checks


def check(label: str, measured: float, target: float) -> dict:
    return {"check": label, "target": target, "measured": measured, "reached": measured >= target}


def table(cells: list[dict], engines: list[str]) -> list[str]:
    """Markdown: one row per engine, sentences/s per cell, and the ratio to CTranslate2 fp32 where measured."""
    header = [
        f"b{cell['batch_size']} {'greedy' if cell['num_beams'] == 1 else 'beam' + str(cell['num_beams'])}"
        for cell in cells
    ]
    lines = ["| engine | " + " | ".join(header) + " |", "|---" * (len(cells) + 1) + "|"]
    for name in engines:
        values = []
        for cell in cells:
            value, reference = speed(cell, name), speed(cell, "ctranslate2-fp32")
            ratio = f" ({value / reference:.2f}x)" if value and reference else ""
            values.append("" if value is None else f"{value:.2f}{ratio}")
        lines.append(f"| {name} | " + " | ".join(values) + " |")
    return lines


def chart(data: dict, path: str) -> str | None:
    plt = common.pyplot()
    if plt is None:
        return None
    cells = data["cells"]
    figure, axes = plt.subplots(1, len(cells), figsize=(4.6 * len(cells), 6.5), squeeze=False)
    for axis, cell in zip(axes[0], cells):
        names = list(cell["engines"])
        values = [speed(cell, name) for name in names]
        colours = ["#999999" if "/" not in name else "#3b75af" if "int8" not in name else "#d08c2c" for name in names]
        axis.barh(range(len(names)), values, color=colours)
        axis.set_yticks(range(len(names)), names, fontsize=7)
        axis.invert_yaxis()
        axis.set_xlabel("sentences/s")
        beams = "greedy" if cell["num_beams"] == 1 else f"beam {cell['num_beams']}"
        axis.set_title(f"batch {cell['batch_size']}, {beams}", fontsize=9)
    settings = data["settings"]
    figure.suptitle(
        f"Deployment paths, {settings['size']} size, CPU, {settings['threads']} threads: source "
        f"{settings['source_length']} tokens, {settings['new_tokens']} new tokens; median of {settings['repeats']} "
        "interleaved repeats (grey: transformers / CTranslate2, blue: ours fp32, orange: ours int8)",
        fontsize=9,
    )
    return common.save_chart(plt, figure, path)


def main(argv=None):
    args = parse_args(argv)
    common.setup_threads(args.threads)
    data = {**common.result_header("deployment", args), "cells": []}
    with tempfile.TemporaryDirectory() as workdir:
        engines = build_engines(args, workdir)
        for batch_size in args.batch_sizes:
            for num_beams in args.beams:
                data["cells"].append(measure_cell(engines, batch_size, num_beams, args))
                common.write_json(args.output, data)  # each finished cell is kept if a later one is cut short
    data["targets"] = check_targets(data["cells"], args.presets)
    data["table"] = table(data["cells"], list(engines))
    print("\n".join(data["table"]))
    common.write_results(data, args, chart)
    return data


if __name__ == "__main__":
    main()
