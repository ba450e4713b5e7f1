"""Each benchmark script runs on a tiny size in seconds and writes valid JSON (and a chart when
matplotlib is installed)."""

import importlib.util
import json
import os
import sys
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from conftest import build_tokenizer, make_model


BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCHMARKS)

import bench_decoding  # noqa: E402
import bench_deployment  # noqa: E402
import bench_gpu  # noqa: E402
import bench_int8  # noqa: E402
import bench_length_scaling  # noqa: E402
import bench_shortlist  # noqa: E402
import bench_training  # noqa: E402
import compiled_agreement  # noqa: E402
import count_ops  # noqa: E402
import profile_beam  # noqa: E402
import profile_gpu  # noqa: E402
import summarize  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    yield
    torch.set_num_threads(1)  # the scripts set their own thread count


def tiny_checkpoint(folder, preset: str) -> str:
    """A tiny model of `preset` saved with a tokenizer in `folder/preset`, generating at most 6 tokens; its path."""
    tokenizer = build_tokenizer()
    tokenizer.model_max_length = 16  # the tiny models have 64 positions; test sentences are longer
    model = make_model(preset)
    model.generation_config.max_length = 6
    model.save_pretrained(folder / preset)
    tokenizer.save_pretrained(folder / preset)
    return str(folder / preset)


def load(path):
    with open(path) as handle:
        data = json.load(handle)
    assert data["environment"]["torch_threads"] == 1
    summarize.main([str(path)])  # the README tables are made from it
    return data


def test_decoding_benchmark(tmp_path):
    output = tmp_path / "decoding.json"
    bench_decoding.main(
        [
            "--sizes",
            "tiny",
            "--models",
            "MarianMTModel",
            "base",
            "hc-sa",
            "hc-sa:reference",
            "--batch-sizes",
            "1",
            "3",
            "--beams",
            "1",
            "2",
            "--new-tokens",
            "3",
            "--single-sentences",
            "2",
            "--repeats",
            "2",
            "--threads",
            "1",
            "--output",
            str(output),
        ]
    )
    data = load(output)
    assert [(c["batch_size"], c["num_beams"]) for c in data["cells"]] == [(1, 1), (1, 2), (3, 1), (3, 2)]
    for cell in data["cells"]:
        assert set(cell["models"]) == {"MarianMTModel", "base", "hc-sa", "hc-sa:reference"}
        base = cell["models"]["base"]
        assert base["speedup_vs_base"]["ratio_of_medians"] == 1.0 and base["sentences_per_second"]["n"] == 2
        assert cell["models"]["hc-sa"]["speedup_vs_MarianMTModel"]["paired"]["n"] == 2
    assert data["targets"] == []  # targets are checked at opus-mt size only
    assert data["chart"] is None or os.path.exists(data["chart"])


@pytest.mark.parametrize("sizes", [["16"], ["16", "16"]])
def test_training_benchmark_needs_two_memory_batch_sizes(sizes, capsys):
    with pytest.raises(SystemExit):
        bench_training.parse_args(["--memory-batch-sizes", *sizes])
    assert "--memory-batch-sizes: the memory fit needs at least two different batch sizes" in capsys.readouterr().err


def test_training_benchmark(tmp_path):
    output = tmp_path / "training.json"
    bench_training.main(
        [
            "--sizes",
            "tiny",
            "--models",
            "MarianMTModel",
            "base",
            "hc-sa",
            "--batch-size",
            "2",
            "--source-length",
            "6",
            "--target-length",
            "5",
            "--memory-batch-sizes",
            "1",
            "2",
            "4",
            "--repeats",
            "2",
            "--threads",
            "1",
            "--output",
            str(output),
        ]
    )
    data = load(output)
    models = data["sizes"][0]["models"]
    for name, entry in models.items():
        memory = entry["memory"]
        assert memory["peak_bytes"][0] < memory["peak_bytes"][-1], name  # grows with the batch
        assert memory["fit_bytes_per_sentence"] > 0 and memory["max_tokens_per_batch"] % 11 == 0
        assert entry["tokens_per_second"]["n"] == 2
    assert models["base"]["vs_base"]["tokens_per_batch_ratio"] == 1.0
    assert models["base"]["loss_chunk_size"] > 0  # our models train with the chunked loss by default

    full_logits = tmp_path / "training_full_logits.json"
    bench_training.main(
        [
            "--sizes",
            "tiny",
            "--models",
            "MarianMTModel",
            "base",
            "--batch-size",
            "2",
            "--source-length",
            "6",
            "--target-length",
            "5",
            "--memory-batch-sizes",
            "1",
            "2",
            "4",
            "--repeats",
            "1",
            "--threads",
            "1",
            "--loss-chunk-size",
            "0",
            "--output",
            str(full_logits),
        ]
    )
    models = load(full_logits)["sizes"][0]["models"]
    # with full logits our base has Marian's parameters and activations: the same memory, up to a few small tensors
    for ours, marian in zip(models["base"]["memory"]["peak_bytes"], models["MarianMTModel"]["memory"]["peak_bytes"]):
        assert ours == pytest.approx(marian, rel=1e-3)


def test_length_scaling_benchmark(tmp_path):
    output = tmp_path / "length_scaling.json"
    bench_length_scaling.main(
        [
            "--size",
            "tiny",
            "--models",
            "BertModel",
            "base",
            "hc-sa-conv",
            "hc-sa-conv:reference",
            "--lengths",
            "16",
            "32",
            "64",
            "--reference-max-length",
            "32",
            "--slope-from",
            "16",
            "--repeats",
            "1",
            "--threads",
            "1",
            "--output",
            str(output),
        ]
    )
    models = load(output)["models"]
    assert models["hc-sa-conv"]["lengths"] == [16, 32, 64] and models["hc-sa-conv:reference"]["lengths"] == [16, 32]
    # the reference path builds (heads, n, n) tables; the convolution does not
    assert models["hc-sa-conv:reference"]["memory_exponent"] > models["hc-sa-conv"]["memory_exponent"]
    assert all(b > 0 for b in models["BertModel"]["peak_bytes"])


@pytest.mark.skipif(importlib.util.find_spec("ctranslate2") is None, reason="ctranslate2 missing")
def test_int8_benchmark(tmp_path):
    checkpoints = [tiny_checkpoint(tmp_path, preset) for preset in ("base", "hc-sa")]
    output = tmp_path / "int8.json"
    bench_int8.main(
        [
            "--checkpoints",
            *checkpoints,
            "--sentences",
            "5",
            "--batch-size",
            "2",
            "--beams",
            "2",
            "--repeats",
            "2",
            "--threads",
            "1",
            "--output",
            str(output),
        ]
    )
    with open(output) as handle:
        data = json.load(handle)
    assert data["sentences"] == 5 and data["environment"]["torch_threads"] == 1
    base, hc_sa = data["checkpoints"]
    onnx_engines = ["onnx-fp32", "onnx-int8"]
    assert list(base["engines"]) == [
        "pytorch-fp32",
        "pytorch-int8",
        *onnx_engines,
        "ctranslate2-fp32",
        "ctranslate2-int8",
    ]
    assert list(hc_sa["engines"]) == ["pytorch-fp32", "pytorch-int8", *onnx_engines]  # CTranslate2: base only
    fp32 = base["engines"]["pytorch-fp32"]
    assert fp32["greedy"]["identical"] == 1.0 and fp32["vs_pytorch_fp32"]["beam_bleu_change"] == 0
    assert base["engines"]["ctranslate2-fp32"]["greedy"]["identical"] == 1.0
    for checkpoint in (base, hc_sa):
        assert checkpoint["engines"]["onnx-fp32"]["greedy"]["identical"] == 1.0
        assert checkpoint["engines"]["onnx-fp32"]["beam"]["identical"] == 1.0
    assert fp32["greedy"]["sentences_per_second"]["n"] == 2
    assert [check["check"] for check in data["checks"]] == [
        "base pytorch-int8",
        "base onnx-int8",
        "base ctranslate2-int8",
        "hc-sa pytorch-int8",
        "hc-sa onnx-int8",
    ]


def test_shortlist_benchmark(tmp_path):
    output = tmp_path / "shortlist.json"
    bench_shortlist.main(
        [
            "--checkpoints",
            tiny_checkpoint(tmp_path, "base"),
            "--top-k",
            "3",
            "--frequent",
            "2",
            "--sentences",
            "5",
            "--batch-size",
            "2",
            "--beams",
            "2",
            "--threads",
            "1",
            "--large-size",
            "tiny",
            "--large-tokens",
            "3",
            "--large-repeats",
            "2",
            "--large-decode-repeats",
            "1",
            "--output",
            str(output),
        ]
    )
    with open(output) as handle:
        data = json.load(handle)
    assert data["environment"]["torch_threads"] == 1
    [base] = data["checkpoints"]
    assert base["shortlist"]["test"]["sentences"] == 5 and 0 < base["shortlist"]["test"]["coverage"] <= 1
    assert list(base["greedy"]) == ["full", "shortlist", "own"] and list(base["beam"]) == ["full", "shortlist"]
    assert base["greedy"]["full"]["identical"] == 1.0 and base["beam"]["full"]["vs_full"]["bleu_change"] == 0
    large = data["large_vocabulary"]
    assert large["vocab_size"] == 100 and large["projection"]["shortlist"]["sentences_per_second"]["n"] == 2


@pytest.mark.skipif(importlib.util.find_spec("ctranslate2") is None, reason="ctranslate2 missing")
def test_deployment_benchmark(tmp_path):
    output = tmp_path / "deployment.json"
    bench_deployment.main(
        [
            "--size",
            "tiny",
            "--presets",
            "base",
            "sh-x",
            "--engines",
            "MarianMTModel",
            "ctranslate2-fp32",
            "ctranslate2-int8",
            "ctranslate2-int8+vmap",
            "eager",
            "int8",
            "shortlist",
            "int8+shortlist",
            "onnx+shortlist",
            "--batch-sizes",
            "2",
            "--beams",
            "1",
            "2",
            "--new-tokens",
            "3",
            "--shortlist-top-k",
            "3",
            "--repeats",
            "1",
            "--threads",
            "1",
            "--output",
            str(output),
        ]
    )
    data = load(output)
    assert [(cell["batch_size"], cell["num_beams"]) for cell in data["cells"]] == [(2, 1), (2, 2)]
    engines = ["MarianMTModel", "ctranslate2-fp32", "ctranslate2-int8", "ctranslate2-int8+vmap"] + [
        f"{preset}/{kind}"
        for preset in ("base", "sh-x")
        for kind in ("eager", "onnx+shortlist", "int8", "int8+shortlist", "shortlist")
    ]
    assert list(data["cells"][0]["engines"]) == engines
    assert data["cells"][1]["engines"]["sh-x/shortlist"]["sentences_per_second"]["n"] == 1
    assert len(data["table"]) == 2 + len(engines) and "(1.00x)" in data["table"][3]
    assert data["targets"] == []  # the targets are checked at batch size 64 only


def test_beam_profile(tmp_path):
    output = tmp_path / "profile_beam.json"
    data = profile_beam.main(
        [
            "--size",
            "tiny",
            "--presets",
            "sh-x",
            "--engines",
            "ctranslate2-fp32",
            "eager",
            "--batch-size",
            "2",
            "--beams",
            "2",
            "--new-tokens",
            "3",
            "--threads",
            "1",
            "--length-control",
            "min-new-tokens",
            "--output",
            str(output),
        ]
    )
    assert json.loads(output.read_text())["engines"].keys() == {"ctranslate2-fp32", "base/eager", "sh-x/eager"}
    assert data["engines"]["ctranslate2-fp32"]["sections"] == {}  # C++: timed as a whole
    sections = data["engines"]["sh-x/eager"]["sections"]
    for label in (
        "model forward (PyTorch)",
        "logits processors",
        "top-k continuations",
        "cache reorder (PyTorch cache)",
    ):
        assert 0 < sections[label]["share"] < 1, label


def test_exact_length_decodes_exactly_the_tokens_asked_for():
    model = bench_deployment.common.build_seq2seq("sh-x", "tiny")
    batch = bench_deployment.sources(model.config.vocab_size, 2, 5)
    for control in ("no-eos", "min-new-tokens"):
        for num_beams in (1, 2):
            lengths = bench_deployment.common.exact_length(4, control)
            output = model.generate(input_ids=batch, num_beams=num_beams, **lengths)
            assert output.shape == (2, 5), (control, num_beams)


def test_operator_counter_skips_views_and_detach():
    x = torch.ones(2, 3)

    def function():
        y = x.view(3, 2).t().detach()  # views: not counted
        return (y + 1).to(torch.float64)

    assert count_ops.count_operators(function) == {"total": 2, "operators": {"aten.add": 1, "aten._to_copy": 1}}


def test_count_ops(tmp_path):
    output = tmp_path / "count_ops.json"
    count_ops.main(["--presets", "hc-sa", "hard-dec", "--size", "tiny", "--threads", "1", "--output", str(output)])
    data = load(output)
    seq2seq, encoder = data["seq2seq"], data["encoder"]
    assert list(seq2seq) == ["MarianMTModel", "base", "hc-sa", "hard-dec"]
    assert list(encoder) == ["BertModel", "base", "hc-sa"]  # hard-dec is a seq2seq preset only
    for models, reference, steps in (
        (seq2seq, "MarianMTModel", ["training_step", "decoding_step", "static_decoding_step"]),
        (encoder, "BertModel", ["training_step"]),
    ):
        for model in models.values():
            assert set(model["vs_base"]) == set(model[f"vs_{reference}"]) == set(steps)
            for step in steps:
                assert model[step]["total"] == sum(model[step]["operators"].values()) > 0
                ratio = model[step]["total"] / models["base"][step]["total"]
                assert model["vs_base"][step]["ratio"] == pytest.approx(ratio)
        assert models["base"]["vs_base"]["training_step"] == {
            "ratio": 1.0,
            "differences": [],
            "module_differences": [],
        }
    # The counts are exact: a recount of MarianMTModel's training step gives the same operators.
    args = count_ops.parse_args(["--size", "tiny"])
    marian = count_ops.build("seq2seq", "MarianMTModel", count_ops.COUNT_SIZES["tiny"], args.seed).train()
    batch = count_ops.make_batch(marian, args)
    recount = count_ops.count_operators(
        lambda: count_ops.training_step(marian, batch), modules=count_ops.module_names(marian)
    )
    modules = recount.pop("modules").values()  # every operator counted for one module
    assert sum(count["forward"] + count["backward"] for count in modules) == recount["total"]
    assert recount == seq2seq["MarianMTModel"]["training_step"]
    # Naming the modules (hooks on each) changes nothing that runs.
    assert count_ops.count_operators(lambda: count_ops.training_step(marian, batch)) == recount
    assert "targets" not in data  # a diagnostic: the GPU figures decide
    # hard-dec differs from base in its decoder's attention heads only
    changed = {row["module"] for row in seq2seq["hard-dec"]["vs_base"]["training_step"]["module_differences"]}
    assert changed == {"model.decoder.layers.self_attn.heads.groups", "model.decoder.layers.encoder_attn.heads.groups"}
    assert "| hard-dec | decoder.layers." in "\n".join(summarize.count_ops(data))


def test_operator_counter_names_the_module_of_each_operator():
    """Forward operators count for the innermost module running, backward ones for the module whose forward recorded
    them, the work between submodules for the enclosing module; a list's layers count together; an unhooked module's
    operators count for the module around it."""

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(3, 4)
            self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])

        def forward(self, x):
            hidden = self.embed(x).exp()  # the model's own
            for layer in self.layers:
                hidden = torch.tanh(layer(hidden))  # tanh: the model's own too
            return hidden.sum()

    model, x = Model(), torch.randn(5, 3)

    def step():
        model.zero_grad(set_to_none=True)
        model(x).backward()

    counts = count_ops.count_operators(step, modules=count_ops.ModuleNames(model))
    assert counts["total"] == 19
    assert counts["modules"] == {
        # exp, 2 tanh, sum and the loss's initial gradient (ones_like); backward: mul (exp), 2 tanh_backward
        "(the model)": {"forward": 5, "backward": 3},
        "embed": {"forward": 1, "backward": 2},  # addmm; mm and sum for the weight and bias (x needs no gradient)
        "layers": {"forward": 2, "backward": 6},  # 2 x (addmm; mm for the input, mm and sum for the parameters)
    }
    unhooked = count_ops.count_operators(step, modules=count_ops.ModuleNames(model, unhooked=(model.embed,)))
    assert unhooked["modules"]["(the model)"] == {"forward": 6, "backward": 5}
    assert "embed" not in unhooked["modules"]


def test_gpu_benchmark_largest_batch_search():
    """Doubling then bisecting finds the largest batch within the cap; running out of memory counts as over it."""
    args = SimpleNamespace(
        batch_size=4, memory_granularity=2, memory_max_sentences=1000, source_length=3, target_length=2
    )
    linear = SimpleNamespace(peak_bytes=lambda sentences: 100 + 10 * sentences)
    result = bench_gpu.largest_batch(linear, 100 + 10 * 23, args)
    assert (result["max_sentences"], result["max_tokens"], result["peak_bytes"]) == (22, 110, 140)
    assert {4, 8, 16, 32} <= {sentences for sentences, _ in result["peaks"]}  # doubled from the training batch
    out_of_memory = SimpleNamespace(peak_bytes=lambda sentences: 10 * sentences if sentences <= 12 else None)
    assert bench_gpu.largest_batch(out_of_memory, 10**6, args)["max_sentences"] == 12
    assert bench_gpu.largest_batch(linear, 10**6, args)["search_limit_reached"]


def test_gpu_benchmark_compiles_the_chosen_models_base_first():
    assert bench_gpu.parse_args([]).batch_size == 521  # 25,008 target tokens of 48 a sentence
    assert bench_gpu.compile_order(["gmm", "mine", "hc-sa", "base"], None) == ["base", "hc-sa", "gmm", "mine"]
    assert bench_gpu.compile_order(["gmm", "hc-sa", "base"], ["hc-sa", "base"]) == ["base", "hc-sa"]
    with pytest.raises(SystemExit, match="--compile-models: sh-x not among --models \\(base, hc-sa\\)"):
        bench_gpu.main(["--models", "base", "hc-sa", "--compile-models", "sh-x", "base"])


def test_gpu_benchmark(tmp_path):
    output = tmp_path / "gpu.json"
    models = ["MarianMTModel", "base", "sh-x"]
    bench_gpu.main(
        ["--device", "cpu", "--size", "tiny", "--models", *models, "--no-compile", "--threads", "1"]
        + ["--batch-size", "4", "--source-length", "6", "--target-length", "5", "--warmup-steps", "1", "--steps", "2"]
        + ["--memory-cap-gib", "0.001", "--memory-granularity", "16"]
        + ["--decode-batch-sizes", "2", "1", "--beams", "1", "2", "--decode-source-length", "5", "--new-tokens", "3"]
        + ["--single-sentences", "2", "--decode-repeats", "2", "--output", str(output)]
    )
    data = load(output)
    assert data["environment"]["device"]["type"] == "cpu" and data["build_errors"] == {}
    assert list(data["sections"]) == ["training", "memory", "decoding"]  # --no-compile: no compiled-training
    assert all(section["skipped"] == [] for section in data["sections"].values())
    not_applicable = {"share": None, "note": profile_gpu.DEVICE_BUSY_CPU_NOTE}

    training = data["training"]["models"]
    assert list(training) == models and all(list(model) == ["parameters", "eager"] for model in training.values())
    assert training["base"]["eager"]["vs_base"]["ratio_of_medians"] == 1.0
    assert training["sh-x"]["eager"]["vs_MarianMTModel"]["paired"]["n"] == 2
    assert training["sh-x"]["eager"]["target_tokens_per_second"]["n"] == 2
    assert training["sh-x"]["eager"]["device_busy"] == not_applicable

    memory = data["memory"]["models"]
    for model in memory.values():
        assert model["max_tokens"] == model["max_sentences"] * 11 > 0
        fitting = [peak for sentences, peak in model["peaks"] if sentences <= model["max_sentences"]]
        assert max(fitting) <= data["memory"]["cap_bytes"] < max(peak for _, peak in model["peaks"])
    assert memory["base"]["vs_base"]["tokens_per_batch_ratio"] == 1.0

    cells = data["decoding"]["cells"]
    assert [(cell["batch_size"], cell["num_beams"], cell["sentences"]) for cell in cells] == [
        (2, 1, 2),
        (2, 2, 2),
        (1, 1, 2),
        (1, 2, 2),
    ]
    for cell in cells:
        assert list(cell["models"]) == models
        assert cell["models"]["sh-x"]["eager"]["sentences_per_second"]["n"] == 2
        assert cell["models"]["base"]["best"]["vs_base"]["ratio_of_medians"] == 1.0
        assert cell["models"]["sh-x"]["eager"]["vs_base_fastest"] == cell["models"]["sh-x"]["best"]["vs_base"]
    assert cells[0]["models"]["sh-x"]["eager"]["device_busy"] == not_applicable  # profiled: the first cell only
    assert "device_busy" not in cells[1]["models"]["sh-x"]["eager"]
    # The targets measured at this size: training and memory (the decoding ones are at batch 64).
    assert [check["check"].split(" ")[0] for check in data["targets"]] == ["sh-x", "base", "sh-x"]


def test_gpu_benchmark_compiled(tmp_path):
    """Compiled training, and decoding with the static cache and a CompileConfig as users compile it, for base and
    the anchor, MarianMTModel (dynamo's eager backend: the harness is tested here, not inductor)."""
    output = tmp_path / "gpu.json"
    models, compiled = ["MarianMTModel", "base", "sh-x"], ["base", "MarianMTModel"]  # in compile order
    bench_gpu.main(
        ["--device", "cpu", "--size", "tiny", "--models", *models, "--compile-models", *compiled, "--threads", "1"]
        + ["--sections", "compiled-training", "decoding", "--compile-backend", "eager", "--batch-size", "4"]
        + ["--source-length", "6", "--target-length", "5", "--warmup-steps", "1", "--steps", "2"]
        + ["--decode-batch-sizes", "2", "--beams", "1", "2", "--decode-source-length", "5", "--new-tokens", "3"]
        + ["--decode-repeats", "2", "--output", str(output)]
    )
    data = load(output)
    assert list(data["sections"]) == ["compiled-training", "decoding"]
    assert all(section["skipped"] == [] for section in data["sections"].values())
    not_applicable = {"share": None, "note": profile_gpu.DEVICE_BUSY_CPU_NOTE}

    compiled_training = data["compiled-training"]["models"]
    assert list(compiled_training) == compiled
    for model in compiled_training.values():
        assert model["compiled"]["target_tokens_per_second"]["n"] == model["eager"]["step_seconds"]["n"] == 2
        assert model["compiled"]["vs_eager"]["paired"]["n"] == 2 and model["compiled"]["compile_seconds"] > 0
        assert model["compiled"]["device_busy"] == not_applicable
    assert compiled_training["MarianMTModel"]["compiled"]["vs_base"]["paired"]["n"] == 2

    cells = data["decoding"]["cells"]
    assert [(cell["batch_size"], cell["num_beams"]) for cell in cells] == [(2, 1), (2, 2)]
    assert "note" not in cells[0] and "eagerly" in cells[1]["note"]
    for cell in cells:
        assert cell["graphs_compiled_in_repeats"] == 0  # one graph per cell, compiled in its first call
        assert "compiled" not in cell["models"]["sh-x"]
        for name in compiled:
            entry = cell["models"][name]["compiled"]
            assert entry["method"].startswith("generate(cache_implementation='static'")
            assert entry["sentences_per_second"]["n"] == 2 and "vs_base_fastest" in entry
            # Greedy steps are compiled, beam search's run eagerly (transformers 5.24).
            assert (entry["first_call_graphs"] > 0) == (cell["num_beams"] == 1), (name, cell["num_beams"])
    assert cells[0]["models"]["MarianMTModel"]["compiled"]["device_busy"] == not_applicable
    identity = data["decoding"]["identical_to_eager"]
    assert list(identity) == compiled
    for entry in identity.values():  # dynamo's eager backend runs eager's operators, on the static cache
        assert (entry["cell"], entry["float32"], entry["bfloat16"]) == ("batch 2 greedy", 1.0, 1.0)


def test_gpu_profile_on_a_cpu(tmp_path, capsys):
    """On a CPU the profile has no CUDA fields and says so; the operator counts and times are there."""
    output = tmp_path / "profile_gpu.json"
    profile_gpu.main(
        ["--device", "cpu", "--size", "tiny", "--models", "MarianMTModel", "base", "--threads", "1"]
        + ["--batch-size", "2", "--source-length", "5", "--target-length", "4", "--warmup-steps", "1", "--steps", "1"]
        + ["--decode-batch-size", "2", "--decode-source-length", "4", "--new-tokens", "2", "--top", "3"]
        + ["--output", str(output)]
    )
    data = json.loads(output.read_text())
    assert data["benchmark"] == "profile_gpu" and data["environment"]["device"]["type"] == "cpu"
    assert data["cuda"] is False and data["note"] == profile_gpu.CPU_NOTE
    assert list(data["models"]) == ["MarianMTModel", "base"]
    for model in data["models"].values():
        for phase in ("training", "decoding"):
            result = model[phase]
            assert not {"device_kernels", "device_kernel_ms", "runtime_calls", "host_waits_and_copies"} & set(result)
            assert isinstance(result["operator_calls"], int) and result["operator_calls"] > 0
            assert result["wall_ms"] > 0 and result["self_cpu_ms"] > 0 and len(result["wall_ms_runs"]) == 1
            for top in ("top_operators_by_count", "top_operators_by_self_cpu"):
                assert len(result[top]) == 3
                assert all(isinstance(row["calls"], int) and row["calls"] > 0 for row in result[top])
            counts = [row["calls"] for row in result["top_operators_by_count"]]
            assert counts == sorted(counts, reverse=True)
            ratios = {"wall_ms", "self_cpu_ms", "operator_calls"}  # no kernels, no host waits on a CPU
            assert set(result["vs_base"]) == set(result["vs_MarianMTModel"]) == ratios
    assert data["models"]["base"]["training"]["vs_base"]["operator_calls"] == 1.0
    summarize.main([str(output)])
    assert "training step: 2 sentences" in capsys.readouterr().out
    marian = data["models"]["MarianMTModel"]["decoding"]
    assert marian["vs_base"]["operator_calls"] == pytest.approx(
        marian["operator_calls"] / data["models"]["base"]["decoding"]["operator_calls"]
    )


def test_gpu_presets_table_gives_each_preset_its_ratios_to_base():
    """The family pages' GPU rows (docs/hooks.py `<!-- gpu:... -->`), from the committed bench_gpu.py run."""
    with open(os.path.join(BENCHMARKS, "results", "gpu.json")) as handle:
        data = json.load(handle)
    lines = summarize.gpu_presets(data, ["sh-x", "gmm"])
    rows = {line.split(" | ")[0].strip("| `"): line for line in lines if line.startswith("| `")}
    assert list(rows) == ["sh-x", "gmm"]
    ratio = data["training"]["models"]["sh-x"]["eager"]["vs_base"]["ratio_of_medians"]
    assert rows["sh-x"].split(" | ")[1] == f"{ratio:.2f}×"
    with pytest.raises(ValueError, match="not measured"):
        summarize.gpu_presets(data, ["no-such-preset"])


def test_compiled_agreement_classifies_each_first_difference():
    """A sentence that differs where the two picks' exact gap is within the two ways' logit errors is a rounding
    flip; one where the gap is wider is a defect; identical sentences are neither."""
    pad = 0
    reference = torch.tensor([[pad, 5, 6, 2], [pad, 5, 6, 2], [pad, 7, 2, pad]])
    sequences = torch.tensor([[pad, 5, 6, 2], [pad, 5, 8, 2], [pad, 9, 2, pad]])
    exact = torch.zeros(3, 3, 10, dtype=torch.float64)
    exact[1, 1, 6], exact[1, 1, 8] = 1.0, 0.9  # row 1 differs at step 1 by 0.1
    exact[2, 0, 7], exact[2, 0, 9] = 1.0, 0.0  # row 2 differs at step 0 by 1.0
    logits = exact + 0.06  # this way's error: 0.06 at every step
    reference_errors = torch.full((3, 3), 0.05, dtype=torch.float64)
    way = compiled_agreement.Variant()
    way.add(sequences, logits, exact, reference, reference_errors, pad)
    summary = way.summary()
    assert [(flip["step"], flip["rounding"]) for flip in way.flips] == [(1, True), (0, False)]
    assert summary["differing"] == 2 and summary["rounding_flips"] == 1
    assert summary["identical"] == pytest.approx(1 / 3) and summary["identical_but_rounding"] == pytest.approx(2 / 3)
    assert summary["defects"][0]["gap"] == pytest.approx(1.0)
    # errors over the steps with the reference's prefix: row 0's 3, row 1's 2, row 2's first
    assert summary["logit_error"]["steps"] == 6 and summary["logit_error"]["max"] == pytest.approx(0.06)


def test_compiled_agreement_benchmark(tmp_path):
    """On a tiny checkpoint and the embedded corpus: dynamo's eager backend runs eager's operators on the static
    cache, so in float32 every sentence is eager's and the logit errors are float32 rounding."""
    output = tmp_path / "compiled_agreement.json"
    compiled_agreement.main(
        ["--checkpoints", tiny_checkpoint(tmp_path, "hc-sa"), "--dataset-name", "embedded", "--sentences", "4"]
        + ["--batch-size", "2", "--backend", "eager", "--threads", "1", "--output", str(output)]
    )
    data = load(output)
    (result,) = data["checkpoints"].values()
    assert result["preset"] == "hc-sa" and list(result["dtypes"]) == ["float32", "bfloat16"]
    float32 = result["dtypes"]["float32"]
    for way in ("static_eager", "compiled"):
        assert float32[way]["identical"] == 1.0 and float32[way]["defects"] == []
        assert 0 < float32[way]["logit_error"]["steps"] and float32[way]["logit_error"]["max"] < 1e-4
    for ways in result["dtypes"].values():
        compiled = ways["compiled"]
        assert compiled["differing"] == compiled["rounding_flips"] + len(compiled["defects"])
