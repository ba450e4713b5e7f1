"""Every encoder (BERT-style) preset exports under `torch.export` and the program computes what eager PyTorch
computes; one preset per family goes through ONNX and ONNX Runtime at other batch sizes and lengths than the
export's; a saved classifier goes through the CLI (float32 and int8) and predicts as the PyTorch model."""

import functools
import importlib.util

import pytest
import torch
from transformers import AutoTokenizer
from transformers.modeling_outputs import MaskedLMOutput, SequenceClassifierOutput

from hf_simple_attn import (
    SimpleAttnBertConfig,
    SimpleAttnBertForMaskedLM,
    SimpleAttnBertForSequenceClassification,
    SimpleAttnBertForTokenClassification,
    SimpleAttnBertModel,
    list_presets,
)
from hf_simple_attn.cli import main
from hf_simple_attn.deploy.export_bert import OnnxBertModel, export_bert_onnx, export_bert_program, save_bert_onnx

from conftest import TINY_BERT, assert_same_maths, build_bert_tokenizer, model_reductions, padded_bert_batch


# One preset per family: dot product, local bands, hard-coded, RAN, Synthesizer, per-head local masks, hard retrieval.
ONNX_PRESETS = ["base", "band6", "hc-sa", "ran-e", "syn-r", "local-all", "hard-all"]
MODEL_CLASSES = {
    "masked-lm": SimpleAttnBertForMaskedLM,
    "sequence-classification": SimpleAttnBertForSequenceClassification,
    "token-classification": SimpleAttnBertForTokenClassification,
    "bare": SimpleAttnBertModel,
    "bare-without-pooler": functools.partial(SimpleAttnBertModel, add_pooling_layer=False),
}
needs_onnxruntime = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("onnx", "onnxruntime", "onnxscript")),
    reason="needs onnx, onnxruntime and onnxscript (the `export` extra)",
)


def make_model(preset: str, head: str = "masked-lm", **config_overrides):
    """A tiny seeded model of `preset` with `head` (a MODEL_CLASSES key), in eval mode; `initializer_range` 0.3
    makes the attention weights differ visibly, three labels for the classifiers."""
    torch.manual_seed(0)
    config = SimpleAttnBertConfig.from_preset(
        preset,
        **TINY_BERT,
        initializer_range=0.3,
        pad_token_id=0,
        id2label={0: "neg", 1: "neutral", 2: "pos"},
        **config_overrides,
    )
    return MODEL_CLASSES[head](config).eval()


@functools.cache
def exported(preset: str, dtype: torch.dtype = torch.float32):
    """(model, program) of `export_bert_program` for a tiny masked-LM `preset` in `dtype`, exported once."""
    model = make_model(preset).to(dtype)
    return model, export_bert_program(model)


def model_inputs(lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded random ids, their mask, and token types: segment 1 from the middle of the row on."""
    input_ids, attention_mask = padded_bert_batch(lengths, seed=seed)
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, input_ids.shape[1] // 2 :] = 1
    return input_ids, attention_mask, token_type_ids


@torch.no_grad()
def eager(model, input_ids, attention_mask, token_type_ids):
    return model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)


@pytest.mark.numerics
@pytest.mark.parametrize("preset", list_presets("encoder"))
def test_every_preset_exports_and_equals_eager(preset):
    """A padded batch of 2, then other batch sizes and lengths (the shortest the program takes included)."""
    model, program = exported(preset, torch.float64)
    program = program.module()
    for lengths in ([7, 4], [11, 3, 9], [2]):
        inputs = model_inputs(lengths)
        with torch.no_grad():
            (logits,) = program(*inputs)
        assert_same_maths(logits, eager(model, *inputs).logits, **model_reductions(model.config))


def test_export_refuses_a_model_in_training_mode():
    with pytest.raises(ValueError, match=r"model\.eval\(\)"):
        export_bert_program(make_model("base").train())


@pytest.mark.numerics
@needs_onnxruntime
@pytest.mark.parametrize("preset", ONNX_PRESETS)
def test_onnx_runtime_logits_equal_pytorch(preset, tmp_path):
    """Batch sizes and lengths other than the export's (2 × 7), a one-token batch included: the graph's shapes are
    dynamic. Lengths beyond the position embeddings are refused."""
    model, program = exported(preset)
    save_bert_onnx(model, program, tmp_path)
    onnx_model = OnnxBertModel(tmp_path)
    for lengths in ([12, 5, 9, 12], [3], [1, 1]):
        inputs = model_inputs(lengths, seed=1)
        output = onnx_model(*inputs)
        assert isinstance(output, MaskedLMOutput)
        # ONNX Runtime in float32, as the ONNX tests below
        assert_same_maths(output.logits, eager(model, *inputs).logits, **model_reductions(model.config))
    assert onnx_model.max_length == TINY_BERT["max_position_embeddings"]
    with pytest.raises(ValueError, match="at most 64"):
        onnx_model(torch.ones(1, 65, dtype=torch.long))


@pytest.mark.numerics
@needs_onnxruntime
@pytest.mark.parametrize("head", ["token-classification", "bare", "bare-without-pooler"])
def test_onnx_model_returns_the_outputs_of_its_model_class(head, tmp_path):
    """The same output class and fields as the PyTorch model (the bare model's pooler output when it has a pooler),
    with defaults for the mask and token types as in PyTorch."""
    model = make_model("hc-sa", head)
    onnx_model = OnnxBertModel(export_bert_onnx(model, tmp_path))
    inputs = model_inputs([6, 9, 2], seed=2)
    for actual, expected in (
        (onnx_model(*inputs), eager(model, *inputs)),
        (onnx_model(inputs[0].tolist()), eager(model, inputs[0], None, None)),
    ):
        assert type(actual) is type(expected) and list(actual.keys()) == list(expected.keys())
        for actual_tensor, expected_tensor in zip(actual.to_tuple(), expected.to_tuple(), strict=True):
            assert_same_maths(actual_tensor, expected_tensor, **model_reductions(model.config))


@pytest.mark.numerics
@needs_onnxruntime
def test_a_mean_pooling_classifier_exports_and_reads_the_real_tokens_only(tmp_path):
    """`classifier_pooling="mean"` averages under the attention mask inside the graph: padded batches of other sizes
    and lengths than the export's give the eager logits."""
    model = make_model("band6", "sequence-classification", classifier_pooling="mean")
    onnx_model = OnnxBertModel(export_bert_onnx(model, tmp_path))
    for lengths in ([12, 5, 9], [3], [1, 7]):
        inputs = model_inputs(lengths, seed=3)
        assert_same_maths(onnx_model(*inputs).logits, eager(model, *inputs).logits, **model_reductions(model.config))


@pytest.mark.numerics
@needs_onnxruntime
def test_onnx_int8_computes_the_tied_masked_lm_output_layer_in_int8(tmp_path):
    """The masked-LM head's output layer shares the embeddings' table; exported as the transpose of that table (too
    large for the exporter to fold: 300 x 32 entries) it stayed a float32 MatMul after int8 quantisation. It must be
    an int8 GEMM like every other weight, and the float32 graph must still give the PyTorch logits."""
    import onnx

    from hf_simple_attn.deploy.quantize import quantize_onnx_int8

    torch.manual_seed(0)
    model = SimpleAttnBertForMaskedLM(SimpleAttnBertConfig(**{**TINY_BERT, "vocab_size": 300})).eval()
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    float32_dir = export_bert_onnx(model, tmp_path / "float32")
    inputs = model_inputs([6, 9], seed=3)
    assert_same_maths(
        OnnxBertModel(float32_dir)(*inputs).logits, eager(model, *inputs).logits, **model_reductions(model.config)
    )
    int8_dir = quantize_onnx_int8(float32_dir, tmp_path / "int8")
    graph = onnx.load(int8_dir / "model.onnx").graph
    dequantized = {output for node in graph.node if node.op_type == "DequantizeLinear" for output in node.output}
    assert not [node.name for node in graph.node if node.op_type == "MatMul" and dequantized & set(node.input)]
    int8_weights = {tuple(weight.dims) for weight in graph.initializer if weight.data_type == onnx.TensorProto.INT8}
    assert (model.config.hidden_size, 300) in int8_weights


def saved_classifier(folder):
    """A sequence classifier (`band6`) and its tokenizer saved in `folder`: (model, tokenizer)."""
    model, tokenizer = make_model("band6", "sequence-classification"), build_bert_tokenizer()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


@pytest.mark.numerics
@needs_onnxruntime
def test_cli_exports_a_classifier_that_predicts_as_pytorch_in_float32_and_int8(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    model, _ = saved_classifier(tmp_path / "run")
    main(["export", str(tmp_path / "run"), str(tmp_path / "onnx"), "--format", "onnx"])
    assert "onnx model written to" in capsys.readouterr().out
    onnx_model = OnnxBertModel(tmp_path / "onnx")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "onnx")
    batch = tokenizer(
        ["the cat sat on the mat", "a big red car runs fast and the dog is slow", "good"],
        ["the dog", "bad", "a small green tree"],
        padding=True,
        return_tensors="pt",
    )
    with torch.no_grad():
        expected = model(**batch).logits
    output = onnx_model(**batch)
    assert isinstance(output, SequenceClassifierOutput)
    assert_same_maths(output.logits, expected, **model_reductions(model.config))  # ONNX Runtime in float32
    labels = [onnx_model.config.id2label[index] for index in output.logits.argmax(-1).tolist()]
    assert labels == [model.config.id2label[index] for index in expected.argmax(-1).tolist()]

    main(["export", str(tmp_path / "run"), str(tmp_path / "int8"), "--format", "onnx", "--quantization", "int8"])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["int8", "onnx", "run"]  # no staging left
    graph = onnx.load(tmp_path / "int8" / "model.onnx").graph
    assert any(node.op_type == "DynamicQuantizeLinear" for node in graph.node)
    assert any(weight.data_type == onnx.TensorProto.INT8 for weight in graph.initializer)
    assert (tmp_path / "int8" / "tokenizer.json").is_file()
    # Per-tensor int8 weights of a 32-wide model initialised at 0.3: within 10 % of the largest logit.
    int8_logits = OnnxBertModel(tmp_path / "int8")(**batch).logits
    assert (int8_logits - expected).abs().max() < 0.1 * expected.abs().max()


def test_cli_refuses_ctranslate2_for_an_encoder_and_a_folder_without_config(tmp_path, capsys):
    saved_classifier(tmp_path / "run")
    for run_dir, out_dir, format_name, message in (
        ("run", "ct2", "ctranslate2", "--format onnx"),
        ("nothing", "onnx", "onnx", "no config.json"),
    ):
        with pytest.raises(SystemExit) as stop:
            main(["export", str(tmp_path / run_dir), str(tmp_path / out_dir), "--format", format_name])
        assert stop.value.code == 2 and message in capsys.readouterr().err
        assert not (tmp_path / out_dir).exists()
